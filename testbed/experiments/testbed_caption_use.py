"""Which caption words `flux-testbed` uses: the velocity loss on held-out scenes with one attribute of the caption
swapped, against the true caption and the empty one.

    held-out scenes (their own seed; resized to 32 px by the compiler's PatchSampler, as pretraining does; full captions "a {size} {colour} {shape} {place}, on a {bg} background", plain
    texture) x noise levels t -> flow-matching MSE with: the true caption, the shape word swapped for another shape,
    the colour word swapped, the background word swapped, the place swapped, the empty caption (same noise for all)

`use` of an attribute = (loss with it swapped - true loss) / (empty-caption loss - true loss): the share of what the
whole caption is worth that this one word carries. A model that draws colour blobs in the right place and ignores the
shape word has a shape use near 0. Mean and 95% CI over the scenes.

    python testbed/experiments/testbed_caption_use.py                                  # committed weights
    python testbed/experiments/testbed_caption_use.py --weights W.safetensors --name testbed_caption_use_candidate
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks._meta import provenance, provenance_md                                     # noqa: E402
from testbed.metrics import mean_ci                                  # noqa: E402
from testbed.scenes import PALETTE, PLACES, SCENE_PX, SHAPES, SIZES, random_scene, render   # noqa: E402
from ditskip_edge.models.latents import LatentEncoder                           # noqa: E402
from ditskip_edge.models.loading import build_transformer, build_vae, resolve_spec   # noqa: E402
from ditskip_edge.models.text import encode_prompt                              # noqa: E402
from ditskip_edge.models.views import make_view                                 # noqa: E402
from ditskip_edge.patch_sampling import PatchSampler                            # noqa: E402

SWAPS = ("shape", "colour", "background", "place")
NOISE_LEVELS = (0.3, 0.5, 0.7, 0.9)


def held_out_scenes(n: int, seed: int) -> list[tuple[object, dict]]:
    """n plain scenes with their attribute words (drawn as pretraining draws them, from a seed of their own)."""
    rnd = random.Random(seed)
    names = {v: k for k, v in PALETTE.items()}
    out = []
    while len(out) < n:
        scene, _ = random_scene(rnd)
        scene = replace(scene, texture="plain", inner=None)
        size = min(SIZES, key=lambda s: abs(SIZES[s] - scene.half_extent_px))
        place = min(PLACES, key=lambda p: sum((a - b) ** 2 for a, b in zip(PLACES[p], scene.centre)))
        out.append((scene, {"size": size, "colour": names[scene.colour], "shape": scene.shape, "place": place,
                            "background": names[scene.background]}))
    return out


def caption(words: dict) -> str:
    return f"a {words['size']} {words['colour']} {words['shape']} {words['place']}, on a {words['background']} background"


def swapped(words: dict, attr: str, rnd: random.Random) -> dict:
    pool = {"shape": SHAPES, "colour": [c for c in PALETTE if c != words["background"]],
            "background": [c for c in PALETTE if c != words["colour"]], "place": list(PLACES)}[attr]
    return {**words, attr: rnd.choice([v for v in pool if v != words[attr]])}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", default=None, help="a weights file instead of the committed one")
    ap.add_argument("--scenes", type=int, default=256)
    ap.add_argument("--seed", type=int, default=777)
    ap.add_argument("--name", default="testbed_caption_use")
    ap.add_argument("--out", default=str(ROOT / "testbed" / "results"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    spec = resolve_spec("flux-testbed")
    model = build_transformer(spec).eval()
    if args.weights:
        from safetensors.torch import load_file
        model.load_state_dict(load_file(args.weights))
    view, encoder = make_view(spec.arch, model), LatentEncoder(spec.arch, build_vae(spec))
    scenes = held_out_scenes(args.scenes, args.seed)
    rnd = random.Random(args.seed + 1)
    variants = {"true": [w for _, w in scenes]}
    for attr in SWAPS:
        variants[attr] = [swapped(w, attr, rnd) for _, w in scenes]
    prompts = {caption(w) for ws in variants.values() for w in ws} | {""}
    enc = {p: encode_prompt(spec, p) for p in prompts}
    whole_scene = torch.tensor([0.0, 0.0, float(SCENE_PX)])
    images = torch.cat([PatchSampler(spec.train_px)(render(s)[None], whole_scene) for s, _ in scenes])
    gen = torch.Generator().manual_seed(args.seed + 2)
    with torch.no_grad():
        x0 = view.pack(encoder(images))
        losses = {k: torch.zeros(len(scenes)) for k in [*variants, "empty"]}
        captions = {k: [""] * len(scenes) if k == "empty" else [caption(w) for w in variants[k]] for k in losses}
        conds = {key: {k: torch.cat([enc[c][k] for c in caps]) for k in enc[""]} for key, caps in captions.items()}
        for t_value in NOISE_LEVELS:
            noise = torch.randn(x0.shape, generator=gen)
            t = torch.full((len(scenes),), t_value)
            x_t = (1 - t_value) * x0 + t_value * noise
            for key, cond in conds.items():
                v = torch.cat([view(x_t[i:i + 64], t[i:i + 64], {k: c[i:i + 64] for k, c in cond.items()})
                               for i in range(0, len(scenes), 64)])
                losses[key] += ((v - (noise - x0)) ** 2).mean((1, 2)) / len(NOISE_LEVELS)
    worth = losses["empty"] - losses["true"]
    use = {a: mean_ci(((losses[a] - losses["true"]) / worth).tolist()) for a in SWAPS}
    doc = {"meta": provenance(), "weights": args.weights, "scenes": len(scenes), "noise_levels": NOISE_LEVELS,
           "loss": {k: mean_ci(v.tolist()) for k, v in losses.items()}, "use": use,
           "caption_worth": mean_ci(worth.tolist())}
    md = ["# Which caption words flux-testbed uses", "", provenance_md(doc["meta"]),
          f"Weights: `{args.weights or 'committed (ditskip_edge/assets/flux-testbed)'}`; {len(scenes)} held-out plain "
          f"scenes (seed {args.seed}), t in {list(NOISE_LEVELS)}, the same noise for every caption. "
          "use = (swapped loss - true loss) / (empty-caption loss - true loss); mean and 95% CI over the scenes.", "",
          "| caption | velocity MSE | use |", "| --- | --- | --- |",
          f"| true | {doc['loss']['true']['mean']:.4f} | |",
          *[f"| {a} swapped | {doc['loss'][a]['mean']:.4f} | {use[a]['mean']:.3f} +- {use[a]['ci95']:.3f} |"
            for a in SWAPS],
          f"| empty | {doc['loss']['empty']['mean']:.4f} | 1 |", ""]
    out = Path(args.out)
    (out / f"{args.name}.json").write_text(json.dumps(doc, indent=1))
    (out / f"{args.name}.md").write_text("\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
