"""Every lever tried on `make demo`'s path, in one table and one chart, from the paired results
`demo_subjects.py --paired` wrote (no training here).

Each row is a pairing B - A over the runs (subject x training seed) both recipes have: recognised (the share of a
run's 16 pictures with the subject's shape, colour, marking and the prompted background) and subject similarity,
mean +- 95% Student-t CI over those runs, and the runs at 3 of 4 prompts recognised at `make demo`'s noise (A; B).
Rows in two groups: the levers against the demo's recipe (or a control on the same machine), and where the subject
is lost (the references' own backgrounds against new ones; full LoRA against BlockSkip 50%).

    python testbed/experiments/demo_levers.py            # -> testbed/results/demo_levers.{json,md,png}
"""

from __future__ import annotations

import argparse
import json
import sys
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks._meta import provenance, provenance_md, write_result                               # noqa: E402

LEVERS = "levers against the demo's recipe"
WHERE = "where the subject is lost"
ROWS = [   # (group, label, paired result in testbed/results/)
    (LEVERS, "guidance 3 (demo: 6)", "demo_subjects_guidance3_vs_6.json"),
    (LEVERS, "guidance 12", "demo_subjects_guidance12_vs_6.json"),
    (LEVERS, "logit-normal timesteps", "demo_subjects_logit_vs_uniform.json"),
    (LEVERS, "prior preservation, 5 class images", "demo_subjects_prior5_vs_none.json"),
    (LEVERS, "prior preservation, 10 class images", "demo_subjects_prior10_vs_none.json"),
    (LEVERS, "five times the training (1000 x 1e-3)", "demo_subjects_long_vs_demo.json"),
    (LEVERS, "learning rate falling linearly", "demo_subjects_linear_vs_constant.json"),
    (LEVERS, "LoRA drawn at weight 0.6", "demo_subjects_weight0.6_vs_1.json"),
    (LEVERS, "LoRA drawn at weight 0.8", "demo_subjects_weight0.8_vs_1.json"),
    (LEVERS, "caption dropout of the background", "demo_subjects_unnamed_vs_named.json"),
    (LEVERS, "7 backgrounds (heart)", "demo_subjects_backgrounds7_vs_5.json"),
    (LEVERS, "6 backgrounds (star, crescent)", "demo_subjects_backgrounds6_vs_5.json"),
    (LEVERS, "no LoRA on the text stream", "demo_subjects_imagestream_vs_all.json"),
    (LEVERS, "split 5/1 instead of selected", "demo_subjects_split51_vs_selected_xeon.json"),
    (LEVERS, "weights knowing named markings (vs control)", "demo_subjects_marking_domain_vs_control.json"),
    (LEVERS, "weights knowing named instances (vs control)", "demo_subjects_instance_domain_vs_control.json"),
    (LEVERS, "grown testbed A (vs control)", "demo_subjects_grown_A_vs_control.json"),
    (LEVERS, "grown testbed B (vs control)", "demo_subjects_grown_B_vs_control.json"),
    (LEVERS, "6x the GPU pretraining (committed vs stage 2)", "demo_subjects_committed_vs_gpu2_weights.json"),
    (LEVERS, "no block skipped (full LoRA)", "demo_subjects_unskipped_vs_selected_xeon.json"),
    (WHERE, "BlockSkip 50%: seen - new backgrounds", "demo_subjects_seen_vs_eval.json"),
    (WHERE, "full LoRA: seen - new backgrounds", "demo_subjects_seen_vs_eval_unskipped.json"),
    (WHERE, "split 5/1: seen - new backgrounds", "demo_subjects_seen_vs_eval_split51.json"),
    (WHERE, "seen backgrounds: full LoRA - BlockSkip 50%", "demo_subjects_seen_unskipped_vs_selected.json"),
    (WHERE, "seen backgrounds: full LoRA - split 5/1", "demo_subjects_seen_unskipped_vs_split51.json"),
]


