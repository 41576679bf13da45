"""How much the testbed's split selection depends on the probe's noise seed (issue 16, selection).

For each held-out subject of the testbed (flux-testbed, the study's references and prompt) and each selection seed,
the 30% and 50% splits the base probe chooses (ditskip_edge.selection, what `compile --skip-ratio` runs; the seed is
the one the study passes: the training seed), with every candidate split's score. Reports per subject and budget how
often each split wins, and how far the candidate scores move between seeds.

    PYTHONPATH=. python benchmarks/selection_seeds.py [--seeds 0 1 2 3 4 5 6 7] [--probe base]
writes benchmarks/results/selection_seeds.{json,md}.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def subject_selections(subjects: list[str], seeds: list[int], probe: str = "base", num_seeds: int | None = None):
    """(subject, seed, study.selected_plans(...)) per held-out subject and probe seed, on the study's 5 references
    and training prompt, one torch thread."""
    import torch
    torch.set_num_threads(1)
    from benchmarks.testbed.scenes import write_reference_photos
    from benchmarks.testbed.study import SUBJECTS, selected_plans, subject_prompt
    for name in subjects:
        subject = SUBJECTS[name]
        with tempfile.TemporaryDirectory() as tmp:
            write_reference_photos(subject, tmp, 5)                        # the study's 5 references
            for seed in seeds:
                yield name, seed, selected_plans(Path(tmp), subject_prompt(subject), seed, probe, num_seeds=num_seeds)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subjects", nargs="*", default=["teal_star", "pink_heart", "brown_bowtie", "cyan_crescent"])
    ap.add_argument("--seeds", type=int, nargs="*", default=list(range(8)))
    ap.add_argument("--probe", default="base", choices=["base", "tuned"])
    ap.add_argument("--num-seeds", type=int, default=None,
                    help="noise seeds the probe averages over (seed, seed + 1, ..; default SelectionConfig's)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "selection_seeds"))
    args = ap.parse_args()
    from _meta import provenance, write_result
    rows = []
    for name, seed, out in subject_selections(args.subjects, args.seeds, args.probe, args.num_seeds):
        rows.append({"subject": name, "seed": seed,
                     **{f"plan_{k}": out[k]["plan"] for k in ("30", "50")},
                     **{f"splits_{k}": out[k]["splits"] for k in ("30", "50")}})
        print(name, seed, out["30"]["plan"], out["50"]["plan"], file=sys.stderr, flush=True)
    from ditskip_edge.selection import SelectionConfig
    doc = {**provenance(), "probe": args.probe, "seeds": args.seeds,
           "num_seeds": args.num_seeds or SelectionConfig().num_seeds, "rows": rows}
    print(write_result(doc, args.out, to_markdown))
    return 0


def to_markdown(d: dict) -> str:
    from _meta import provenance_md
    lines = [f"# Split selection on the testbed across probe seeds ({d['probe']} probe, each averaging "
             f"{d.get('num_seeds', 2)} noise seeds)", "",
             provenance_md(d),
             "Per subject and budget: the split (front / back) the selection chose at each seed, and how often each "
             "split won. The seed is the probe's first noise seed (it averages seed, seed + 1, ..; the study passes the "
             "training seed).", "",
             "| subject | budget | chosen per seed | wins |", "|---|---|---|---|"]
    subjects = list(dict.fromkeys(r["subject"] for r in d["rows"]))
    for s in subjects:
        rs = [r for r in d["rows"] if r["subject"] == s]
        for k in ("30", "50"):
            plans = [f"{r[f'plan_{k}'][0]}/{r[f'plan_{k}'][1]}" for r in rs]
            wins = Counter(plans).most_common()
            lines.append(f"| {s} | {k}% | {' '.join(plans)} | " + ", ".join(f"{p} x{n}" for p, n in wins) + " |")
    allp = Counter(f"{r['plan_50'][0]}/{r['plan_50'][1]}" for r in d["rows"]).most_common()
    lines += ["", "50% over every subject and seed: " + ", ".join(f"{p} x{n}" for p, n in allp) + "."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
