"""Tables, targets and the bar chart for memory_speed.py results (also rerunnable on a saved JSON:
`python benchmarks/report.py benchmarks/results/memory_speed.json`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

MIB = 1024 ** 2
TARGETS = {"vs_lora": 0.75, "vs_lora_gc": 0.50, "speedup": 4.0, "planner": 0.10}
# The eager process's own step overhead that no tensor accounts for (code pages and kernels touched by the first
# step, thread stacks, allocator metadata): step RSS - allocator peak on the tiny configs, where tensors are a few
# MiB (memory_speed_tiny.md: 58-80 MiB). The planner's eager prediction adds it as its runtime overhead.
EAGER_OVERHEAD_MIB = 64


def _with_overhead(records) -> None:
    for r in records:
        if "predicted_step_bytes" in r:
            r["predicted_eager_bytes"] = r["predicted_step_bytes"] + EAGER_OVERHEAD_MIB * MIB
            r["planner_eager_error_vs_rss"] = r["predicted_eager_bytes"] / r["step_rss_bytes"] - 1


def _by(records):
    out = {}
    for r in records:
        if "error" not in r:
            out.setdefault(r["config"], {})[r["variant"]] = r
    return out


def _flops(r) -> int:
    """FLOPs of one step: FlopCounterMode over the planner's traced step (shape-based, equal to a count on real
    tensors; counting on real tensors inside the measured process would defeat gradient checkpointing)."""
    return r.get("predicted_flops") or r["flops"]


def targets(records) -> dict:
    res = {}
    for cfg, v in _by(records).items():
        if not {"lora", "lora_gc", "blockskip_int8"} <= v.keys():
            continue
        ours, lora, gc = v["blockskip_int8"], v["lora"], v["lora_gc"]
        d = {}
        for key in ("step_rss_bytes", "peak_rss_bytes", "allocator_peak_bytes"):
            d[key] = {"vs_lora": 1 - ours[key] / lora[key], "vs_lora_gc": 1 - ours[key] / gc[key]}
        d["speedup_vs_lora_wall"] = lora["seconds_per_step"] / ours["seconds_per_step"]
        cpu = lambda r: r.get("cpu_seconds_per_step", r["seconds_per_step"])  # noqa: E731
        d["speedup_vs_lora"] = cpu(lora) / cpu(ours)
        d["flops_ratio_vs_lora"] = _flops(lora) / _flops(ours)
        d["met"] = {"memory_vs_lora": d["step_rss_bytes"]["vs_lora"] >= TARGETS["vs_lora"],
                    "memory_vs_lora_gc": d["step_rss_bytes"]["vs_lora_gc"] >= TARGETS["vs_lora_gc"],
                    "speed": d["speedup_vs_lora"] >= TARGETS["speedup"]}
        res[cfg] = d
    return res


def planner_errors(records) -> dict:
    erro = [r["planner_eager_error_vs_rss"] for r in records if "planner_eager_error_vs_rss" in r]
    errs = [r["planner_error_vs_rss"] for r in records if "planner_error_vs_rss" in r]
    erra = [r["planner_error_vs_allocator"] for r in records if "planner_error_vs_allocator" in r]
    return {"eager_overhead_mib": EAGER_OVERHEAD_MIB,
            "max_abs_error_with_overhead_vs_rss": max(map(abs, erro), default=None),
            "within_10pct_with_overhead": sum(abs(e) <= TARGETS["planner"] for e in erro),
            "max_abs_error_vs_rss": max(map(abs, errs), default=None),
            "max_abs_error_vs_allocator": max(map(abs, erra), default=None),
            "within_10pct_vs_rss": sum(abs(e) <= TARGETS["planner"] for e in errs), "n": len(errs)}


def write_report(result: dict, stem: Path) -> None:
    recs = result["records"]
    _with_overhead(recs)
    tg, pe = targets(recs), planner_errors(recs)
    result["targets"], result["planner_validation"] = tg, pe
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1))
    m = result["machine"]
    lines = [f"# Memory and speed per training step ({result['configs']} configs)", "",
             f"- command: `{result['command']}`",
             f"- date: {result['date_utc']} -> {result['finished_utc']} (UTC)",
             f"- machine: {m['nproc']} CPUs ({m['cpu']}), {m['ram_gib']} GiB RAM, torch {m['torch']}, "
             f"load average at start {m['load_avg_at_start'][0]:.1f} (CPUs shared with other jobs: times are noisy)",
             f"- LoRA rank {result['rank']}, fp32, random weights; median of {result['timed_steps']} timed steps "
             f"(forward + backward + AdamW) after an instrumented warm-up step; each variant a fresh process",
             f"- children run with {result.get('malloc_env') or 'glibc defaults'} (memory_speed.py MALLOC_ENV: freed "
             "tensors go back to the OS, so RSS follows bytes in use; --glibc-default measures without it)",
             "- step RSS = peak RSS (ru_maxrss) - RSS after imports (python + torch + diffusers + peft + torchao); "
             "allocator = bytes of torch storages alive at once (weights, LoRA, AdamW states, inputs + the traced "
             "step peak; planner/tracker.py on real tensors); planner = `trace_step` on fake tensors "
             "(flash attention), error vs step RSS", ""]
    for cfg, v in _by(recs).items():
        params = result.get("params", {}).get(cfg)
        any_r = next(iter(v.values()))
        lines += [f"## {cfg}" + (f" ({params / 1e6:.0f}M parameters)" if params else ""), "",
                  f"baseline RSS after imports {any_r['rss_baseline_bytes'] / MIB:.0f} MiB", "",
                  "| variant | px | blocks | precision | step RSS MiB | peak RSS MiB | allocator MiB | planner tensors MiB "
                  "(err) | planner + eager overhead MiB (err) | CPU s/step | wall s/step | GFLOP/step |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for name, r in v.items():
            s = r["step"]
            nb = "all" if s["kind"] == "diffusers" else f"skip {s['n_front']}+{s['n_back']}"
            lines.append(f"| {LABELS_OF(name)} | {s['resolution_px']} | {nb} | {s.get('precision', s.get('bits'))} | "
                         f"{r['step_rss_bytes'] / MIB:.1f} | {r['peak_rss_bytes'] / MIB:.1f} | "
                         f"{r['allocator_peak_bytes'] / MIB:.1f} | {r['predicted_step_bytes'] / MIB:.1f} "
                         f"({100 * r['planner_error_vs_rss']:+.1f}%) | {r['predicted_eager_bytes'] / MIB:.1f} "
                         f"({100 * r['planner_eager_error_vs_rss']:+.1f}%) | {r.get('cpu_seconds_per_step', float('nan')):.3f} | "
                         f"{r['seconds_per_step']:.3f} | "
                         f"{_flops(r) / 1e9:.2f} |")
        if cfg in tg:
            t = tg[cfg]
            lines += ["", f"BlockSkip 50% + int8 vs LoRA: step RSS {100 * t['step_rss_bytes']['vs_lora']:.1f}% lower "
                      f"(target >= 75%: {'met' if t['met']['memory_vs_lora'] else 'NOT met'}), vs LoRA + gradient "
                      f"checkpointing {100 * t['step_rss_bytes']['vs_lora_gc']:.1f}% lower (target >= 50%: "
                      f"{'met' if t['met']['memory_vs_lora_gc'] else 'NOT met'}); absolute peak RSS "
                      f"{100 * t['peak_rss_bytes']['vs_lora']:.1f}% / {100 * t['peak_rss_bytes']['vs_lora_gc']:.1f}% "
                      f"lower; allocator peak {100 * t['allocator_peak_bytes']['vs_lora']:.1f}% / "
                      f"{100 * t['allocator_peak_bytes']['vs_lora_gc']:.1f}% lower; CPU time per step "
                      f"{t['speedup_vs_lora']:.1f}x lower (target >= 4x: {'met' if t['met']['speed'] else 'NOT met'}"
                      f"; wall time {t['speedup_vs_lora_wall']:.1f}x), FLOPs {t['flops_ratio_vs_lora']:.1f}x fewer."]
        lines.append("")
    for rr in result.get("reruns", []):
        lines.append(f"- rerun: `{rr['command']}` ({rr['date_utc']} UTC) replaced {rr['replaced']}")
    failed = [r for r in recs if "error" in r]
    if failed:
        lines += ["## Failed variants", ""] + [f"- {r['config']} {r['variant']}: `{r['error'][-300:]}`" for r in failed]
    lines += ["## Planner validation", "",
              f"Planner (fake-tensor trace) + eager overhead {EAGER_OVERHEAD_MIB} MiB vs measured step RSS: max |error| "
              f"{100 * (pe['max_abs_error_with_overhead_vs_rss'] or 0):.1f}% ({pe['within_10pct_with_overhead']}/"
              f"{pe['n']} variants within 10%). Tensors only (no overhead) vs step RSS: max |error| "
              f"{100 * (pe['max_abs_error_vs_rss'] or 0):.1f}% ({pe['within_10pct_vs_rss']}/{pe['n']} within 10%); "
              f"vs the allocator-level peak on real tensors: max |error| "
              f"{100 * (pe['max_abs_error_vs_allocator'] or 0):.1f}%.", "",
              f"![chart]({stem.name}.png)", ""]
    stem.with_suffix(".md").write_text("\n".join(lines))
    chart(result, stem.with_suffix(".png"))


def LABELS_OF(name: str) -> str:
    from memory_speed import LABELS
    return LABELS.get(name, name)


def chart(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    by = _by(result["records"])
    fig, axes = plt.subplots(len(by), 2, figsize=(13, 3.6 * len(by)), squeeze=False)
    for row, (cfg, v) in enumerate(by.items()):
        names = list(v)
        labels = [LABELS_OF(n) for n in names]
        rss = [v[n]["step_rss_bytes"] / MIB for n in names]
        pred = [v[n]["predicted_eager_bytes"] / MIB for n in names]
        sec = [v[n].get("cpu_seconds_per_step", v[n]["seconds_per_step"]) for n in names]
        y = range(len(names))
        ax = axes[row][0]
        ax.barh([i + 0.2 for i in y], rss, height=0.4, label="measured (peak RSS - import baseline)")
        ax.barh([i - 0.2 for i in y], pred, height=0.4, label=f"planner (fake-tensor trace + {EAGER_OVERHEAD_MIB} MiB eager overhead)", alpha=0.7)
        ax.set_yticks(list(y), labels)
        ax.invert_yaxis()
        ax.set_xlabel("MiB per training step")
        ax.set_title(f"{cfg}: peak memory")
        ax.legend(fontsize=7, loc="lower right")
        ax = axes[row][1]
        ax.barh(list(y), sec, color="tab:green")
        ax.set_yticks(list(y), labels)
        ax.invert_yaxis()
        ax.set_xlabel("CPU seconds per step (median, 1 thread)")
        ax.set_title(f"{cfg}: time per step")
    m = result["machine"]
    fig.suptitle(f"{result['command']}  |  {m['nproc']} CPUs {m['cpu']}, {m['ram_gib']} GiB  |  {result['date_utc']}",
                 fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    p = Path(sys.argv[1])
    sys.path.insert(0, str(Path(__file__).parent))
    write_report(json.loads(p.read_text()), p.with_suffix(""))