def collect(results: Path) -> list[dict]:
    """The rows, each with its pairing's figures and where they came from; refuses a missing file in one line."""
    rows = []
    for group, label, name in ROWS:
        path = results / name
        if not path.is_file():
            raise SystemExit(f"demo_levers: no {path} (demo_subjects.py --paired writes it)")
        doc = json.loads(path.read_text())
        rows.append({"group": group, "lever": label, "file": name, "a": doc["a"], "b": doc["b"], "runs": doc["runs"],
                     "recognised": doc["recognised"], "similarity": doc["similarity"], "shown": doc["shown"],
                     "machine": doc["run"]["machine"], "date": doc["run"]["date"]})
    return rows


def signed(x: float) -> str:
    """x to 3 decimals, halves away from 0 (the paired results hold 4: 0.0625 -> +0.063, as the README reads them)."""
    return f"{Decimal(repr(x)).quantize(Decimal('0.001'), ROUND_HALF_UP):+.3f}"


def cpu(machine: str) -> str:
    """provenance's machine line -> the CPU's family ("Intel Xeon", "AMD EPYC")."""
    return next((name for key, name in (("EPYC", "AMD EPYC"), ("Xeon", "Intel Xeon")) if key in machine), machine)


def separated(m: dict) -> bool:
    """The CI leaves 0 out."""
    return abs(m["mean"]) > m["ci95"]


def paired_cell(m: dict) -> str:
    """A paired difference's table cell: "+0.094 +- 0.102", bold where the CI leaves 0 out."""
    text = f"{signed(m['mean'])} +- {signed(m['ci95'])[1:]}"
    return f"**{text}**" if separated(m) else text


def markdown(doc: dict) -> str:
    lines = ["# Every lever tried on `make demo`'s path", "", provenance_md(doc["run"]), "",
             "Each row: recipe B - recipe A (`demo_subjects.py --paired A B`) over the runs both have (subject x "
             "training seed); recognised = the share of a run's 16 pictures with the subject's shape, colour, marking "
             "and the prompted background; mean +- 95% CI over runs; **bold** where the CI leaves 0 out; shown = runs "
             "with 3 of 4 prompts recognised at `make demo`'s noise (A; B).", ""]
    for group in dict.fromkeys(r["group"] for r in doc["rows"]):
        lines += [f"## {group[0].upper()}{group[1:]}", "", "| lever | runs | recognised | similarity | shown (A; B) | "
                  "A -> B | file |", "|---|---|---|---|---|---|---|"]
        for r in (r for r in doc["rows"] if r["group"] == group):
            cell = [paired_cell(r[m]) for m in ("recognised", "similarity")]
            lines.append(f"| {r['lever']} | {r['runs']} | {cell[0]} | {cell[1]} | {r['shown'][0]}; {r['shown'][1]} "
                         f"| `{r['a']}` -> `{r['b']}` | `{r['file']}` ({cpu(r['machine'])}, {r['date'][:10]}) |")
        lines.append("")
    lines += [f"Chart `{doc['png']}`: the recognised differences with their CIs, one row per lever."]
    return "\n".join(lines) + "\n"


def chart(rows: list[dict], png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(rows) + 1.2))
    ys = list(range(len(rows)))[::-1]
    for y, r in zip(ys, rows):
        m = r["recognised"]
        colour = "tab:blue" if r["group"] == LEVERS else "tab:red"
        ax.errorbar(m["mean"], y, xerr=m["ci95"], fmt="o", color=colour, capsize=3)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_yticks(ys, [f"{r['lever']} ({r['runs']})" for r in rows], fontsize=8)
    ax.set_xlabel("recognised, B - A (share of a run's pictures; mean and 95% CI over runs)")
    ax.set_title("make demo's path: levers (blue) and where the subject is lost (red)", fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=str(ROOT / "testbed" / "results"),
                    help="where the paired results are and the table goes")
    args = ap.parse_args()
    results = Path(args.results)
    rows = collect(results)
    stem = results / "demo_levers"
    doc = {"run": provenance(), "png": "demo_levers.png", "rows": rows}
    print(write_result(doc, stem, markdown))
    chart(rows, stem.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
