"""Where the exported training step's CPU time goes: per op and per XNNPACK delegate call (ExecuTorch's event
tracer, ETDump), and the same step under program variants that each take one suspect away.

    nice -n 5 python benchmarks/step_profile.py --configs headline --only flux-layout-300m \
        --variants base,fp32 --keep-programs /tmp/step_profile
    -> benchmarks/results/step_profile.{json,md}

The step is device_footprint.py's et_remat / native_remat program (BlockSkip 50%, int8 frozen weights, LoRA rank 16,
block remat, XNNPACK matmuls, weights in a mapped .ptd); a variant changes the ExportConfig (VARIANTS). Per variant,
each in a FRESH process with one thread (the machine is shared: CPU seconds, not wall):

  timed      the program loaded as export/executorch_footprint.py loads it, 1 warm-up + --steps forward_backward
             calls: CPU seconds per step (median) and the loss
  profiled   the same program loaded with ETDump on (`_load_for_executorch(..., enable_etdump=True)`), 1 warm-up +
             --steps calls; every instruction's time (a portable kernel call, or an XNNPACK delegate call) from the
             ETDump, summed per op. A delegate call is named by what it holds (the lowered module's ops, recorded at
             export in graph order: the k-th delegate call of the program is the k-th `executorch_call_delegate` of
             the lowered graph); a portable kernel by its operator. `_to_dim_order_copy` with an int8 input is a
             cast of int8 codes to fp32 (the frozen weights' dequantization), counted apart from the other copies.

The profiled total is a little above the timed one (the tracer's own cost per instruction); the table gives both.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
RESULTS = ROOT / "benchmarks" / "results"

# variant -> ExportConfig changes from device_footprint's program (int8, xnnpack, remat blocks, external weights)
VARIANTS = {
    "base": {},
    "views_kept": {"constant_views_folded": False},
    "remat_last_group": {"remat_last_group": True},
    "rotary_stack": {"rotary_matmul": False},
    "remat_last_group_rotary_stack": {"remat_last_group": True, "rotary_matmul": False},
    "portable_casts": {"xnnpack_casts": False},
    "transposed_codes": {"transposed_codes": True},
    "pow_kept": {"pow_as_mul": False},
    "xnnpack_elementwise": {"xnnpack_elementwise": 65536},
    "xnnpack_elementwise_all": {"xnnpack_elementwise": 1},
    "issue57_before": {"xnnpack_casts": False, "pow_as_mul": False, "plain_softmax": False},
    "no_remat": {"remat": "none"},
    "fp32": {"precision": "fp32"},
    "qd8": {"integer_matmuls": "qd8"},
    "qd8_linears": {"integer_matmuls": "qd8_linears"},
}


def export_config(variant: str):
    from ditskip_edge.quantize import QuantSpec
    from export.executorch_program import ExportConfig
    over = dict(VARIANTS[variant])
    precision = over.pop("precision", "int8")
    base = ExportConfig(quant=QuantSpec(precision), backend="xnnpack", remat="blocks", external_weights=True,
                        xnnpack_ops="matmul", trace_need=False)
    return replace(base, **over)


def build_step(spec, rank: int, precision: str):
    """device_footprint.export_row's step (the same model, seed, inputs)."""
    import torch
    from device_footprint import step_cfg
    from ditskip_edge.memory_estimate.program import build_step_program
    from ditskip_edge.quantize import QUANT_LAYERS
    from ditskip_edge.training_step import TrainingStep
    from export.executorch_program import StepModule
    from export.step_module import FlatTrainingStep, flatten_step_inputs
    cfg = step_cfg(spec, rank, export=True)
    cfg = replace(cfg, precision=precision)
    prog = build_step_program(cfg, device="cpu", seed=0)
    names, example = flatten_step_inputs(*prog.inputs)
    flat = FlatTrainingStep(TrainingStep(prog.module, torch.nn.Identity()), names).eval()
    return StepModule(flat, names, example, {}, prog.module.view,
                      sum(isinstance(m, QUANT_LAYERS) for m in flat.modules()))


def _delegate_contents(edge_program) -> list[str]:
    """Per executorch_call_delegate node in graph order: its lowered module's ops, e.g. 'bmm+permute_copy'."""
    from export.executorch_program import _op_name
    gm = edge_program.graph_module
    out = []
    for n in gm.graph.nodes:
        if n.op == "call_function" and "executorch_call_delegate" in _op_name(n.target):
            lowered = getattr(gm, n.args[0].target)
            ops = sorted({_op_name(m.target).removeprefix("aten.").removeprefix("quantized_decomposed.").split(".")[0]
                          for m in lowered.original_module.graph.nodes if m.op == "call_function"
                          and "getitem" not in _op_name(m.target)}, key=lambda o: (o != "bmm", o))
            out.append("+".join(ops))
    return out


