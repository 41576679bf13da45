"""On-device generation in the planner against training, at real scale (no weights): FLUX.1-dev and SANA-1600M.

    python benchmarks/generation_estimate.py      # -> benchmarks/results/generation_estimate.{json,md}

Each model is `ditskip-edge estimate --model M --skip-ratio 0.5 --precision int8 --weights mapped --generation-px
--json` (remat: the default `blocks`, what compile exports): the training footprint of the BlockSkip step and, at the
train resolution and the model's data resolution, the generation footprint (memory_estimate/generation.py: the full
model one block at a time, each classifier-free-guidance branch through each program at batch 1, every frozen weight
mapped) and the autoencoder's decoder (its published config, traced on the meta device; it runs after the
transformer programs are dropped, so the footprint is the larger phase plus the 100 MiB runtime overhead). Both
count dirty anonymous memory (what a phone counts); the mapped weights are file-backed and reported apart. Not
modeled: the text encoders (CLIP + T5-XXL, Gemma-2).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks._meta import provenance, provenance_md  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
MODELS = ("flux-dev", "sana-1600m")


def main() -> int:
    from ditskip_edge.memory_estimate.request import EstimateRequest, estimate_memory
    from ditskip_edge.models.loading import resolve_spec
    from ditskip_edge.memory_estimate.generation import data_resolution
    docs = {}
    for model in MODELS:
        spec = resolve_spec(model)
        px = sorted({spec.train_px, data_resolution(spec)})
        docs[model] = estimate_memory(EstimateRequest(model=model, skip_ratio=0.5, precision="int8",
                                                      weights="mapped", generation_px=tuple(px)))
        print(f"{model}: {docs[model]['summary']}", file=sys.stderr, flush=True)
    prov = provenance()
    (RESULTS / "generation_estimate.json").write_text(json.dumps({"provenance": prov, "estimates": docs}, indent=1))
    rows = ["| model | training (remat blocks, mapped) GiB | generation at | generation footprint GiB | "
            "program arena GiB (per program) | streams GiB | mapped weights GiB (whole model) | mapped working set GiB "
            "| transformer phase GiB | decoder GiB | generation <= training |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for model, doc in docs.items():
        p, s, tr = doc["plan"], doc["step"], doc["memory"]["footprint_gib"]
        for px, g in doc["generation"].items():
            per = ", ".join(f"{k} {v / 2**30:.3f}" for k, v in g["arenas_bytes"].items())
            rows.append(f"| {model} | {p['n_front']}/{p['n_back']} {s['precision']}, {s['resolution_px']} px, "
                        f"L={s['text_tokens']}: {tr} | {px} px ({g['image_tokens']} image + {g['text_tokens']} text "
                        f"tokens) | {g['footprint_gib']} | {g['program_arena_gib']} ({per}) | {g['streams_gib']} | "
                        f"{g['file_backed_gib']} | {g['file_backed_working_set_gib']} | {g['transformer_phase_gib']} | "
                        f"{g.get('decoder_arena_gib', 'not modeled')} | "
                        f"{'yes' if g['within_training_footprint'] else 'NO'} |")
    md = ("# Generation in the planner: FLUX.1-dev and SANA-1600M\n\n" + provenance_md(prov) + "\n"
          + __doc__.split("\n\n", 2)[2].strip() + "\n\n" + "\n".join(rows) + "\n")
    (RESULTS / "generation_estimate.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
