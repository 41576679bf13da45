"""What the training program's arena holds at its peak that the eager step does not (issue 14, item 1).

    python benchmarks/arena_vs_trace.py --configs tiny --only sana-tiny                  # minutes
    python benchmarks/arena_vs_trace.py --configs headline --only sana-layout-250m       # ~20 min on 2 cores
    -> benchmarks/results/arena_vs_trace[_CONFIGS].{json,md}
    python benchmarks/arena_vs_trace.py --pte A.pte,B.pte --out STEM                      # seconds: programs as they are

Per config (BlockSkip 50%, int8 frozen weights, XNNPACK matmuls, LoRA rank 16, remat `--remat`, weights in a .ptd),
the program is exported twice: with the exporter's three memory passes switched off ("before") and on ("after"):

  input_grad_conv   graph_passes.conv_input_grad_as_convolution + silu_backward_in_order: a frozen depthwise
                    convolution's backward read the forward's input (kept from forward to backward); SiLU's
                    backward held a tensor of ones and three temporaries at the backward's peak
  views_per_use     graph_passes.views_per_use: a LoRA weight's transpose, shared by forward and backward, kept in the
                    arena between them; transposes of transposes

For each export: the planned arena, its lower bound (the most planned bytes alive at one instruction), and the
tensors alive at that instruction grouped by (shape, dtype), next to the tensors one eager step holds at its own peak
(export/executorch_memory.traced_need's twin, with the live set recorded), grouped the same way. The rows where
the two differ are what the program keeps that eager torch does not (or the reverse): the causes, with their sizes.
The eager step counts the LoRA weights and the step inputs as pre-existing; `traced_equivalent` adds them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
RESULTS = ROOT / "benchmarks" / "results"
MB = 1e6
MIB = 1 << 20
VARIANTS = {"before": {"input_grad_conv": False, "views_per_use": False},
            "after": {"input_grad_conv": True, "views_per_use": True}}


def build_step(spec, rank: int):
    import torch

    import device_footprint as df
    from ditskip_edge.memory_estimate.program import build_step_program
    from ditskip_edge.quantize import QUANT_LAYERS
    from ditskip_edge.training_step import TrainingStep
    from export.executorch_program import StepModule
    from export.step_module import FlatTrainingStep, flatten_step_inputs
    prog = build_step_program(df.step_cfg(spec, rank, export=True), device="cpu", seed=0)
    names, example = flatten_step_inputs(*prog.inputs)
    flat = FlatTrainingStep(TrainingStep(prog.module, torch.nn.Identity()), names).eval()
    return StepModule(flat, names, example, {}, prog.module.view,
                      sum(isinstance(m, QUANT_LAYERS) for m in flat.modules()))


def traced_live_at_peak(step, remat: str) -> dict:
    """One eager step (export/executorch_memory.traced_need) with the tensors alive at its peak:
    [(op, shape, dtype, bytes)]."""
    import torch
    from torch.utils._pytree import tree_flatten

    from ditskip_edge.memory_estimate.tracker import StepMemoryTracker
    from export.executorch_memory import traced_need
    from export.executorch_program import ExportConfig

    class PeakLiveSet(StepMemoryTracker):
        def __init__(self, pre):
            super().__init__(pre)
            self.made_by: dict[int, tuple] = {}
            self.at_peak: dict[int, int] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            before = self.peak_bytes
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    key = t.untyped_storage()._cdata
                    if key not in self._live and key not in self.preexisting:
                        self.made_by[key] = (str(func).removeprefix("aten."), tuple(t.shape),
                                             str(t.dtype).removeprefix("torch."))
                    self._track(t)
            if self.peak_bytes > before:
                self.at_peak = dict(self._live)
            return out

    traced = traced_need(step, ExportConfig(remat=remat), tracker_cls=PeakLiveSet)
    tracker = traced.pop("tracker")
    live = [(*tracker.made_by.get(k, ("?", (), "?")), n) for k, n in tracker.at_peak.items()]
    return {"traced_step_bytes": traced["traced_step_bytes"],
            "traced_equivalent_bytes": traced["traced_equivalent_bytes"], "live": live}


def program_live_at_peak(step, remat: str, switches: dict) -> dict:
    from ditskip_edge.quantize import QuantSpec
    from export.executorch_program import ExportConfig, backend_config, export_joint, lower
    from export.memory_plan import lower_bound, peak_instruction, planned_specs
    cfg = ExportConfig(quant=QuantSpec("int8"), backend="xnnpack", remat=remat, external_weights=True,
                       trace_need=False, **switches)
    t0 = time.perf_counter()
    ep, passes = export_joint(step, cfg)
    et = lower(ep, cfg, passes).to_executorch(backend_config(cfg))
    export_s = time.perf_counter() - t0
    gm = et.exported_program().graph_module
    specs = planned_specs(gm)
    just = [s for s, _ in specs]
    at = peak_instruction(just)
    live = [(origin, tuple(s.shape), str(s.dtype).removeprefix("torch."), s.allocated_memory)
            for s, origin in specs if s.lifetime[0] <= at <= s.lifetime[1]]
    plan = et.executorch_program.execution_plan[0]
    return {"export_seconds": round(export_s, 1), "passes": passes,
            "planned_arena_bytes": sum(int(x) for x in plan.non_const_buffer_sizes),
            "arena_lower_bound_bytes": lower_bound(just), "peak_instruction": at,
            "instructions": sum(len(c.instructions) for c in plan.chains), "xnnpack_delegates": len(plan.delegates),
            "live": live}


# ------------------------------------------------------------------------------------------------ --pte
_ELEMENT_BYTES = {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 11: 1, 15: 2}    # ExecuTorch ScalarType -> bytes


def pte_live_at_peak(path: str, top: int = 14) -> dict:
    """A .pte as it is (no export): its planned tensors' lifetimes from the instructions that read or write them (a
    cat's tensor list included; program inputs live from the start, outputs to the end), the instruction where the
    most planned bytes are alive, and those tensors grouped by (shape, dtype, the op that wrote them; '?' when no
    kernel wrote it: an input, a view's alias, a delegate's internal), MiB. Aliases (the same offset) count once."""
    import math

    from executorch.exir._serialize._program import deserialize_pte_binary
    prog = deserialize_pte_binary(Path(path).read_bytes())
    plan = getattr(prog, "program", prog).execution_plan[0]
    vals, ops = plan.values, plan.operators
    ins = [i for ch in plan.chains for i in ch.instructions]
    first, last, writer = {}, {}, {}

    def name(k):
        a = ins[k].instr_args
        kind = type(a).__name__
        return ops[a.op_index].name if kind == "KernelCall" else ("delegate" if kind == "DelegateCall" else kind)

    for k, i in enumerate(ins):
        a = i.instr_args
        args = []
        for v in list(getattr(a, "args", []) or []):
            if 0 <= v < len(vals) and type(vals[v].val).__name__ in ("TensorList", "OptionalTensorList"):
                args += [x for x in vals[v].val.items if x >= 0]
            args.append(v)
        for j, v in enumerate(args):
            if not 0 <= v < len(vals):
                continue
            first.setdefault(v, k)
            last[v] = k
            if j == len(args) - 1 or type(a).__name__ == "DelegateCall":
                writer.setdefault(v, name(k))
    for v in plan.inputs:
        first[v] = 0
        writer[v] = "input"
    for v in plan.outputs:
        last[v] = len(ins)
    items = []
    for v, f0 in first.items():
        t = vals[v].val
        if type(t).__name__ != "Tensor" or t.allocation_info is None:
            continue
        ai = t.allocation_info
        n = math.prod(t.sizes) * _ELEMENT_BYTES.get(int(t.scalar_type), 4)
        dtype = {1: "int8", 6: "float32", 4: "int64", 3: "int32", 11: "bool", 0: "uint8"}.get(int(t.scalar_type), "?")
        items.append((f0, last.get(v, f0), n, (tuple(t.sizes), dtype), writer.get(v, "?"),
                      (ai.memory_id, (ai.memory_offset_high << 32) + ai.memory_offset_low)))

    def live_at(k):
        by = {}
        for it in items:
            o = by.get(it[5])
            if it[0] <= k <= it[1] and (o is None or it[2] > o[2] or (it[2] == o[2] and o[4] == "?")):
                by[it[5]] = it
        return by

    totals = [sum(it[2] for it in live_at(k).values()) for k in range(len(ins) + 1)]
    at = max(range(len(totals)), key=totals.__getitem__)
    groups, counts = Counter(), Counter()
    for it in live_at(at).values():
        groups[(it[3], it[4])] += it[2]
        counts[(it[3], it[4])] += 1
    return {"program": str(path), "instructions": len(ins), "xnnpack_delegates": len(plan.delegates),
            "planned_arena_mib": round(sum(int(x) for x in plan.non_const_buffer_sizes) / MIB, 2),
            "live_peak_mib": round(totals[at] / MIB, 2), "peak_instruction": at,
            "ops_around_peak": [name(k) for k in range(max(0, at - 3), min(len(ins), at + 2))],
            "live_at_peak": [{"shape": list(k[0][0]), "dtype": k[0][1], "written_by": k[1], "count": counts[k],
                              "mib": round(n / MIB, 2)}
                             for k, n in groups.most_common(top)]}


def pte_markdown(res: dict) -> str:
    import inspect
    lines = ["# What an exported program's planned arena holds at its peak", "",
             f"Command: `{res['provenance']['command']}`  ", f"Machine: {res['provenance']['machine']}  ",
             f"Date: {res['provenance']['date']}", "", inspect.cleandoc(pte_live_at_peak.__doc__), ""]
    for r in res["programs"]:
        lines += [f"## {r['program']}", "",
                  f"Planned arena {r['planned_arena_mib']} MiB; the most alive at one instruction: "
                  f"{r['live_peak_mib']} MiB at instruction {r['peak_instruction']} of {r['instructions']} (around it: "
                  f"{', '.join(r['ops_around_peak'])}); {r['xnnpack_delegates']} XNNPACK delegates.", "",
                  "| tensor | dtype | written by | count | MiB |", "|---|---|---|---|---|"]
        lines += [f"| {g['shape']} | {g['dtype']} | {g['written_by']} | {g['count']} | {g['mib']} |"
                  for g in r["live_at_peak"]]
        lines.append("")
    return "\n".join(lines) + "\n"


def by_shape(live) -> Counter:
    c = Counter()
    for op, shape, dtype, n in live:
        c[f"{list(shape)} {dtype}"] += n
    return c


def _writers(live, key: str) -> list[str]:
    """The ops that wrote the tensors of one group; program inputs counted, not named."""
    ops = Counter("program input" if op.startswith("input:") else op for op, s, d, _ in live if f"{list(s)} {d}" == key)
    return [f"{op} x{n}" for op, n in sorted(ops.items())]


def compare(program: dict, traced: dict, top: int = 12) -> list[dict]:
    p, t = by_shape(program["live"]), by_shape(traced["live"])
    rows = [{"tensor": k, "program_bytes": p.get(k, 0), "eager_bytes": t.get(k, 0),
             "program_ops": _writers(program["live"], k), "eager_ops": _writers(traced["live"], k)}
            for k in set(p) | set(t)]
    rows = [r for r in rows if r["program_bytes"] != r["eager_bytes"]]
    rows.sort(key=lambda r: -abs(r["program_bytes"] - r["eager_bytes"]))
    return rows[:top]


def markdown(res: dict) -> str:
    f = lambda b: f"{b / MB:.3f}"  # noqa: E731
    lines = ["# The training program's arena at its peak vs the eager step's live tensors", "",
             f"Command: `{res['provenance']['command']}`  ", f"Machine: {res['provenance']['machine']}  ",
             f"Date: {res['provenance']['date']}", "",
             "Bytes are the planned tensors' allocated sizes (program) and the storages one eager step holds at its "
             "peak (StepMemoryTracker), MB = 1e6 bytes. `traced equivalent` = the eager peak + LoRA weights + step "
             "inputs (the arena holds those too). Target (issue 14): planned arena <= 1.1x traced equivalent.", ""]
    for c in res["configs"]:
        lines += [f"## {c['config']} (remat {c['remat']})", "",
                  f"Traced equivalent: {f(c['traced']['traced_equivalent_bytes'])} MB", "",
                  "| exporter | planned arena MB | lower bound MB | planned / traced | instructions | XNNPACK "
                  "delegates | export s |", "|---|---|---|---|---|---|---|"]
        for name, v in c["variants"].items():
            lines.append(f"| {name} ({', '.join(k for k, on in VARIANTS[name].items() if on) or 'memory passes off'}) "
                         f"| {f(v['planned_arena_bytes'])} | {f(v['arena_lower_bound_bytes'])} | "
                         f"**{v['planned_arena_bytes'] / c['traced']['traced_equivalent_bytes']:.3f}x** | "
                         f"{v['instructions']} | {v['xnnpack_delegates']} | {v['export_seconds']} |")
        for name, v in c["variants"].items():
            lines += ["", f"Alive at the program's peak ({name}) vs at the eager step's peak, grouped by shape "
                      "(the largest differences):", "",
                      "| tensor | program MB | eager MB | program - eager MB | written by (program) | written by (eager) |",
                      "|---|---|---|---|---|---|"]
            for r in v["differences"]:
                lines.append(f"| {r['tensor']} | {f(r['program_bytes'])} | {f(r['eager_bytes'])} | "
                             f"{(r['program_bytes'] - r['eager_bytes']) / MB:+.3f} | {', '.join(r['program_ops'])} | "
                             f"{', '.join(r['eager_ops'])} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main() -> None:
    from _meta import provenance
    from memory_speed import config_specs
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", default="tiny", help="tiny | headline")
    ap.add_argument("--only", default="", help="comma-separated config names")
    ap.add_argument("--remat", default="none")
    ap.add_argument("--variants", default="before,after")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--out", default=None)
    ap.add_argument("--pte", default="", help="comma-separated .pte files: what each plans alive at its peak, read "
                                              "from the program as it is (no export, no eager step)")
    args = ap.parse_args()
    if args.pte:
        res = {"provenance": provenance(), "programs": [pte_live_at_peak(p) for p in args.pte.split(",") if p]}
        stem = Path(args.out) if args.out else RESULTS / "arena_at_peak"
        stem.with_suffix(".json").write_text(json.dumps(res, indent=1))
        stem.with_suffix(".md").write_text(pte_markdown(res))
        print(pte_markdown(res))
        return
    from ditskip_edge.runtime.errors import UserError
    from export.remat import RematSpec
    try:
        RematSpec.parse(args.remat)
    except UserError as e:           # one line, no traceback
        ap.error(str(e))
    bad = [v for v in args.variants.split(",") if v not in VARIANTS]
    if bad:
        ap.error(f"--variants {','.join(bad)}: expected among {', '.join(VARIANTS)}")
    specs = config_specs(args.configs)
    if args.only:
        unknown = sorted(set(args.only.split(",")) - set(specs))
        if unknown:
            ap.error(f"--only {','.join(unknown)}: not a {args.configs} config ({', '.join(specs)})")
        specs = {k: v for k, v in specs.items() if k in args.only.split(",")}
    stem = Path(args.out) if args.out else RESULTS / f"arena_vs_trace_{args.configs}"
    res = {"provenance": provenance(), "configs": []}
    for name, spec in specs.items():
        step = build_step(spec, args.rank)
        traced = traced_live_at_peak(step, args.remat)
        entry = {"config": name, "remat": args.remat, "traced": {k: v for k, v in traced.items() if k != "live"},
                 "variants": {}}
        for variant in args.variants.split(","):
            prog = program_live_at_peak(step, args.remat, VARIANTS[variant])
            entry["variants"][variant] = {**{k: v for k, v in prog.items() if k != "live"},
                                          "differences": compare(prog, traced)}
            print(f"{name} {variant}: planned {prog['planned_arena_bytes'] / MB:.3f} MB, traced equivalent "
                  f"{traced['traced_equivalent_bytes'] / MB:.3f} MB", file=sys.stderr, flush=True)
        res["configs"].append(entry)
        stem.with_suffix(".json").write_text(json.dumps(res, indent=1, default=str))
    stem.with_suffix(".md").write_text(markdown(res))
    print(f"wrote {stem}.json / .md", file=sys.stderr)


if __name__ == "__main__":
    main()
