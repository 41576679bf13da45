"""Benchmark: one training step (forward + backward) of the kept blocks, ExecuTorch runtime vs eager PyTorch.

Config: a FLUX-architecture model 256 wide (4 heads x 64), 2 double + 4 single blocks, plan front 1 / back 2
(kept: 1 double + 2 single blocks), 256 image tokens (32x32 latents of 16 channels packed 2x2), 32 text tokens,
LoRA rank 4 on the attention projections. Variants: frozen weights fp32 / int8, portable kernels / XNNPACK.
Writes benchmarks/results/executorch_step.{json,md} with the command, machine and date, the memory report of every
program, which ops went to XNNPACK, and an ETDump per-operator profile.

    PYTHONPATH=. nice python benchmarks/executorch_step.py [--variants fp32-portable,fp32-xnnpack,int8-portable,int8-xnnpack]
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ditskip_edge.lora import LoraSpec, add_lora                       # noqa: E402
from ditskip_edge.models.views import make_view                         # noqa: E402
from ditskip_edge.plan import SkipPlan                                  # noqa: E402
from ditskip_edge.quantize import QuantSpec, quantize_frozen_layers     # noqa: E402
from ditskip_edge.skip_model import SkipModel                           # noqa: E402
from ditskip_edge.training_step import TrainingStep                     # noqa: E402
from export.step_module import FlatTrainingStep, flatten_step_inputs, program_lora_keys   # noqa: E402
from export.executorch_program import (ExportConfig, StepModule, export_training_program)

CONFIG = dict(patch_size=1, in_channels=64, num_layers=2, num_single_layers=4, attention_head_dim=64,
              num_attention_heads=4, joint_attention_dim=64, pooled_projection_dim=64, guidance_embeds=False,
              axes_dims_rope=[16, 24, 24])
LATENT = (1, 16, 32, 32)
TXT_LEN = 32


def build(precision: str) -> StepModule:
    from diffusers import FluxTransformer2DModel
    torch.manual_seed(0)
    tr = FluxTransformer2DModel(**CONFIG).eval()
    with torch.no_grad():
        for p in tr.parameters():
            if p.abs().sum() == 0:
                p.normal_(0, 0.02)
    plan = SkipPlan(6, 1, 2)
    names = [f"transformer_blocks.{i}" for i in range(2)] + [f"single_transformer_blocks.{i}" for i in range(4)]
    add_lora(tr, "flux", [names[i] for i in plan.kept], LoraSpec(rank=4, alpha=4.0))
    skip = SkipModel(make_view("flux", tr, plan.kept), plan)
    n_q = quantize_frozen_layers(skip.view, QuantSpec(precision))
    g = torch.Generator().manual_seed(1)
    x0, noise = torch.randn(*LATENT, generator=g), torch.randn(*LATENT, generator=g)
    n_img, d = LATENT[2] * LATENT[3] // 4, 256
    cond = {"txt": torch.randn(1, TXT_LEN, 64, generator=g), "pooled": torch.randn(1, 64, generator=g)}
    entry = {"front.img": 0.1 * torch.randn(1, n_img, d, generator=g),
             "front.txt": 0.1 * torch.randn(1, TXT_LEN, d, generator=g),
             "back.img": 0.1 * torch.randn(1, n_img, d, generator=g)}
    names_in, example = flatten_step_inputs(x0, noise, torch.tensor([0.6]), cond, entry)
    flat = FlatTrainingStep(TrainingStep(skip, torch.nn.Identity()), names_in)   # entry: fp32 residuals
    return StepModule(flat, names_in, example, program_lora_keys(flat, tr), tr, n_q)


def best_ms(fn, reps: int, rounds: int = 3) -> float:
    fn()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        out.append((time.perf_counter() - t0) / reps * 1e3)
    return min(out)


def eager_ms(step: StepModule, reps: int) -> float:
    params = [p for p in step.module.parameters() if p.requires_grad]

    def run():
        for p in params:
            p.grad = None
        step.module(*step.example).backward()
    return best_ms(run, reps)


def eager_saved_activation_bytes(step: StepModule) -> int:
    """What eager autograd keeps for the backward pass (unique storages, the module's own weights excluded): the
    activations the backward really needs (plus, for quantized weights, eager's dequantized copies)."""
    own = {t.untyped_storage().data_ptr() for t in list(step.module.parameters()) + list(step.module.buffers())}
    seen: dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in own:
            seen[ptr] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step.module(*step.example)
    return sum(seen.values())


def etdump_profile(buffer: bytes, inputs) -> list[dict]:
    from executorch.devtools import Inspector
    from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer
    mod = _load_for_executorch_from_buffer(buffer, enable_etdump=True, debug_buffer_size=0)
    mod.run_method("forward", inputs, clone_outputs=False)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "prof.etdp")
        mod.write_etdump_result_to_file(path)
        ins = Inspector(etdump_path=path)
        agg = collections.defaultdict(float)
        for blk in ins.event_blocks:
            for ev in blk.events:
                if ev.perf_data is not None and ev.name and not ev.name.startswith("Method::"):
                    agg[ev.name] += sum(ev.perf_data.raw) / len(ev.perf_data.raw)
    return rank_ops([{"op": k, "ms": round(v, 3)} for k, v in agg.items()])


WRAPPERS = ("OPERATOR_CALL", "DELEGATE_CALL")    # ETDump events that enclose the per-kernel events


def rank_ops(rows: list[dict], top: int = 12) -> list[dict]:
    """Shares of the kernel time: enclosing events (OPERATOR_CALL, DELEGATE_CALL) are listed but not counted."""
    total = sum(r["ms"] for r in rows if r["op"] not in WRAPPERS) or 1.0
    rows = sorted(rows, key=lambda r: -r["ms"])
    return [dict(r, share=None if r["op"] in WRAPPERS else round(r["ms"] / total, 4)) for r in rows[:top]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="fp32-portable,fp32-xnnpack,int8-portable,int8-xnnpack")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--render", action="store_true", help="only rewrite the .md from the saved .json")
    ap.add_argument("--merge", action="store_true", help="update these variants in the saved .json, keep the rest")
    args = ap.parse_args()
    out = ROOT / "benchmarks" / "results"
    if args.render:
        r = json.loads((out / "executorch_step.json").read_text())
        for v in r["variants"].values():
            if v.get("etdump_top_ops"):
                v["etdump_top_ops"] = rank_ops(v["etdump_top_ops"])
        (out / "executorch_step.json").write_text(json.dumps(r, indent=1))
        (out / "executorch_step.md").write_text(markdown(r))
        return
    from executorch.extension.training import _load_for_executorch_for_training_from_buffer
    results = {"command": "PYTHONPATH=. python " + " ".join(sys.argv), "date": datetime.datetime.utcnow().isoformat()
               + "Z", "machine": {"platform": platform.platform(), "processor": platform.processor(),
                                  "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                                  "loadavg_at_start": os.getloadavg()},
               "config": {"transformer": CONFIG, "latent": LATENT, "txt_len": TXT_LEN, "plan": "front 1, back 2 of 6",
                          "lora_rank": 4}, "variants": {}}
    if args.merge and (out / "executorch_step.json").is_file():
        previous = json.loads((out / "executorch_step.json").read_text())
        results["variants"] = previous["variants"]
        results["earlier_runs"] = previous.get("earlier_runs", []) + [{k: previous[k] for k in ("command", "date")}]
        if "int8_portable_without_recompute" in previous:
            results["int8_portable_without_recompute"] = previous["int8_portable_without_recompute"]
    steps = {}
    for variant in args.variants.split(","):
        qname, backend = variant.split("-")
        if qname not in steps:
            steps[qname] = build(qname)
            results["variants"][f"{qname}-eager"] = {"step_ms": round(eager_ms(steps[qname], args.reps), 2),
                                                     "saved_activation_bytes": eager_saved_activation_bytes(steps[qname])}
            print(f"{qname}-eager", results["variants"][f"{qname}-eager"], flush=True)
        step = steps[qname]
        t0 = time.perf_counter()
        prog = export_training_program(step, ExportConfig(quant=QuantSpec(qname), backend=backend))
        export_s = time.perf_counter() - t0
        m = _load_for_executorch_for_training_from_buffer(prog.buffer)
        ms = best_ms(lambda: m.forward_backward("forward", step.example), args.reps)
        loss_et = float(m.forward_backward("forward", step.example)[0])
        loss_eager = float(step.module(*step.example))
        row = {"step_ms": round(ms, 2), "vs_eager": round(ms / results["variants"][f"{qname}-eager"]["step_ms"], 2),
               "export_s": round(export_s, 1), "loss_rel_err": abs(loss_et - loss_eager) / abs(loss_eager),
               "memory": prog.memory, "graph_passes": prog.passes,
               "xnnpack_delegates": prog.ops["xnnpack_delegates"], "xnnpack_ops": prog.ops["xnnpack_ops"],
               "portable_ops": prog.ops["portable_ops"]}
        if not args.no_profile:
            row["etdump_top_ops"] = etdump_profile(prog.buffer, step.example)
        results["variants"][variant] = row
        print(variant, {k: row[k] for k in ("step_ms", "vs_eager", "export_s", "loss_rel_err")}, flush=True)
    if "int8-portable" in args.variants:   # the arena with and without the recompute pass
        ep_cfg = ExportConfig(quant=QuantSpec("int8"), recompute_frozen=False)
        prog = export_training_program(steps["int8"], ep_cfg)
        results["int8_portable_without_recompute"] = {"planned_arena_bytes": prog.memory["planned_arena_bytes"]}
    out.mkdir(parents=True, exist_ok=True)
    (out / "executorch_step.json").write_text(json.dumps(results, indent=1))
    (out / "executorch_step.md").write_text(markdown(results))
    print(markdown(results))


def markdown(r: dict) -> str:
    lines = ["# ExecuTorch training step vs eager PyTorch", "",
             f"- command: `{r['command']}`", f"- date: {r['date']}", f"- machine: {r['machine']}",
             f"- config: {json.dumps(r['config'])}", "",
             "| variant | step ms | x eager | arena MB | constants MB | .pte MB | XNNPACK delegates | loss rel err |",
             "|---|---|---|---|---|---|---|---|"]
    for k, v in r["variants"].items():
        if "memory" not in v:
            saved = v.get("saved_activation_bytes")
            lines.append(f"| {k} | {v['step_ms']} | 1.00 | {'' if saved is None else f'saved for backward: {saved / 1e6:.2f}'} "
                         f"| | | | |")
            continue
        mem = v["memory"]
        lines.append(f"| {k} | {v['step_ms']} | {v['vs_eager']} | {mem['planned_arena_bytes'] / 1e6:.2f} | "
                     f"{mem['constant_bytes'] / 1e6:.2f} | {mem['pte_bytes'] / 1e6:.2f} | {v['xnnpack_delegates']} | "
                     f"{v['loss_rel_err']:.1e} |")
    if r.get("notes"):
        lines += ["", "## Reading the numbers", ""] + [f"- {n}" for n in r["notes"]]
    if "int8_portable_without_recompute" in r:
        lines += ["", f"int8 portable arena without the recompute pass: "
                      f"{r['int8_portable_without_recompute']['planned_arena_bytes'] / 1e6:.2f} MB"]
    for k, v in r["variants"].items():
        if v.get("etdump_top_ops"):
            lines += ["", f"## ETDump top ops: {k}", "", "| op | ms | share |", "|---|---|---|"]
            lines += [f"| {e['op']} | {e['ms']} | {'(encloses others)' if e.get('share') is None else format(e['share'], '.1%')} |"
                      for e in v["etdump_top_ops"]]
        if v.get("xnnpack_ops"):
            lines += ["", f"## {k}: ops inside XNNPACK delegates", "", json.dumps(v["xnnpack_ops"]),
                      "", f"ops left on portable kernels: {json.dumps(v['portable_ops'])}"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
