"""How `metrics.marking_share` reads the markings the demo's LoRAs draw: the share of each picture's object interior
counted as the subject's marking, by the metric (nearer the marking than the main colour, within MARKING_TOLERANCE)
and by the stricter first version (within COLOUR_TOLERANCE of the marking), against the references' own share at the
pictures' size, on the saved pictures of a `demo_subjects.py` result.

    python benchmarks/marking_check.py      # reads benchmarks/results/demo_subjects.json and its images
                                            # -> benchmarks/results/marking_check.{json,md}
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._meta import provenance, provenance_md, write_result                    # noqa: E402
from benchmarks.demo_subjects import eval_batch, load_images                             # noqa: E402
from benchmarks.testbed.metrics import (COLOUR_TOLERANCE, MARKING_SHARE_OF_REFERENCES, marking_share,  # noqa: E402
                                        object_interior, reference_marking_share, to_rgb255)
from benchmarks.testbed.scenes import SUBJECTS, reference_images                         # noqa: E402


def within_tolerance_share(image, marking) -> float:
    """The first version: the interior's share within COLOUR_TOLERANCE of the marking."""
    rgb = to_rgb255(image)
    inner = object_interior(rgb)
    if not inner.any():
        return 0.0
    return float((np.linalg.norm(rgb[inner] - np.asarray(marking, np.float32), axis=-1) <= COLOUR_TOLERANCE).mean())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--result", default=str(ROOT / "benchmarks" / "results" / "demo_subjects.json"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "marking_check"))
    args = ap.parse_args()
    import json
    result = Path(args.result)
    if not result.is_file():
        ap.error(f"--result {result}: no such file (a benchmarks/demo_subjects.py result)")
    runs = json.loads(result.read_text())["runs"]
    rows = []
    for name in dict.fromkeys(r["subject"] for r in runs):
        subject = SUBJECTS[name]
        for recipe in dict.fromkeys(r["recipe"] for r in runs if r["subject"] == name):
            images = [im for r in runs if r["subject"] == name and r["recipe"] == recipe
                      for im in load_images(result.parent / r["images"], len(eval_batch(subject, r["noise_seeds"])[2]))]
            px = images[0].shape[-1]
            rows.append({"subject": name, "recipe": recipe or "base", "pictures": len(images),
                         "metric": round(float(np.mean([marking_share(im, subject.marking, subject.colour)
                                                        for im in images])), 3),
                         "within_tolerance": round(float(np.mean([within_tolerance_share(im, subject.marking)
                                                                  for im in images])), 3),
                         "references": round(reference_marking_share(reference_images(subject, 5), subject.marking,
                                                                     subject.colour, px), 3)})
    doc = {"provenance": provenance(), "result": str(result.relative_to(ROOT)), "rows": rows}
    print(write_result(doc, args.out, markdown))
    return 0


def markdown(doc: dict) -> str:
    lines = ["# What the marking check counts on the demo's pictures", "", provenance_md(doc["provenance"]),
             f"Pictures: every saved picture of `{doc['result']}`'s runs. Mean share of a picture's object interior "
             "counted as the subject's marking: by `metrics.marking_share` (nearer the marking than the main colour, "
             f"within {2 * COLOUR_TOLERANCE:g}) and by the first version (within {COLOUR_TOLERANCE:g} of the "
             f"marking); a picture passes `marking_present` at {MARKING_SHARE_OF_REFERENCES:g} x the references' "
             "share (metric's way, at the pictures' size).", "",
             "| subject | recipe | pictures | metric | first version | references |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['subject']} | {r['recipe']} | {r['pictures']} | {r['metric']:.3f} | {r['within_tolerance']:.3f} | "
              f"{r['references']:.3f} |" for r in doc["rows"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
