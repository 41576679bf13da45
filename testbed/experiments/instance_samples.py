"""Did pretraining on named instances teach the model its instances? Each of `scenes.INSTANCES` drawn from its own
caption on the 4 eval backgrounds, scored as the demo scores a subject (shape, colour, marking, background).

`SceneDomain(instance_share=...)` (`pretrain_testbed.py --instance-share`) pretrains on made-up words each standing
for one object, on any background, so that a LoRA's "sks" is not the first word of its kind the model meets. Before
reading what that does to the demo's path, this checks that the pretraining took: weights that learned the domain
draw "a large pink vex square, on a green background" with the instance's marking; weights that never saw it draw
a pink square and no marking (the words are made up). Per weights file: recognised (shape nearest of the 10, its
colour, its marking, the prompted background: `metrics.subject_recognised`), the marking alone, and the verdict
without the marking, over the instances x backgrounds x noise seeds (mean +- 95% CI over instances).

    python testbed/experiments/instance_samples.py --weights ditskip_edge/assets/flux-testbed/transformer.safetensors \
        /tmp/inst/transformer.safetensors --name instance_samples     # -> testbed/results/instance_samples.*
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks._meta import provenance, provenance_md, write_result                               # noqa: E402
from testbed.metrics import mean_ci, score_images                             # noqa: E402
from testbed.scenes import (EVAL_BACKGROUNDS, INSTANCES, PALETTE, Instance, Subject,  # noqa: E402
                                      reference_images)
from examples.recipe import GUIDANCE                                                     # noqa: E402


def as_subject(instance: Instance) -> Subject:
    """The instance as a held-out subject would be described, for `reference_images` and the demo's scores; its
    reference backgrounds are palette colours neither an eval background nor its own colour."""
    backgrounds = tuple(c for c in PALETTE if c not in EVAL_BACKGROUNDS and c != instance.colour)[:5]
    return Subject(instance.name, instance.shape, PALETTE[instance.colour], instance.texture,
                   PALETTE[instance.texture_colour], instance.inner_disc, backgrounds, instance.shape)


def prompt(instance: Instance, background: str) -> str:
    """The domain's own caption (`Instance.caption`), large, on `background`."""
    return instance.caption("large", background)


def score_weights(weights: str, noise_seeds: int) -> dict:
    from ditskip_edge.generate import generate, load_model
    from ditskip_edge.models.loading import resolve_spec
    spec = resolve_spec(weights)
    model = load_model(spec)
    per_instance = []
    for instance in INSTANCES:
        subject = as_subject(instance)
        backgrounds = [bg for _ in range(noise_seeds) for bg in EVAL_BACKGROUNDS]
        seeds = [s for s in range(noise_seeds) for _ in EVAL_BACKGROUNDS]
        images = generate(spec, model, [prompt(instance, bg) for bg in backgrounds], seeds, guidance=GUIDANCE)
        scores = score_images(list(images), backgrounds, reference_images(subject, 5), subject.colour,
                              subject.shape, subject.marking)
        per = scores["per_image"]
        per_instance.append({"instance": instance.name, "recognised": sum(map(int, per["recognised"])) / len(images),
                             "marking": scores["marking_ok"]["mean"],
                             "shape_colour_background": sum(per["shape_colour_background"]) / len(images),
                             "first": images[0]})
    return {"weights": weights, "instances": [{k: v for k, v in r.items() if k != "first"} for r in per_instance],
            **{m: mean_ci(r[m] for r in per_instance) for m in ("recognised", "marking", "shape_colour_background")},
            "pictures": [r["first"] for r in per_instance]}


def markdown(doc: dict) -> str:
    lines = ["# Named instances drawn from their own captions", "", provenance_md(doc["run"]), "",
             f"Each of the {len(INSTANCES)} instances of `scenes.INSTANCES` (a made-up word for one shape, colour and "
             f"marking) drawn from \"a large <colour> <name> <shape>, on a <bg> background\" on the 4 eval backgrounds "
             f"x {doc['noise_seeds']} noise seeds at guidance {GUIDANCE}; recognised = shape, colour, marking and "
             "background as the demo scores a subject; mean +- 95% CI over instances.", "",
             "| weights | recognised | marking | without marking |", "|---|---|---|---|"]
    for r in doc["results"]:
        lines.append(f"| `{r['weights']}` | " + " | ".join(f"{r[m]['mean']:.2f} +- {r[m]['ci95']:.2f}"
                                                           for m in ("recognised", "marking",
                                                                     "shape_colour_background")) + " |")
    lines += ["", f"Picture `{doc['png']}`: per weights file (rows) each instance's first picture (green background, "
              "noise seed 0)."]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--weights", nargs="+", required=True, help="testbed weights files (the model names compile "
                    "takes), e.g. the committed ones and a run of pretrain_testbed.py --instance-share")
    ap.add_argument("--noise-seeds", type=int, default=2)
    ap.add_argument("--name", default="instance_samples")
    ap.add_argument("--out", default=str(ROOT / "testbed" / "results"))
    args = ap.parse_args()
    from ditskip_edge.models.loading import resolve_spec
    from ditskip_edge.runtime.errors import UserError
    for w in args.weights:
        try:
            resolve_spec(w)
        except UserError as e:
            ap.error(f"--weights: {e}")
    torch.set_num_threads(1)
    results = [score_weights(w, args.noise_seeds) for w in args.weights]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"run": provenance(), "noise_seeds": args.noise_seeds, "png": f"{args.name}.png",
           "results": [{k: v for k, v in r.items() if k != "pictures"} for r in results]}
    print(write_result(doc, out / args.name, markdown))
    from ditskip_edge.generate import grid
    from ditskip_edge.images import to_uint8_image
    rows = torch.stack([p for r in results for p in r["pictures"]])
    to_uint8_image(grid(rows, len(INSTANCES), pad=1)).save(out / f"{args.name}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
