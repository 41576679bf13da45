"""Training length on the planted-subject instrument: the same units (subject x training seed) of two saved studies
that differ in LoRA steps, paired per unit and method.

    python benchmarks/study_steps.py --short benchmarks/results/personalization_study.json \
        --long benchmarks/results/study_steps800/personalization_study.json --methods full_lora blockskip_50
    -> benchmarks/results/study_steps.{json,md}

For each method: its score at each length (mean +- 95% Student-t CI over the units both studies hold), the paired
long - short difference, and BlockSkip's share of full LoRA's score at each length (mean of the per-unit ratios).
Only units present in both files count; the rest of each config (teacher, rank, lr, evaluation) must agree.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._meta import provenance, provenance_md, write_result   # noqa: E402
from benchmarks.testbed.metrics import mean_ci                        # noqa: E402

MEASURES = ("velocity_progress", "sample_progress", "subject_sim", "background_ok")
SAME = ("teacher", "rank", "lr", "grad_accum", "seeds", "sample_steps", "guidance", "model_sha256", "default_probe")


def units_by_key(path: str) -> tuple[dict, dict]:
    doc = json.loads(Path(path).read_text())
    units = {(u["subject"], u["train_seed"]): u for u in doc["units"]}
    return units, json.loads(next(iter(units.values()))["config_key"])


def compare(short: str, long: str, methods: list[str]) -> dict:
    su, sk = units_by_key(short)
    lu, lk = units_by_key(long)
    bad = [k for k in SAME if sk.get(k) != lk.get(k)]
    if bad:
        raise SystemExit(f"study_steps: the two studies differ in {bad}, not only in steps")
    keys = sorted(set(su) & set(lu))
    if not keys:
        raise SystemExit("study_steps: no unit (subject, training seed) is in both studies")
    rows = {}
    for m in methods:
        for k in keys:
            for u in (su[k], lu[k]):
                if m not in u["rows"]:
                    raise SystemExit(f"study_steps: unit {k} has no {m} row")
        rows[m] = {}
        for measure in MEASURES:
            a = [su[k]["rows"][m][measure] for k in keys]
            b = [lu[k]["rows"][m][measure] for k in keys]
            rows[m][measure] = {"short": mean_ci(a), "long": mean_ci(b), "long_minus_short": mean_ci(
                [y - x for x, y in zip(a, b)])}
        rows[m]["plans"] = [lu[k]["rows"][m]["plan"] for k in keys]
    ratios = {}
    if "full_lora" in methods:
        for m in methods:
            if m == "full_lora":
                continue
            ratios[m] = {length: mean_ci([u[k]["rows"][m]["velocity_progress"] / u[k]["rows"]["full_lora"][
                "velocity_progress"] for k in keys]) for length, u in (("short", su), ("long", lu))}
    return {"steps": {"short": sk["steps"], "long": lk["steps"]}, "units": [list(k) for k in keys], "rows": rows,
            "ratio_to_full_lora_velocity_progress": ratios}


def to_markdown(doc: dict) -> str:
    s, lg = doc["steps"]["short"], doc["steps"]["long"]
    f = lambda c: f"{c['mean']:.3f} +- {c['ci95']:.3f}"      # noqa: E731
    lines = [f"# Training length on the planted-subject instrument: {s} vs {lg} LoRA steps", "",
             provenance_md(doc["provenance"]), "",
             f"Units in both studies: {len(doc['units'])} ({', '.join(f'{a} s{b}' for a, b in doc['units'])}). "
             "Mean +- 95% Student-t CI over units; the difference is paired per unit.", "",
             f"| method | measure | {s} steps | {lg} steps | {lg} - {s} (paired) |", "|---|---|---|---|---|"]
    for m, r in doc["rows"].items():
        for measure in MEASURES:
            c = r[measure]
            lines.append(f"| {m} | {measure} | {f(c['short'])} | {f(c['long'])} | {f(c['long_minus_short'])} |")
    for m, r in doc["ratio_to_full_lora_velocity_progress"].items():
        lines += ["", f"{m} / full LoRA, velocity progress (mean of per-unit ratios): {s} steps {f(r['short'])}, "
                      f"{lg} steps {f(r['long'])}; splits at {lg} steps: {doc['rows'][m]['plans']}"]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--short", required=True)
    ap.add_argument("--long", required=True)
    ap.add_argument("--methods", nargs="+", default=["full_lora", "blockskip_50"])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "study_steps"))
    args = ap.parse_args()
    doc = {"provenance": provenance(), "short": args.short, "long": args.long,
           **compare(args.short, args.long, args.methods)}
    print(write_result(doc, args.out, to_markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
