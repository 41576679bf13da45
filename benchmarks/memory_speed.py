"""Memory and speed of one training step: standard LoRA against BlockSkip, same architecture, same run.

    python benchmarks/memory_speed.py --configs tiny                  # quick run (flux-tiny, sana-tiny)
    nice -n 10 python benchmarks/memory_speed.py --configs headline   # FLUX / SANA layouts, ~300M parameters

Every (config, variant) runs in a fresh process (`--child`), so peaks do not leak from one variant to the next.
Variants (PAPER.md; 50% skip uses the planner's split, split.py):
  1 lora            diffusers forward, LoRA on every block, data resolution (what train_dreambooth_lora_* does)
  2 lora_gc         the same with diffusers' enable_gradient_checkpointing()
  3 patches         dynamic patches only: every block, train resolution (crops resized to s_min)
  4 skip            block skip only: 50% of blocks skipped, residual-cache entry, data resolution
  5 blockskip       both: 50% skip at train resolution
  6 blockskip_int8 / blockskip_int4: 5 with int8 / int4 frozen weights (dequantized again in backward);
    blockskip_int8_saved: int8 with autograd saving the dequantized weights (QuantSpec default), for contrast
(7, the ExecuTorch program, is measured by benchmarks/executorch_memory.py when the exporter is available.)

Per variant, in the child: RSS after imports (baseline), RSS after building the model, peak RSS (ru_maxrss) after
1 instrumented warm-up step + N timed steps; the instrumented step records the allocator-level live-tensor peak (planner/tracker.py on real tensors: bytes of torch storages alive at once, what
torch's CPU allocator handed out, before malloc's overhead); timed steps give seconds per step (forward + backward +
AdamW; wall and CPU time, with one torch thread: the CPUs here are shared, so CPU time is the steadier figure).
The parent also asks the planner (fake tensors, flash attention as eager CPU runs) for the same step and
reports its error against the measured peak RSS above the baseline; FLOPs are torch's FlopCounterMode over that
traced step (shape-based: the same count as on real tensors, tests/test_planner.py checks it; counted apart from
the memory trace, because FlopCounterMode keeps the activations gradient checkpointing drops). Weights are random (fp32 on CPU).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"
MIB = 1024 ** 2
# device_tests/runner.py's allocator setting (RSS follows the bytes in use); --glibc-default turns it off.
from device_tests.runner import MALLOC_ENV  # noqa: E402

VARIANTS = ["lora", "lora_gc", "patches", "skip", "blockskip", "blockskip_int8", "blockskip_int4",
            "blockskip_int8_saved"]
LABELS = {"lora": "1 LoRA (full res)", "lora_gc": "2 LoRA + grad ckpt", "patches": "3 dynamic patches only",
          "skip": "4 block skip only (50%)", "blockskip": "5 BlockSkip (50%)", "blockskip_int8": "6 BlockSkip + int8",
          "blockskip_int4": "6 BlockSkip + int4", "blockskip_int8_saved": "6' int8, dequant saved"}


def headline_specs():
    """FLUX and SANA layouts at a few hundred million parameters (random weights), sized for 2 CPU cores."""
    from ditskip_edge.models.specs import BUILTIN_SPECS, TextSpec
    flux, sana = BUILTIN_SPECS["flux-dev"], BUILTIN_SPECS["sana-600m"]
    flux_l = replace(flux, name="flux-layout-300m",
                     transformer_config=dict(flux.transformer_config, num_layers=4, num_single_layers=8,
                                             num_attention_heads=8, attention_head_dim=128),
                     text=TextSpec("pipeline", seq_len=128, dim=4096, pooled_dim=768), data_px=256, train_px=128)
    sana_l = replace(sana, name="sana-layout-250m",
                     transformer_config=dict(sana.transformer_config, num_layers=12),
                     text=TextSpec("pipeline", seq_len=128, dim=2304), data_px=512, train_px=256)
    return {flux_l.name: flux_l, sana_l.name: sana_l}


def config_specs(which: str):
    from ditskip_edge.models.specs import BUILTIN_SPECS
    if which == "tiny":
        return {n: BUILTIN_SPECS[n] for n in ("flux-tiny", "sana-tiny")}
    if which == "headline":
        return headline_specs()
    raise SystemExit(f"--configs {which!r}: expected tiny or headline")


def step_config(spec, variant: str, rank: int, skip_ratio: float = 0.5):
    from ditskip_edge.memory_estimate.program import StepConfig
    from ditskip_edge.memory_estimate.split import split_for_ratio
    c = spec.transformer_config
    nb = int(c["num_layers"]) + int(c.get("num_single_layers", 0))
    plan = split_for_ratio(nb, skip_ratio)
    L = spec.text.seq_len
    base = dict(spec=spec, text_tokens=L, rank=rank)
    skip = dict(n_front=plan.n_front, n_back=plan.n_back)
    return {
        "lora": StepConfig(**base, resolution_px=spec.data_px, kind="diffusers"),
        "lora_gc": StepConfig(**base, resolution_px=spec.data_px, kind="diffusers", gradient_checkpointing=True),
        "patches": StepConfig(**base, resolution_px=spec.train_px, kind="diffusers"),
        "skip": StepConfig(**base, resolution_px=spec.data_px, **skip),
        "blockskip": StepConfig(**base, resolution_px=spec.train_px, **skip),
        "blockskip_int8": StepConfig(**base, resolution_px=spec.train_px, precision="int8", **skip),
        "blockskip_int4": StepConfig(**base, resolution_px=spec.train_px, precision="int4", **skip),
        "blockskip_int8_saved": StepConfig(**base, resolution_px=spec.train_px, precision="int8", recompute_dequant=False,
                                           **skip),
    }[variant]


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# ---------------------------------------------------------------------------------------------------- child
def child(args) -> None:
    import torch
    import diffusers  # noqa: F401
    import peft  # noqa: F401
    import torchao.quantization.quant_primitives  # noqa: F401  (every variant pays the same imports)
    from ditskip_edge.memory_estimate.memory import program_preexisting
    from ditskip_edge.memory_estimate.program import build_step_program
    from ditskip_edge.memory_estimate.tracker import StepMemoryTracker
    torch.set_num_threads(args.threads)
    spec = config_specs(args.configs)[args.config]
    cfg = step_config(spec, args.variant, args.rank)
    rss_base = rss_bytes()
    t0 = time.perf_counter()
    prog = build_step_program(cfg, device="cpu", seed=0)
    build_s = time.perf_counter() - t0
    rss_built = rss_bytes()
    opt = torch.optim.AdamW(prog.lora_params, lr=1e-4)

    def step():
        loss = prog.loss()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    # warm-up step, instrumented: the live-tensor peak of forward + backward; AdamW states appear after. FLOPs are not
    # counted here: FlopCounterMode keeps the activations gradient checkpointing drops (the parent counts them)
    pre = program_preexisting(prog)
    tracker = StepMemoryTracker(pre)
    with tracker:
        loss = prog.loss()
        loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    states = [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    resident = (prog.frozen_bytes() + prog.lora_bytes() + sum(v.numel() * v.element_size() for v in states)
                + sum(prog.input_bytes().values()))
    times, cpu_times = [], []
    for _ in range(args.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        loss = step()
        times.append(time.perf_counter() - t0)
        cpu_times.append(time.process_time() - c0)
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({
        "config": args.config, "variant": args.variant, "rss_baseline_bytes": rss_base,
        "rss_after_build_bytes": rss_built, "rss_end_bytes": rss_bytes(), "peak_rss_bytes": peak_rss, "step_rss_bytes": peak_rss - rss_base,
        "allocator_resident_bytes": resident, "allocator_step_peak_bytes": tracker.peak_bytes,
        "allocator_peak_bytes": resident + tracker.peak_bytes, "frozen_weights_bytes": prog.frozen_bytes(),
        "lora_params": sum(p.numel() for p in prog.lora_params), "flops": 0,   # counted by the parent
        "seconds_per_step": sorted(times)[len(times) // 2], "step_seconds": times,
        "cpu_seconds_per_step": sorted(cpu_times)[len(cpu_times) // 2], "step_cpu_seconds": cpu_times, "build_seconds": build_s,
        "loss": float(loss), "load_avg_1m": os.getloadavg()[0],
        "step": {"resolution_px": cfg.resolution_px, "text_tokens": cfg.text_tokens, "n_front": cfg.n_front,
                 "n_back": cfg.n_back, "precision": cfg.precision, "kind": cfg.kind,
                 "gradient_checkpointing": cfg.gradient_checkpointing, "recompute_dequant": cfg.recompute_dequant},
    }))


# --------------------------------------------------------------------------------------------------- parent
def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    mem = next(int(line.split()[1]) * 1024 for line in open("/proc/meminfo") if line.startswith("MemTotal"))
    import torch
    return {"nproc": os.cpu_count(), "cpu": cpu, "ram_gib": round(mem / 1024 ** 3, 1), "python": platform.python_version(),
            "torch": torch.__version__, "platform": platform.platform(), "load_avg_at_start": os.getloadavg()}


def predict(spec, variant: str, rank: int) -> dict:
    from ditskip_edge.memory_estimate.memory import MemoryEstimate, trace_step
    tr = trace_step(step_config(spec, variant, rank), attention="flash")
    mp = MemoryEstimate.from_trace(tr, 0)
    return {"predicted_step_bytes": mp.step_bytes, "predicted": mp.to_json(), "predicted_flops": tr.flops}


def run(args) -> dict:
    specs = config_specs(args.configs)
    variants = args.variants.split(",") if args.variants else VARIANTS
    records = []
    for name, spec in specs.items():
        for v in variants:
            cmd = [sys.executable, __file__, "--child", "--configs", args.configs, "--config", name, "--variant", v,
                   "--steps", str(args.steps), "--rank", str(args.rank), "--threads", str(args.threads)]
            t0 = time.perf_counter()
            env = dict(os.environ, PYTHONPATH=str(ROOT))
            if not args.glibc_default:
                env.update(MALLOC_ENV)
            out = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if out.returncode != 0:
                print(f"{name} {v}: FAILED\n{out.stderr[-3000:]}", file=sys.stderr, flush=True)
                records.append({"config": name, "variant": v, "error": out.stderr[-2000:]})
                continue
            rec = json.loads(out.stdout.strip().splitlines()[-1])
            rec["child_wall_seconds"] = round(time.perf_counter() - t0, 1)
            rec.update(predict(spec, v, args.rank))
            rec["flops"] = rec["predicted_flops"]
            rec["planner_error_vs_rss"] = rec["predicted_step_bytes"] / rec["step_rss_bytes"] - 1
            rec["planner_error_vs_allocator"] = rec["predicted_step_bytes"] / rec["allocator_peak_bytes"] - 1
            records.append(rec)
            print(f"{name:18s} {v:22s} step RSS {rec['step_rss_bytes'] / MIB:8.1f} MiB  allocator "
                  f"{rec['allocator_peak_bytes'] / MIB:8.1f} MiB  planner {rec['predicted_step_bytes'] / MIB:8.1f} "
                  f"MiB ({100 * rec['planner_error_vs_rss']:+.1f}% vs RSS)  {rec['seconds_per_step']:.3f} s/step "
                  f"({rec['cpu_seconds_per_step']:.3f} CPU s)  "
                  f"{rec['flops'] / 1e9:.1f} GFLOP  [{rec['child_wall_seconds']} s]", file=sys.stderr, flush=True)
    return {"records": records, "params": {n: _param_count(s) for n, s in specs.items()}}


def _param_count(spec) -> int:
    from ditskip_edge.models.loading import build_transformer
    return sum(p.numel() for p in build_transformer(spec, "meta").parameters())


def merge_into(path: Path, new: dict, command: str, started) -> None:
    old = json.loads(path.read_text())
    keys = {(r["config"], r["variant"]) for r in new["records"]}
    old["records"] = [r if (r["config"], r["variant"]) not in keys else
                      next(n for n in new["records"] if (n["config"], n["variant"]) == (r["config"], r["variant"]))
                      for r in old["records"]]
    for r in old["records"]:
        if (r["config"], r["variant"]) in keys:
            r["rerun_by"] = command
    old.setdefault("reruns", []).append({"command": command, "date_utc": started.isoformat(timespec="seconds"),
                                         "replaced": sorted(map(list, keys))})
    path.write_text(json.dumps(old, indent=1))
    from report import write_report
    write_report(old, path.with_suffix(""))
    print(f"merged {sorted(keys)} into {path}", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", default="tiny", help="tiny | headline")
    ap.add_argument("--variants", default="", help="comma-separated subset of " + ",".join(VARIANTS))
    ap.add_argument("--steps", type=int, default=2, help="timed steps per variant (after warm-up + instrumented)")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per child (1: CPUs are shared here)")
    ap.add_argument("--out", default=None, help="results stem (default benchmarks/results/memory_speed[_tiny])")
    ap.add_argument("--merge-into", default=None,
                    help="replace these (config, variant) records in an existing results JSON and rewrite its report")
    ap.add_argument("--merge-from", default=None, help="with --merge-into: take the records from this results JSON "
                    "instead of running")
    ap.add_argument("--glibc-default", action="store_true", help="children keep glibc's default malloc tuning")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--config", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--variant", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    started = datetime.datetime.now(datetime.timezone.utc)
    if args.merge_from and args.merge_into:
        src = json.loads(Path(args.merge_from).read_text())
        return merge_into(Path(args.merge_into), src, src["command"],
                          datetime.datetime.fromisoformat(src["date_utc"]))
    result = run(args)
    if args.merge_into:
        return merge_into(Path(args.merge_into), result, " ".join(["python"] + sys.argv), started)
    result.update({"command": " ".join(["python"] + sys.argv), "date_utc": started.isoformat(timespec="seconds"),
                   "finished_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   "machine": machine(), "configs": args.configs, "rank": args.rank, "timed_steps": args.steps,
                   "malloc_env": {} if args.glibc_default else MALLOC_ENV})
    stem = Path(args.out) if args.out else RESULTS / ("memory_speed" if args.configs == "headline"
                                                      else f"memory_speed_{args.configs}")
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1))
    from report import write_report   # benchmarks/report.py: table, targets, chart
    write_report(result, stem)
    print(f"wrote {stem}.json / .md / .png", file=sys.stderr)


if __name__ == "__main__":
    main()
