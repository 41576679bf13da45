"""On-device generation in the planner against training, at real scale (no weights): FLUX.1-dev and SANA-1600M.

    python benchmarks/generation_estimate.py      # -> benchmarks/results/generation_estimate.{json,md}

Each model is `ditskip-edge estimate --model M --skip-ratio 0.5 --precision int8 --weights mapped --generation-px
--json` (remat: the default `blocks`, what compile exports): the training footprint of the BlockSkip step and, at the
train resolution and the model's data resolution, the generation footprint (memory_estimate/generation.py: the full
model one block at a time, each classifier-free-guidance branch through each program at batch 1, every frozen weight
mapped) and the autoencoder's decoder (its published config, traced on the meta device; it runs after the
transformer programs are dropped, so the footprint is the larger phase plus the 100 MiB runtime overhead; its arena
is the portable decode program's planned arena, ExecuTorch's greedy plan of the program's buffers, with the live
peak of those buffers beside it: memory_estimate/generation.py decoder_program_memory). Each
resolution is estimated twice: the decoder on the whole picture, and on tiles of 256 px (`--decode-tile-px 256`,
what compile exports with that flag: runtime/tiling.py, diffusers' tiled_decode; the decode phase then adds the
picture and two rows of decoded tiles); FLUX.1-dev also at its native 1024 px. The text phase comes first: the
model's own encoders (FLUX.1-dev: CLIP-L at 77 tokens, then T5-XXL at 512; SANA: Gemma-2-2B at 300) as the
bundle's fp32 programs, one at a time, traced on the meta device from their published configs
(memory_estimate/text.py), plus both prompts' conditioning; the runtime drops them before sampling. All phases count
dirty anonymous memory (what a phone counts); the mapped weights are file-backed and reported apart. The second
table is each encoder program at fp32 (compile's default) and at int8 (`compile --text-precision int8`).
FLUX.1-dev at 1024 px is also estimated with its attention in query chunks of 512 (`--attention-chunk 512`,
models/attention.py: the same attention, one chunk's scores at a time), and with query chunks of 128 and its blocks'
MLPs in token chunks of 1024 (`--attention-chunk 128 --mlp-chunk 1024`, models/token_chunks.py: the same MLPs, one
chunk's hidden activations at a time; what `estimate` advises when generation does not fit).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks._meta import provenance, provenance_md  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
MODELS = ("flux-dev", "sana-1600m")
EXTRA_PX = {"flux-dev": (1024,)}
TILE_PX = 256
# also estimated with attention in query chunks and MLPs in token chunks: (--attention-chunk, --mlp-chunk)
CHUNKS = {"flux-dev": ((512, None), (128, 1024))}


def _chunk_key(c) -> str:
    if c is None:
        return ""
    return f" chunk {c[0]}" + ("" if c[1] is None else f" mlp chunk {c[1]}")      # " chunk 512": the older key


def main() -> int:
    from ditskip_edge.memory_estimate.request import EstimateRequest, estimate_memory
    from ditskip_edge.models.loading import resolve_spec
    from ditskip_edge.memory_estimate.generation import data_resolution
    docs = {}
    for model in MODELS:
        spec = resolve_spec(model)
        px = sorted({spec.train_px, data_resolution(spec), *EXTRA_PX.get(model, ())})
        for tile, chunk in ((None, None), (TILE_PX, None)) + tuple((TILE_PX, c) for c in CHUNKS.get(model, ())):
            docs[(model, tile, chunk)] = estimate_memory(EstimateRequest(
                model=model, skip_ratio=0.5, precision="int8", weights="mapped", generation_px=tuple(px),
                decode_tile_px=tile, attention_chunk=chunk and chunk[0], mlp_chunk=chunk and chunk[1]))
        print(f"{model}: {docs[(model, None, None)]['summary']}", file=sys.stderr, flush=True)
    prov = provenance()
    (RESULTS / "generation_estimate.json").write_text(json.dumps(
        {"provenance": prov, "decode_tile_px": TILE_PX,
         "estimates": {f"{m}{'' if t is None else f' tiles {t}px'}{_chunk_key(c)}": d
                       for (m, t, c), d in docs.items()}}, indent=1))
    rows = ["| model | training (remat blocks, mapped) GiB | generation at | decoder on, attention | "
            "generation footprint GiB | "
            "program arena GiB (per program) | streams GiB | mapped weights GiB (whole model) | mapped working set GiB "
            "| text phase GiB (mapped text weights GiB) | transformer phase GiB "
            "| decode phase GiB (planned arena; live) "
            "| generation <= training |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (model, tile, chunk, px) in sorted(((m, t, c, px) for (m, t, c), d in docs.items() for px in d["generation"]),
                                           key=lambda k: (k[0], int(k[3]), k[1] or 0, -(k[2] or (1e9,))[0])):
        doc = docs[(model, tile, chunk)]
        g = doc["generation"][px]
        p, s, tr = doc["plan"], doc["step"], doc["memory"]["footprint_gib"]
        til = g["decode_tiling"]
        if tile is not None and not til["tiling"]["tiled"]:
            continue                                # the picture fits one tile: the same row as untiled
        if chunk is not None and int(px) < 1024:
            continue                                # chunks matter at FLUX.1-dev's native size
        on = (f"{til['tiles']} tiles of {til['tile_px']} px" if til["tiling"]["tiled"] else "the whole picture")
        on += f", queries in chunks of {chunk[0]}" if chunk else ", all queries at once"
        on += f", MLPs in token chunks of {chunk[1]}" if chunk and chunk[1] else ""
        per = ", ".join(f"{k} {v / 2**30:.3f}" for k, v in g["arenas_bytes"].items())
        rows.append(f"| {model} | {p['n_front']}/{p['n_back']} {s['precision']}, {s['resolution_px']} px, "
                    f"L={s['text_tokens']}: {tr} | {px} px ({g['image_tokens']} image + {g['text_tokens']} text "
                    f"tokens) | {on} | {g['footprint_gib']} | {g['program_arena_gib']} ({per}) | {g['streams_gib']} | "
                    f"{g['file_backed_gib']} | {g['file_backed_working_set_gib']} | {g['text_phase_gib']} "
                    f"({g['text_file_backed_gib']}) | {g['transformer_phase_gib']} | "
                    f"{g['decoder_gib']} ({g['decoder_arena_gib']}; {g['decoder_arena_live_gib']}) | "
                    f"{'yes' if g['within_training_footprint'] else 'NO'} |")
    from ditskip_edge.memory_estimate.text import encoder_roles, trace_text_encoder
    enc_rows = ["| model | encoder | tokens | precision | program arena MiB (RssAnon) | mapped weights GiB |",
                "|---|---|---|---|---|---|"]
    encoders = []
    for model in MODELS:
        spec = resolve_spec(model)
        for role in encoder_roles(spec):
            for precision in ("fp32", "int8"):
                e = trace_text_encoder(role, spec.text.seq_len, precision)
                encoders.append({"model": model, **e})
                enc_rows.append(f"| {model} | {role} | {e['tokens']} | {precision} | {e['arena_bytes'] / 2**20:.1f} | "
                                f"{e['weights_bytes'] / 2**30:.2f} |")
    data = json.loads((RESULTS / "generation_estimate.json").read_text())
    data["text_encoders"] = encoders
    (RESULTS / "generation_estimate.json").write_text(json.dumps(data, indent=1))
    md = ("# Generation in the planner: FLUX.1-dev and SANA-1600M\n\n" + provenance_md(prov) + "\n"
          + __doc__.split("\n\n", 2)[2].strip() + "\n\n" + "\n".join(rows) + "\n\n"
          + "## The text encoder programs\n\n" + "\n".join(enc_rows) + "\n")
    (RESULTS / "generation_estimate.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
