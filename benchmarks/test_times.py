"""Where `make test`'s time goes: per test file, the seconds its tests took (setup + call + teardown, as pytest's
JUnit XML reports them) and the slowest tests, from a suite run's JUnit XML.

    make test PYTEST_ADDOPTS="--junitxml=/tmp/junit.xml"      # the suite, as CI runs it (2 workers, whole files)
    python benchmarks/test_times.py --junit /tmp/junit.xml --wall-s 1081

Writes benchmarks/results/test_times.{json,md}. With 2 workers and whole files per worker, the suite's wall time
cannot fall below half the summed test time (and the longest file): the table says which files hold that time.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from _meta import provenance, provenance_md, write_result                               # noqa: E402


def read_junit(path: Path) -> list[dict]:
    """[{file, test, seconds}] for every test case of a pytest JUnit XML file."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        raise SystemExit(f"test_times: {path}: not a readable JUnit XML file ({e})") from None
    cases = [{"file": tc.get("classname", "").split(".")[-1] + ".py", "test": tc.get("name", ""),
              "seconds": float(tc.get("time", 0.0))} for tc in root.iter("testcase")]
    if not cases:
        raise SystemExit(f"test_times: {path}: no test cases in it")
    return cases


def per_file(cases: list[dict]) -> list[dict]:
    """Files by summed seconds, largest first."""
    seconds, tests = defaultdict(float), defaultdict(int)
    for c in cases:
        seconds[c["file"]] += c["seconds"]
        tests[c["file"]] += 1
    return [{"file": f, "tests": tests[f], "seconds": round(s, 1)}
            for f, s in sorted(seconds.items(), key=lambda kv: -kv[1])]


def markdown(doc: dict) -> str:
    total = doc["total_s"]
    lines = ["# Where `make test`'s time goes", "", provenance_md(doc["run"]),
             f"Suite run: {doc['suite']}", "",
             f"{doc['tests']} tests, **{total:.0f} s of test time** (setup + call + teardown summed over both "
             f"workers); the suite's wall time {doc['wall_s']:.0f} s against half the test time "
             f"{total / 2:.0f} s: the workers are "
             f"{'balanced' if doc['wall_s'] <= total / 2 * 1.1 else 'not balanced'} (within 10%), so only less "
             "test time shortens the suite.", "",
             "| file | tests | seconds | share |", "|---|---|---|---|"]
    lines += [f"| {r['file']} | {r['tests']} | {r['seconds']:.0f} | {r['seconds'] / total:.0%} |" for r in doc["files"]]
    lines += ["", "Slowest tests:", "", "| test | seconds |", "|---|---|"]
    lines += [f"| {c['file']}::{c['test']} | {c['seconds']:.0f} |" for c in doc["slowest"]]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--junit", required=True, help="the JUnit XML of a suite run (pytest --junitxml)")
    ap.add_argument("--wall-s", type=float, required=True, help="that run's wall seconds (`time make test`)")
    ap.add_argument("--suite", default='`time make test PYTEST_ADDOPTS="--junitxml=/tmp/junit.xml"`',
                    help="how the suite was run (written into the result)")
    ap.add_argument("--slowest", type=int, default=15)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "test_times"))
    args = ap.parse_args()
    cases = read_junit(Path(args.junit))
    doc = {"run": provenance(), "suite": args.suite, "wall_s": args.wall_s, "tests": len(cases),
           "total_s": round(sum(c["seconds"] for c in cases), 1), "files": per_file(cases),
           "slowest": sorted(cases, key=lambda c: -c["seconds"])[:args.slowest]}
    print(write_result(doc, args.out, markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