def export_variant(spec, variant: str, rank: int, folder: Path) -> dict:
    """Lower the variant's program as export_training_program does (no program cache: the delegate contents are
    read from the lowered graph) and write program, data, inputs and meta.json into folder."""
    import torch
    from export.executorch_program import _data_files, _op_placement, backend_config, joint_with_passes, lower, \
        trace_step
    cfg = export_config(variant)
    t0 = time.perf_counter()
    step = build_step(spec, rank, cfg.quant.precision)
    if cfg.quant.precision == "fp32":
        from ditskip_edge.quantize import QUANT_LAYERS
        assert not any(isinstance(m, QUANT_LAYERS) for m in step.module.modules()), "fp32 variant still quantized"
    ep = trace_step(step, cfg)
    ep, passes = joint_with_passes(ep, cfg)
    edge = lower(ep, cfg, passes)
    ops = _op_placement(edge.exported_program())
    et = edge.to_executorch(backend_config(cfg))
    delegates = _delegate_contents(et.exported_program())
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train_step.pte").write_bytes(et.buffer)
    data = _data_files(et)
    for name, b in data.items():
        (folder / "train_step.ptd").write_bytes(b)
    torch.save(step.example, folder / "inputs.pt")
    plan = et.executorch_program.execution_plan[0]
    meta = {"variant": variant, "export_config": repr(cfg), "export_seconds": round(time.perf_counter() - t0, 1),
            "delegates": delegates, "ops": ops, "passes": passes,
            "planned_arena_bytes": sum(plan.non_const_buffer_sizes), "pte_bytes": len(et.buffer),
            "ptd_bytes": sum(len(b) for b in data.values())}
    (folder / "meta.json").write_text(json.dumps(meta))
    return meta


# ------------------------------------------------------------------------------------------------ child
def _instruction_kinds(pte: Path) -> dict[int, tuple[str, int | None]]:
    """instruction index -> ("delegate", delegate ordinal) | ("kernel", operator index), from the .pte."""
    from executorch.exir._serialize._program import deserialize_pte_binary
    from executorch.exir.schema import DelegateCall, KernelCall
    prog = deserialize_pte_binary(pte.read_bytes()).program
    plan = prog.execution_plan[0]
    out, ordinal = {}, 0
    for i, ins in enumerate(plan.chains[0].instructions):
        a = ins.instr_args
        if isinstance(a, DelegateCall):
            out[i] = ("delegate", ordinal)
            ordinal += 1
        elif isinstance(a, KernelCall):
            op = plan.operators[a.op_index]
            out[i] = ("kernel", f"{op.name}.{op.overload}" if op.overload else op.name)
            # the cast of integer codes: _to_dim_order_copy whose first argument is an int tensor
            v = plan.values[a.args[0]].val
            if "to_dim_order_copy" in op.name and int(getattr(v, "scalar_type", -1)) == 1:    # Char: int8 codes
                out[i] = ("kernel", "cast int8 -> fp32 (frozen codes)")
    return out


