"""The scale of the testbed's subject-similarity metric: what a real photo of the subject scores, at the data
resolution and at the generation resolution, and what an unrelated object scores.

Writes benchmarks/results/testbed_metric_scale.{json,md}.

    python benchmarks/testbed_metric_scale.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _meta import provenance, provenance_md                                      # noqa: E402
from ditskip_edge.models.loading import resolve_spec                             # noqa: E402
from benchmarks.testbed.metrics import SubjectEmbedder, subject_similarity     # noqa: E402
from benchmarks.testbed.scenes import SUBJECTS, reference_images, unrelated_image   # noqa: E402

FRESH_SEED = 5          # references use seed 0; these are new photos of the same subject


def main() -> int:
    px = resolve_spec("flux-testbed").train_px
    emb = SubjectEmbedder()
    rows = {}
    for name, subject in SUBJECTS.items():
        refs = reference_images(subject)
        fresh = reference_images(subject, seed=FRESH_SEED)
        at_data = [subject_similarity(r, refs, emb) for r in fresh]
        at_gen = [subject_similarity(F.interpolate(r[None], size=(px, px), mode="area")[0], refs, emb) for r in fresh]
        others = [subject_similarity(reference_images(s)[0], refs, emb) for n, s in SUBJECTS.items() if n != name]
        rows[name] = {"fresh_photo_data_px": [round(min(at_data), 3), round(max(at_data), 3)],
                      "fresh_photo_generation_px": [round(min(at_gen), 3), round(max(at_gen), 3)],
                      "unrelated_object": round(subject_similarity(unrelated_image(), refs, emb), 3),
                      "other_subjects_max": round(max(others), 3)}
    prov = provenance()
    out = ROOT / "benchmarks" / "results"
    (out / "testbed_metric_scale.json").write_text(json.dumps({**prov, "generation_px": px, "rows": rows}, indent=1))
    md = ["# Scale of the testbed's subject similarity", "", provenance_md(prov),
          f"5 fresh photos per subject (seed {FRESH_SEED}) against its 5 references (seed 0); min / max.", "",
          f"| subject | fresh photo, 64 px | fresh photo, {px} px (generation size) | unrelated object | "
          "other subjects (max) |", "|---|---|---|---|---|"]
    for name, r in rows.items():
        a, b = r["fresh_photo_data_px"], r["fresh_photo_generation_px"]
        md.append(f"| {name} | {a[0]:.3f} - {a[1]:.3f} | {b[0]:.3f} - {b[1]:.3f} | {r['unrelated_object']:.3f} | "
                  f"{r['other_subjects_max']:.3f} |")
    (out / "testbed_metric_scale.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
