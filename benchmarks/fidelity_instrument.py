"""Does the planted-subject instrument respond to learning? Full LoRA trained for more and more steps, scored by the
instrument (velocity / sample closure) and by the old measure (subject similarity to the references).

A measure that can see a method must rise with training, stay at 0 with none, and separate neighbouring training
lengths by more than its CI. Writes benchmarks/results/fidelity_instrument.{json,md,png}.

    python benchmarks/fidelity_instrument.py --subjects teal_star pink_heart --train-seeds 0 1 --jobs 2
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _meta import provenance, provenance_md                                      # noqa: E402
from benchmarks.testbed.metrics import mean_ci                                   # noqa: E402
from benchmarks.testbed.study import StudyConfig, run_study                     # noqa: E402

MEASURES = ("velocity_closure", "sample_closure", "subject_sim")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subjects", nargs="*", default=["teal_star", "pink_heart"])
    ap.add_argument("--train-seeds", type=int, nargs="*", default=[0, 1])
    ap.add_argument("--steps", type=int, nargs="*", default=[25, 50, 100, 200, 400])
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    rows = {}
    for steps in args.steps:
        cfg = StudyConfig(out=out / "work" / f"instrument_{steps}", subjects=args.subjects,
                          train_seeds=args.train_seeds, methods=["full_lora"], steps=steps, jobs=args.jobs,
                          teacher_dir=out / "teachers")
        r = run_study(cfg)
        rows[steps] = {k: [u["rows"]["full_lora"][k] for u in r["units"]] for k in MEASURES}
        rows[steps]["seconds"] = r["seconds"]
        anchors = {n: r["table"][n]["subject_sim"] for n in ("base (no LoRA)", "teacher", "fresh photos")}
        print(steps, {k: mean_ci(v) for k, v in rows[steps].items() if k in MEASURES}, flush=True)
    prov = provenance()
    table = {s: {k: mean_ci(v[k]) for k in MEASURES} for s, v in rows.items()}
    (out / "fidelity_instrument.json").write_text(json.dumps({**prov, "rows": rows, "table": table,
                                                               "anchors_subject_sim": anchors}, indent=1))
    _plot(table, out / "fidelity_instrument.png")
    md = ["# Does the instrument respond to learning? (full LoRA, more and more steps)", "", provenance_md(prov),
          f"Units: subjects {args.subjects} x training seeds {args.train_seeds}; LoRA rank 8, lr 5e-3, grad "
          "accumulation 4 (the study's setting) for the listed optimizer steps. Mean +- 95% CI over units.", "",
          "| LoRA steps | velocity closure | sample closure | subject_sim | mean / CI half-width (velocity) |",
          "|---|---|---|---|---|"]
    md.append("| 0 (base) | 0 (by construction) | 0 (by construction) | "
              f"{anchors['base (no LoRA)']['mean']:.3f} +- {anchors['base (no LoRA)']['ci95']:.3f} | - |")
    for s, t in table.items():
        v = t["velocity_closure"]
        md.append(f"| {s} | " + " | ".join(f"{t[k]['mean']:.3f} +- {t[k]['ci95']:.3f}" for k in MEASURES) +
                  f" | {v['mean'] / max(v['ci95'], 1e-12):.1f} |")
    md += ["", f"Teacher's subject_sim {anchors['teacher']['mean']:.3f} +- {anchors['teacher']['ci95']:.3f}; a fresh "
           f"photo's {anchors['fresh photos']['mean']:.3f} +- {anchors['fresh photos']['ci95']:.3f}.", "",
           "Plot: `fidelity_instrument.png`."]
    (out / "fidelity_instrument.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


def _plot(table: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    steps = [0] + list(table)
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    for k, label in [("velocity_closure", "velocity closure"), ("sample_closure", "sample closure"),
                     ("subject_sim", "subject similarity (old measure)")]:
        m = [0.0 if k != "subject_sim" else np.nan] + [table[s][k]["mean"] for s in table]
        e = [0.0] + [table[s][k]["ci95"] for s in table]
        ax.errorbar(steps, m, yerr=e, marker="o", capsize=3, label=label)
    ax.set_xscale("symlog", linthresh=25)
    ax.set_xlabel("full LoRA optimizer steps (x 4 samples)")
    ax.set_ylabel("score (95% CI over units)")
    ax.set_title("flux-testbed: the instrument against training length", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