def child(folder: Path, steps: int, threads: int, mode: str) -> dict:
    import torch
    from export.executorch_footprint import Trainer, _import_runtime
    _load_program, reset_threads = _import_runtime()
    reset_threads(threads)
    torch.set_num_threads(threads)
    tensors = list(torch.load(folder / "inputs.pt", weights_only=True))
    pte, ptd = folder / "train_step.pte", folder / "train_step.ptd"
    data = str(ptd) if ptd.is_file() else None
    prog = _load_program(str(pte), enable_etdump=(mode == "profiled"), data_path=data)
    m = Trainer(prog)
    cpu, loss, grads = [], None, None
    for _ in range(steps + 1):
        c0 = time.process_time()
        loss = float(m.forward_backward(tensors)[0])
        cpu.append(time.process_time() - c0)
    grads = m.named_gradients()
    later = sorted(cpu[1:])
    out = {"mode": mode, "cpu_seconds": cpu, "cpu_seconds_per_step": later[len(later) // 2], "loss": loss}
    if mode == "timed":
        torch.save({k: v.clone() for k, v in grads.items()}, folder / "grads.pt")
        return out
    etdump = folder / "profile.etdp"
    prog.write_etdump_result_to_file(str(etdump))
    out["etdump"] = str(etdump)         # read by the parent: the reader imports the compiler's modules
    return out


def _etdump_times(path: Path, runs: int) -> dict[int, list[float]]:
    """instruction id -> its durations (seconds) in every run after the first."""
    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc
    dump = deserialize_from_etdump_flatcc(path.read_bytes())
    per: dict[int, list[float]] = defaultdict(list)
    run_index = -1
    for run in dump.run_data:
        for block in run.events or []:
            pe = block.profile_event
            if pe is None:
                continue
            if pe.name == "Method::execute":
                run_index += 1
                continue
            if run_index < 1 or pe.instruction_id is None or pe.instruction_id < 0 \
                    or pe.delegate_debug_id_int not in (None, -1) or pe.delegate_debug_id_str:
                continue            # the first run, or an event inside a delegate (its call is counted whole)
            per[pe.instruction_id].append((pe.end_time - pe.start_time) * 1e-9)
    return dict(per)


def run_child(folder: Path, steps: int, threads: int, mode: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS=str(threads))
    from memory_speed import MALLOC_ENV
    env.update(MALLOC_ENV)
    cmd = [sys.executable, __file__, "--child", str(folder), "--steps", str(steps), "--threads", str(threads),
           "--mode", mode]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode:
        raise RuntimeError(f"child {mode} {folder}: {r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------------ report
def aggregate(folder: Path, meta: dict, prof: dict, steps: int) -> dict:
    kinds = _instruction_kinds(folder / "train_step.pte")
    delegates = meta["delegates"]
    by: Counter = Counter()
    calls: Counter = Counter()
    for ins, times in prof["per_instruction"].items():
        kind, what = kinds.get(int(ins), ("other", None))
        name = (f"xnnpack: {delegates[what]}" if kind == "delegate" and what < len(delegates) else
                f"portable: {what}" if kind == "kernel" else f"{kind}")
        by[name] += sum(times) / steps
        calls[name] += len(times) / steps
    total = sum(by.values())
    rows = [{"what": k, "cpu_seconds_per_step": v, "share": v / total if total else 0, "calls_per_step": calls[k]}
            for k, v in by.most_common()]
    return {"profiled_instruction_seconds": total, "rows": rows}


def run_native(folder: Path, steps: int, runner, threads: int) -> dict:
    """The program run by the native core (`ditskip-run step --threads N`, its own process: the same thread count as
    the Python rows) as device_footprint.py's native_remat row: whole-process RssAnon peak (sampled) and CPU s per
    step."""
    from device_footprint import native_inputs
    from device_tests.native_runtime import measure
    from memory_speed import MALLOC_ENV
    cmd = ["step", folder / "train_step.pte", "--data", folder / "train_step.ptd", "--inputs",
           native_inputs(str(folder / "inputs.pt")), "--steps", steps + 1, "--threads", threads, "--json"]
    m = measure(runner, *cmd, env=MALLOC_ENV)
    if m.returncode != 0 or m.json is None:
        raise RuntimeError(f"ditskip-run step exited {m.returncode}: {m.stderr.strip()[-1500:]}")
    fp = m.json["footprint"]
    own = [fp["loaded"]] + fp["after_steps"]
    return {"rss_anon_bytes": max([m.peak_anon_bytes] + [r["rss_anon_bytes"] for r in own]),
            "rss_file_bytes": max([m.peak_file_bytes] + [r["rss_file_bytes"] for r in own]),
            "cpu_seconds_per_step": m.json["cpu_seconds_per_step"], "seconds_per_step": m.json["seconds_per_step"],
            "loss": m.json["loss"], "command": "ditskip-run " + " ".join(map(str, cmd))}


def grad_error(base: Path, other: Path) -> dict:
    import torch
    a = torch.load(base / "grads.pt", weights_only=True)
    b = torch.load(other / "grads.pt", weights_only=True)
    num = sum(float((a[k] - b[k]).pow(2).sum()) for k in a)
    den = sum(float(a[k].pow(2).sum()) for k in a)
    worst = max(float((a[k] - b[k]).norm() / a[k].norm().clamp_min(1e-30)) for k in a)
    return {"grad_rel_error": (num / den) ** 0.5, "worst_tensor_grad_rel_error": worst}


def write_report(res: dict, stem: Path) -> None:
    from _meta import provenance_md
    lines = ["# Where the exported training step's CPU time goes (ETDump, one thread), and the step before / after",
             "", provenance_md(res["provenance"]), "",
             "Step = forward + backward of the device_footprint.py et_remat / native_remat program (BlockSkip 50%, "
             "int8 frozen weights, LoRA rank 16, block remat, XNNPACK matmuls, weights in a mapped .ptd). `Python`: "
             "ExecuTorch's Python bindings in a fresh process, one thread, CPU s per step without the tracer (median "
             f"of {res['steps']} steps after a warm-up). `native`: the same program run by `ditskip-run step` "
             "(device_footprint.py's native_remat row: whole-process RssAnon peak, CPU s of all its threads, `--threads` as the Python rows). "
             "Variants (VARIANTS in the script): `issue57_before` = the program as exported before this work (casts "
             "and int8 transposes on the portable kernels, pow, safe softmax); `base` = today's default; "
             "`views_kept` = base without graph_passes.constant_views_as_constants (frozen constants cloned before each "
             "view: the default before it); `transposed_codes` = base + `compile --transposed-codes`; `xnnpack_elementwise` = base + ExportConfig("
             "xnnpack_elementwise=65536) (cat / mul / add of >= 64Ki elements in XNNPACK). Loss / gradient differences are against "
             "`base` (same inputs, same LoRA).", ""]
    lora = res.get("eager_lora") or {}
    if lora:
        lines += [f"Eager standard LoRA CPU s per step (one thread): {lora['source']}: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in lora["cpu_seconds"].items()), ""]
    base = {r["config"]: r for r in res["records"] if r["variant"] == "base"}
    lines += ["| config | variant | Python CPU s / step | eager LoRA / Python | native CPU s / step | eager LoRA / native "
              "| native RssAnon "
              "MiB (whole process) | planned arena MiB | .ptd MiB | loss | loss rel. diff vs base | grad rel. error "
              "vs base |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["records"]:
        b = base.get(r["config"])
        ld = "" if b is None or r is b else f"{abs(r['loss'] - b['loss']) / abs(b['loss']):.2e}"
        ge = r.get("vs_base", {}).get("grad_rel_error")
        n = r.get("native") or {}
        e = lora.get("cpu_seconds", {}).get(r["config"])
        ratio = f"{e / n['cpu_seconds_per_step']:.2f}x" if e and n else ""
        py_ratio = f"{e / r['cpu_seconds_per_step']:.2f}x" if e else ""
        lines.append(f"| {r['config']} | {r['variant']} | {r['cpu_seconds_per_step']:.3f} | {py_ratio} | "
                     f"{n['cpu_seconds_per_step']:.3f} | {ratio} | {n['rss_anon_bytes'] / 2**20:.1f} | "
                     if n else f"| {r['config']} | {r['variant']} | {r['cpu_seconds_per_step']:.3f} | {py_ratio} | | | | ")
        lines[-1] += (f"{r['planned_arena_bytes'] / 2**20:.1f} | {r.get('ptd_bytes', 0) / 2**20:.1f} | "
                      f"{r['loss']:.6g} | {ld} | {'' if ge is None else f'{ge:.2e}'} |")
    for r in res["records"]:
        e, n = lora.get("cpu_seconds", {}).get(r["config"]), r.get("native")
        if r["variant"] == "base" and e and n:
            lines += ["", f"{r['config']}: eager standard LoRA {e:.2f} CPU s per step / the default exported step run by "
                      f"the native core {n['cpu_seconds_per_step']:.3f} CPU s = {e / n['cpu_seconds_per_step']:.2f}x "
                      f"(Python bindings {e / r['cpu_seconds_per_step']:.2f}x), one thread, whole-process RssAnon "
                      f"{n['rss_anon_bytes'] / 2**20:.1f} MiB; commands: `{lora.get('command', '')}` and "
                      f"`{res['provenance']['command']}` (native: `{n['command']}`)."]
    for r in res["records"]:
        if "profile" not in r:
            continue
        prof = r["profile"]
        scale = r["cpu_seconds_per_step"] / prof["profiled_instruction_seconds"]
        lines += ["", f"## {r['config']}, {r['variant']}: the largest items", "",
                  f"ETDump's per-instruction times are wall clock (the shared machine inflates them evenly: here "
                  f"{prof['profiled_instruction_seconds']:.2f} s per step against {r['cpu_seconds_per_step']:.2f} "
                  "CPU s timed), so each item is given as its share and as that share of the timed CPU seconds.", "",
                  "| op / delegate | share | ~ CPU s / step | calls / step |", "|---|---|---|---|"]
        for row in prof["rows"][:16]:
            lines.append(f"| {row['what']} | {100 * row['share']:.1f}% | {row['share'] * r['cpu_seconds_per_step']:.3f} "
                         f"| {row['calls_per_step']:.0f} |")
        grouped = Counter()
        for row in prof["rows"]:
            w = row["what"]
            key = ("xnnpack bmm" if w.startswith("xnnpack: bmm") else
                   "int8 codes: cast / transpose" if ("cast int8" in w or "quantize" in w) else
                   "portable permute_copy" if w == "portable: aten::permute_copy.out" else
                   "xnnpack other" if w.startswith("xnnpack") else "portable other")
            grouped[key] += row["cpu_seconds_per_step"] * scale
        lines += ["", "Grouped (~ CPU s / step): " + ", ".join(f"{k} {v:.3f} ({100 * v / r['cpu_seconds_per_step']:.0f}%)"
                                                          for k, v in grouped.most_common())]
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", default="tiny", help="tiny | headline (memory_speed.py's)")
    ap.add_argument("--only", default="")
    ap.add_argument("--variants", default="base")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--keep-programs", default="/tmp/step_profile", help="programs go (and are reused from) here")
    ap.add_argument("--reexport", action="store_true", help="export again even where the folder holds a program")
    ap.add_argument("--out", default=str(RESULTS / "step_profile"))
    ap.add_argument("--merge", action="store_true", help="keep the records of --out's JSON for other variants")
    ap.add_argument("--native", action="store_true", help="also run each program by the native core (ditskip-run step)")
    ap.add_argument("--profile", action=argparse.BooleanOptionalAction, default=True,
                    help="the ETDump run (--no-profile: the timed runs only)")
    ap.add_argument("--lora-from", default="", help="a memory_speed.py result JSON with the 'lora' variant")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="timed", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(Path(args.child), args.steps, args.threads, args.mode)))
        return
    from _meta import provenance
    from memory_speed import config_specs
    specs = config_specs(args.configs)
    names = [n for n in args.only.split(",") if n] or list(specs)
    out = Path(args.out)
    old = json.loads(out.with_suffix(".json").read_text())["records"] if args.merge and out.with_suffix(
        ".json").is_file() else []
    records = []
    runner = None
    if args.native:
        from device_tests.native_runtime import build
        runner = build("x86_64")
    for name in names:
        for variant in [v for v in args.variants.split(",") if v]:
            folder = Path(args.keep_programs) / f"{name}_{variant}"
            if args.reexport or not (folder / "meta.json").is_file():
                print(f"export {name} {variant}", file=sys.stderr, flush=True)
                export_variant(specs[name], variant, args.rank, folder)
            meta = json.loads((folder / "meta.json").read_text())
            timed = run_child(folder, args.steps, args.threads, "timed")
            prof = None
            if args.profile:
                prof = run_child(folder, args.steps, args.threads, "profiled")
                prof["per_instruction"] = _etdump_times(Path(prof.pop("etdump")), args.steps + 1)
            rec = {"config": name, "variant": variant, "export_config": meta["export_config"],
                   "export_seconds": meta["export_seconds"], "planned_arena_bytes": meta["planned_arena_bytes"],
                   "ops": meta["ops"], "cpu_seconds_per_step": timed["cpu_seconds_per_step"],
                   "cpu_seconds": timed["cpu_seconds"], "loss": timed["loss"],
                   "pte_bytes": meta["pte_bytes"], "ptd_bytes": meta["ptd_bytes"]}
            if prof is not None:
                rec["profiled_cpu_seconds"] = prof["cpu_seconds"]
                rec["profile"] = aggregate(folder, meta, prof, args.steps)
            if runner is not None:
                rec["native"] = run_native(folder, args.steps, runner, args.threads)
                print(f"{name} {variant} native: {rec['native']['cpu_seconds_per_step']:.3f} CPU s, RssAnon "
                      f"{rec['native']['rss_anon_bytes'] / 2**20:.1f} MiB", file=sys.stderr, flush=True)
            base = Path(args.keep_programs) / f"{name}_base"
            if variant != "base" and (base / "grads.pt").is_file():
                rec["vs_base"] = grad_error(base, folder)
            print(f"{name} {variant}: {rec['cpu_seconds_per_step']:.3f} CPU s", file=sys.stderr, flush=True)
            records.append(rec)
    keep = [r for r in old if (r["config"], r["variant"]) not in {(r2["config"], r2["variant"]) for r2 in records}]
    res = {"provenance": provenance(), "steps": args.steps, "threads": args.threads, "records": keep + records}
    if args.lora_from:
        doc = json.loads(Path(args.lora_from).read_text())
        res["eager_lora"] = {"source": f"{args.lora_from} ({doc.get('command', '')}, {doc.get('date_utc', '')})",
                             "command": doc.get("command", ""),
                             "cpu_seconds": {r["config"]: r["cpu_seconds_per_step"] for r in doc["records"]
                                             if r["variant"] == "lora" and "cpu_seconds_per_step" in r}}
    out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    write_report(res, out)


if __name__ == "__main__":
    main()
