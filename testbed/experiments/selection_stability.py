"""How firmly the probe's noise seeds back the split selection picks on the testbed (issue 16, selection).

For each held-out subject (flux-testbed, the study's 5 references and training prompt): one base probe over many
noise seeds (default 16: seeds 0 .. 15), the 30% and 50% budgets, and from its per-seed scores
- the pick of the whole probe and its bootstrap pick share (`ditskip_edge.selection.scorer.pick_stability`, what
  `compile --skip-ratio` now records in the plan and warns about below 0.8), with the runner-up;
- the split each noise seed alone would pick;
- the picks of every window of w consecutive seeds (w = 2: what the default 2-seed probe picks when the study
  passes training seed j, which averages noise seeds j and j + 1; w = 4, 8: a probe 2x / 4x as long).
The windows are sub-averages of the same per-seed scores, so they cost no extra forwards.

    PYTHONPATH=. python testbed/experiments/selection_stability.py [--num-seeds 16] [--subjects ...]
writes testbed/results/selection_stability.{json,md}.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

WINDOWS = (2, 4, 8)


def window_picks(splits: list[dict], width: int) -> list[list[int]]:
    """The split a probe of `width` consecutive noise seeds (starting at 0, 1, ..) picks, from per-seed scores."""
    from ditskip_edge.selection.scorer import choose
    num_seeds = len(splits[0]["seed_scores"])
    out = []
    for start in range(num_seeds - width + 1):
        rows = [dict(r, score=sum(r["seed_scores"][start:start + width]) / width) for r in splits]
        out.append(list(choose(rows)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subjects", nargs="*", default=["teal_star", "pink_heart", "brown_bowtie", "cyan_crescent"])
    ap.add_argument("--num-seeds", type=int, default=16, help="noise seeds of each probe (0 .. N-1)")
    ap.add_argument("--out", default=str(ROOT / "testbed" / "results" / "selection_stability"))
    args = ap.parse_args()
    from benchmarks._meta import provenance, write_result
    from selection_seeds import subject_selections
    rows = []
    for name, _, out in subject_selections(args.subjects, [0], "base", args.num_seeds):   # noise seeds 0 .. N-1
        for budget in ("30", "50"):
            r = out[budget]
            rows.append({"subject": name, "budget": budget, "plan": r["plan"], "stability": r["stability"],
                         "splits": r["splits"],
                         "windows": {str(w): window_picks(r["splits"], w) for w in WINDOWS if w < args.num_seeds}})
            print(name, budget, r["plan"], r["stability"]["pick_share"], file=sys.stderr, flush=True)
    doc = {**provenance(), "num_seeds": args.num_seeds, "probe": "base", "rows": rows}
    print(write_result(doc, args.out, to_markdown))
    return 0


def _split(p) -> str:
    return f"{p[0]}/{p[1]}"


def _counts(picks) -> str:
    return ", ".join(f"{p} x{n}" for p, n in Counter(_split(p) for p in picks).most_common())


def to_markdown(d: dict) -> str:
    from benchmarks._meta import provenance_md
    n = d["num_seeds"]
    lines = [f"# How firmly the probe's noise seeds back the split selection ({d['probe']} probe, {n} noise seeds)", "",
             provenance_md(d),
             f"One probe per subject over noise seeds 0-{n - 1} (the study's references and training prompt). pick "
             "share: bootstrap resamples of those seeds whose mean score is lowest at the probe's pick "
             "(`selection.scorer.pick_stability`; below 0.8 compile warns that the choice is within the probe's "
             "noise). per seed: the split each noise seed alone picks. w seeds: the picks of the windows of w "
             "consecutive seeds (w = 2 is the default probe, as the study runs it from each training seed).", "",
             "| subject | budget | pick (all seeds) | pick share | runner-up | per seed | "
             + " | ".join(f"{w} seeds" for w in WINDOWS if w < n) + " |",
             "|---|---|---|---|---|---|" + "---|" * len([w for w in WINDOWS if w < n])]
    for r in d["rows"]:
        st = r["stability"]
        share = "-" if st["pick_share"] is None else f"{st['pick_share']:.2f}"
        runner = _split(st["runner_up"]) if st["runner_up"] else "-"
        lines.append(f"| {r['subject']} | {r['budget']}% | {_split(r['plan'])} | {share} | {runner} | "
                     f"{_counts(st['per_seed_picks'])} | " + " | ".join(_counts(v) for v in r["windows"].values())
                     + " |")
    lines += ["", "Mean score per split (50%; lower = the masking changes the picture less), with the per-seed "
              "spread (min - max over the seeds):", "",
              "| subject | " + " | ".join(_split([s["n_front"], s["n_back"]]) for s in
                                           next(r for r in d["rows"] if r["budget"] == "50")["splits"]) + " |",
              "|---|" + "---|" * len(next(r for r in d["rows"] if r["budget"] == "50")["splits"])]
    for r in d["rows"]:
        if r["budget"] != "50":
            continue
        lines.append(f"| {r['subject']} | " + " | ".join(
            f"{s['score']:.3f} ({min(s['seed_scores']):.2f}-{max(s['seed_scores']):.2f})" for s in r["splits"])
            + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
