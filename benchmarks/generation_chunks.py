"""FLUX generation's block programs with their MLPs in token chunks (models/token_chunks.py, compile --mlp-chunk):
the planned arena of the exported programs at FLUX.1-dev's real width, and what the chunks cost in time.

    nice -n 10 .venv/bin/python benchmarks/generation_chunks.py      # -> benchmarks/results/generation_chunks.{json,md}

arena  one FLUX.1-dev double and one single block (its real config: width 3072, 24 heads of 128, MLP ratio 4;
       random weights, int8 as generation exports them) at 1024 px (4,096 image + 512 text tokens), each exported as
       export/generation_stage.py exports a block program (LiftedBlock, every weight an input, XNNPACK matmuls:
       export_module_program(..., "xnnpack", matmuls=True)) under each chunk setting; its planned arena
       (non_const_buffer_sizes) beside the estimate's arena for the same block (memory_estimate/generation.py
       trace_generation: the traced peak plus XNNPACK's workspace, which the plan does not hold)
time   the 288M FLUX layout's blocks (benchmarks/memory_speed.py flux-layout-300m: width 1024, 8 heads of 128; 4
       double + 8 single blocks, 128 text tokens) at 1024 px, each block program exported the same way and run by
       ExecuTorch's Python bindings (XNNPACK's threadpool on this machine's cores): CPU seconds per call (process
       time, the best of --repeats), and per sampler step = 2 guidance branches x the layout's blocks of that kind
       (embed and head are not chunked: left out); --time-blocks picks the kinds
The arena rows of an earlier run are kept unless --fresh (each real-width export takes minutes here), and a block
kind timed earlier is kept when --time-blocks leaves it out (the results: `--parts time --time-blocks single`, then
`double`, then `--parts arena` for the missing settings).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks._meta import provenance, provenance_md  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
# (attention chunk, MLP chunk): the old advice (512), each chunk alone and both (estimate's advice: 128 + 1024)
SETTINGS = ((512, None), (256, None), (256, 1024), (128, None), (128, 1024))
TIME_SETTINGS = ((128, None), (128, 1024))
LAYOUT = {"width": 1024, "heads": 8, "head_dim": 128, "double": 4, "single": 8, "text_tokens": 128}


def block_program(kind: str, heads: int, head_dim: int, image_tokens: int, text_tokens: int, attention_chunk,
                  mlp_chunk) -> tuple[bytes, dict, tuple]:
    import torch
    from diffusers.models.transformers.transformer_flux import FluxSingleTransformerBlock, FluxTransformerBlock

    from ditskip_edge.models.attention import chunked_attention
    from ditskip_edge.models.token_chunks import chunked_mlp
    from ditskip_edge.quantize import QuantSpec, quantize_frozen_layers
    from export.executorch_preprocess import export_module_program
    from export.generation_modules import LiftedBlock, block_states
    torch.manual_seed(0)
    d = heads * head_dim
    block = (FluxTransformerBlock if kind == "double" else FluxSingleTransformerBlock)(d, heads, head_dim).eval()
    quantize_frozen_layers(block.requires_grad_(False), QuantSpec("int8"))
    names = sorted(block_states(block))
    g = torch.Generator().manual_seed(1)
    n = image_tokens + text_tokens
    acts = (torch.randn(1, image_tokens, d, generator=g), torch.randn(1, text_tokens, d, generator=g),
            torch.randn(1, d, generator=g), torch.randn(n, head_dim, generator=g).cos(),
            torch.randn(n, head_dim, generator=g).sin())
    example = acts + tuple(block_states(block)[k].detach() for k in names)
    lifted = LiftedBlock(SimpleNamespace(arch="flux"), block, (0, 0), names)
    with chunked_attention(attention_chunk), chunked_mlp(block, mlp_chunk), torch.no_grad():
        pte, memory = export_module_program(lifted, example, "xnnpack", planned_inputs=False, mm_rewrite=True,
                                            matmuls=True)
    return pte, memory, example


def arena_rows(done: list[dict]) -> list[dict]:
    """One row per block kind and setting; the rows of `done` (an earlier run's) are kept, the missing exported."""
    from ditskip_edge.memory_estimate.generation import GenerationConfig, trace_generation
    from ditskip_edge.models.loading import resolve_spec
    spec = resolve_spec("flux-dev")
    c = spec.transformer_config
    rows = []
    have = {(r["block"], r["attention_chunk"], r["mlp_chunk"]): r for r in done}
    for ac, mc in SETTINGS:
        est = trace_generation(GenerationConfig(spec, 1024, spec.text.seq_len, "int8", attention_chunk=ac,
                                                mlp_chunk=mc))["arenas_bytes"]
        for kind in ("double", "single"):
            if (kind, ac, mc) in have:
                rows.append(have[(kind, ac, mc)])
                continue
            t0 = time.time()
            _, memory, _ = block_program(kind, int(c["num_attention_heads"]), int(c["attention_head_dim"]),
                                         (1024 // spec.pixel_multiple) ** 2, spec.text.seq_len, ac, mc)
            rows.append({"model": "flux-dev", "block": kind, "px": 1024, "attention_chunk": ac, "mlp_chunk": mc,
                         "planned_arena_bytes": memory["planned_arena_bytes"],
                         "estimate_arena_bytes": est[f"block.{kind}"], "export_s": round(time.time() - t0, 1)})
            print(rows[-1], file=sys.stderr, flush=True)
    return rows


def time_rows(repeats: int, kinds: tuple[str, ...]) -> list[dict]:
    import torch
    from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer
    lay = LAYOUT
    image_tokens = (1024 // 16) ** 2
    rows = []
    for ac, mc in TIME_SETTINGS:
        per = {}
        for kind in kinds:
            pte, memory, example = block_program(kind, lay["heads"], lay["head_dim"], image_tokens,
                                                 lay["text_tokens"], ac, mc)
            program = _load_for_executorch_from_buffer(pte)
            inputs = list(example)
            program.forward(inputs)                                   # warm: XNNPACK's delegates set up
            best = float("inf")
            for _ in range(repeats):
                t0 = time.process_time()
                program.forward(inputs)
                best = min(best, time.process_time() - t0)
            per[kind] = {"cpu_s": round(best, 3), "planned_arena_bytes": memory["planned_arena_bytes"]}
            del program
        step = 2 * sum(lay[k] * per[k]["cpu_s"] for k in kinds)
        rows.append({"layout": "flux-layout-300m", "px": 1024, "attention_chunk": ac, "mlp_chunk": mc,
                     "blocks": per, "cpu_s_per_sampler_step_of_these_blocks": round(step, 2), "kinds": list(kinds),
                     "torch_threads": torch.get_num_threads()})
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def markdown(doc: dict) -> str:
    out = ["# FLUX block programs with their MLPs in token chunks", "", provenance_md(doc["provenance"]), "",
           __doc__.split("\n\n", 2)[2].strip(), "",
           "## Planned arena, FLUX.1-dev real width, 1024 px", "",
           "| block | attention chunk | MLP chunk | planned arena MB (exported program) | estimate's arena MB "
           "(trace + workspace) |", "|---|---|---|---|---|"]
    for r in doc["arena"]:
        out.append(f"| {r['block']} | {r['attention_chunk']} | {r['mlp_chunk'] or '-'} | "
                   f"{r['planned_arena_bytes'] / 1e6:.1f} | {r['estimate_arena_bytes'] / 1e6:.1f} |")
    out += ["", "## Time, the 288M FLUX layout at 1024 px (CPU s, this machine)", "",
            "| attention chunk | MLP chunk | block | CPU s per call | planned arena MB | CPU s per sampler step "
            "(2 branches x the layout's blocks of this kind) |", "|---|---|---|---|---|---|"]
    for r in doc["time"]:
        for kind, b in r["blocks"].items():
            out.append(f"| {r['attention_chunk']} | {r['mlp_chunk'] or '-'} | {kind} | {b['cpu_s']} | "
                       f"{b['planned_arena_bytes'] / 1e6:.1f} | {2 * LAYOUT[kind] * b['cpu_s']:.2f} |")
    return "\n".join(out) + "\n"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--parts", nargs="*", default=["arena", "time"], choices=["arena", "time"])
    p.add_argument("--time-blocks", nargs="+", default=["double", "single"], choices=["double", "single"],
                   help="the block kinds timed (a sampler step's share counts these alone)")
    p.add_argument("--fresh", action="store_true", help="export every arena row again (default: keep the rows the "
                   "results file has, export the missing settings)")
    args = p.parse_args()
    path = RESULTS / "generation_chunks.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc["provenance"] = provenance()
    if "arena" in args.parts:
        doc["arena"] = arena_rows([] if args.fresh else doc.get("arena", []))
    if "time" in args.parts:
        old = {(r["attention_chunk"], r["mlp_chunk"]): r for r in doc.get("time", [])}
        doc["time"] = time_rows(args.repeats, tuple(args.time_blocks))
        for r in doc["time"]:                     # a kind timed earlier and not now is kept (--time-blocks)
            earlier = old.get((r["attention_chunk"], r["mlp_chunk"]), {}).get("blocks", {})
            r["blocks"] = {**{k: v for k, v in earlier.items() if k not in r["blocks"]}, **r["blocks"]}
            r["kinds"] = sorted(r["blocks"])
            r["cpu_s_per_sampler_step_of_these_blocks"] = round(
                2 * sum(LAYOUT[k] * b["cpu_s"] for k, b in r["blocks"].items()), 2)
    doc.setdefault("arena", [])
    doc.setdefault("time", [])
    path.write_text(json.dumps(doc, indent=1))
    (RESULTS / "generation_chunks.md").write_text(markdown(doc))
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
