"""What the pretrained `flux-testbed` draws for caption-style prompts (no LoRA): a grid and its prompt-fidelity scores.

Writes testbed/results/testbed_samples.{png,md,json} (--name: another stem). Rows = seeds, columns = prompts.
Scores: background colour, object colour, and object shape as prompted (`nearest_shape`: the nearest of the 10
scene shapes by mask IoU; tests/test_testbed.py holds it to >= 0.95 of 200 rendered
scenes at 32 px; chance is 0.10).

    python testbed/experiments/testbed_samples.py
    python testbed/experiments/testbed_samples.py --weights W.safetensors --name testbed_samples_candidate --seeds 8
    python testbed/experiments/testbed_samples.py --markings --weights W.safetensors --name testbed_markings_candidate --seeds 8

--weights: any testbed weights, grown ones too (`pretrain_testbed.py --grow-*`): the model gets the block counts they
hold.

--markings: prompts that name a texture's own colour, the caption form of `scenes.SceneDomain.marking_share`
("a large pink square with white dots, on a blue background"; two of them the held-out subjects' markings on
another shape), scored also for the marking as prompted: `metrics.marking_share` of the named colour at least half
the share the same scene, rendered, has at the generated size (`metrics.marking_present`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks._meta import provenance, provenance_md                                     # noqa: E402
from ditskip_edge.images import to_uint8_image                                  # noqa: E402
from ditskip_edge.models.loading import build_transformer, resolve_spec         # noqa: E402
from testbed.metrics import (PALETTE, background_match, colour_agreement, marking_present,  # noqa: E402
                                        marking_share, mean_ci, nearest_shape)
from testbed.scenes import MARKING_WORDS, Scene, render                                    # noqa: E402
from ditskip_edge.generate import generate, grid                       # noqa: E402

PROMPTS = [("white", "circle", "red"), ("blue", "square", "yellow"), ("yellow", "triangle", "purple"),
           ("green", "ring", "black"), ("red", "cross", "white"), ("orange", "bar", "blue"),
           ("pink", "star", "black"), ("teal", "heart", "yellow"), ("orange", "bowtie", "green"),
           ("yellow", "crescent", "purple"), ("brown", "square", "white"), ("purple", "star", "green")]
MARKED_PROMPTS = [("pink", "square", "dotted", "white", "blue"), ("brown", "bar", "striped", "cyan", "white"),
                  ("blue", "circle", "dotted", "yellow", "red"), ("orange", "square", "striped", "black", "green"),
                  ("red", "circle", "checkered", "white", "yellow"), ("white", "triangle", "dotted", "red", "black"),
                  ("yellow", "bar", "striped", "green", "purple"), ("white", "square", "checkered", "purple", "pink")]


def marked_share_rendered(colour: str, shape: str, texture: str, marking: str, background: str, px: int) -> float:
    """The marking's share of the object's interior in the scene the prompt describes (large, centred), rendered
    at 64 px and resized (area) to the generated size `px` (the yardstick `marking_present` halves)."""
    scene = Scene(shape, PALETTE[colour], texture, PALETTE[marking], PALETTE[background], (0.5, 0.5), 17.0)
    image = torch.nn.functional.interpolate(render(scene)[None], size=(px, px), mode="area")[0]
    return marking_share(image, PALETTE[marking], PALETTE[colour])


def sampled_model(weights: str | Path | None = None):
    """(spec, transformer) to sample: the committed testbed, or `weights` as a model of their own
    (`loading.testbed_weights_spec`: the block counts they hold, so a grown testbed samples as it is)."""
    spec = resolve_spec(str(weights) if weights is not None else "flux-testbed")
    return spec, build_transformer(spec)


def main() -> int:
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", default=None, help="a weights file to sample instead of the committed one")
    ap.add_argument("--out", default=str(ROOT / "testbed" / "results"))
    ap.add_argument("--name", default="testbed_samples", help="file stem of the results")
    ap.add_argument("--seeds", type=int, default=3, help="noise seeds per prompt (the grid shows the first 3)")
    ap.add_argument("--markings", action="store_true",
                    help="prompts naming a texture's own colour (MARKED_PROMPTS), scored also for the marking")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from ditskip_edge.runtime.errors import UserError
    try:
        spec, model = sampled_model(args.weights)
    except UserError as e:                     # missing, not FLUX blocks, another width
        ap.error(f"--weights: {e}")
    if args.markings:
        prompts = [(c, s, bg) for c, s, _, _, bg in MARKED_PROMPTS]
        texts = [f"a large {c} {s} with {m} {MARKING_WORDS[tx]}, on a {bg} background" for c, s, tx, m, bg in
                 MARKED_PROMPTS]
    else:
        prompts = PROMPTS
        texts = [f"a large {c} {s} in the center, on a {bg} background" for c, s, bg in PROMPTS]
    seeds = list(range(args.seeds))
    ims = generate(spec, model, [t for _ in seeds for t in texts], [s for s in seeds for _ in texts])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    picture = to_uint8_image(grid(ims[:3 * len(texts)], len(texts)))
    picture.resize((picture.width * 4, picture.height * 4), 0).save(out / f"{args.name}.png")
    objs = [(c, s, bg) for _ in seeds for c, s, bg in prompts]
    bg_ok = [background_match(im, bg) for im, (_, _, bg) in zip(ims, objs)]
    col_ok = [colour_agreement(im, PALETTE[c]) for im, (c, _, _) in zip(ims, objs)]
    drawn = [nearest_shape(im) for im in ims]
    shape_ok = [float(d == s) for d, (_, s, _) in zip(drawn, objs)]
    checks = [("background_ok", bg_ok), ("colour_ok", col_ok), ("shape_ok", shape_ok)]
    if args.markings:
        yardsticks = [(c, m, marked_share_rendered(c, s, tx, m, bg, ims.shape[-1]))    # once per prompt
                      for c, s, tx, m, bg in MARKED_PROMPTS]
        checks.append(("marking_ok", [marking_present(im, PALETTE[m], PALETTE[c], share)
                                      for im, (c, m, share) in zip(ims, yardsticks * len(seeds))]))
    ci = {k: mean_ci(v) for k, v in checks}
    per_shape = {s: f"{sum(ok for ok, (_, s2, _) in zip(shape_ok, objs) if s2 == s):.0f}/"
                    f"{sum(1 for _, s2, _ in objs if s2 == s)}" for s in dict.fromkeys(s for _, s, _ in prompts)}
    meta = provenance()
    blocks = {"double": spec.transformer_config["num_layers"], "single": spec.transformer_config["num_single_layers"]}
    md = ["# flux-testbed samples (base model, no LoRA)", "", provenance_md(meta),
          f"Weights: `{args.weights or 'committed (ditskip_edge/assets/flux-testbed)'}` ({blocks['double']} double + "
          f"{blocks['single']} single blocks)  ",
          f"{len(ims)} images ({len(texts)} prompts x seeds 0..{len(seeds) - 1}), 20 Euler steps, guidance 3; "
          "mean and 95% CI over the images.", "",
          f"- background colour as prompted: {ci['background_ok']['mean']:.2f} +- {ci['background_ok']['ci95']:.2f}",
          f"- object colour as prompted (>= 30% of the foreground within tolerance): "
          f"{ci['colour_ok']['mean']:.2f} +- {ci['colour_ok']['ci95']:.2f}",
          f"- object shape as prompted (nearest of the 10 scene shapes by mask IoU; chance 0.10): "
          f"{ci['shape_ok']['mean']:.2f} +- {ci['shape_ok']['ci95']:.2f}; by shape: "
          + ", ".join(f"{s} {v}" for s, v in per_shape.items())]
    if args.markings:
        md.append(f"- marking as prompted (the named texture colour on at least half the share the described scene "
                  f"has at this size): {ci['marking_ok']['mean']:.2f} +- {ci['marking_ok']['ci95']:.2f}")
    md += ["", "Prompts (columns): " + "; ".join(f"`{t}`" for t in texts), "",
           f"Grid: `{args.name}.png` (rows = seeds 0-2)."]
    (out / f"{args.name}.md").write_text("\n".join(md) + "\n")
    (out / f"{args.name}.json").write_text(json.dumps(
        {"meta": meta, "weights": args.weights, "blocks": blocks, "seeds": len(seeds), "prompts": texts, **ci,
         "by_shape": per_shape, "drawn_shapes": drawn}, indent=1))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
