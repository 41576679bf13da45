"""What the pretrained `flux-testbed` draws for caption-style prompts (no LoRA): a grid and its prompt-fidelity scores.

Writes benchmarks/results/testbed_samples.{png,md}. Rows = seeds, columns = prompts.

    python benchmarks/testbed_samples.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _meta import provenance, provenance_md                                     # noqa: E402
from ditskip_edge.images import to_uint8_image                                  # noqa: E402
from ditskip_edge.models.loading import build_transformer, resolve_spec         # noqa: E402
from benchmarks.testbed.metrics import PALETTE, background_match, colour_agreement   # noqa: E402
from ditskip_edge.generate import generate, grid                       # noqa: E402

PROMPTS = [("white", "circle", "red"), ("blue", "square", "yellow"), ("yellow", "triangle", "purple"),
           ("green", "ring", "black"), ("red", "cross", "white"), ("orange", "bar", "blue"),
           ("pink", "star", "black"), ("teal", "heart", "yellow"), ("orange", "bowtie", "green"),
           ("yellow", "crescent", "purple"), ("brown", "square", "white"), ("purple", "star", "green")]


def main() -> int:
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", default=None, help="a weights file to sample instead of the committed one")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    spec = resolve_spec("flux-testbed")
    model = build_transformer(spec)
    if args.weights:
        from safetensors.torch import load_file
        model.load_state_dict(load_file(args.weights))
    texts = [f"a large {c} {s} in the center, on a {bg} background" for c, s, bg in PROMPTS]
    seeds = [0, 1, 2]
    ims = generate(spec, model, [t for _ in seeds for t in texts], [s for s in seeds for _ in texts])
    out = Path(args.out)
    picture = to_uint8_image(grid(ims, len(texts)))
    picture.resize((picture.width * 4, picture.height * 4), 0).save(out / "testbed_samples.png")
    objs = [(c, bg) for _ in seeds for c, _, bg in PROMPTS]
    bg_ok = sum(background_match(im, bg) for im, (_, bg) in zip(ims, objs)) / len(ims)
    col_ok = sum(colour_agreement(im, PALETTE[c]) for im, (c, _) in zip(ims, objs)) / len(ims)
    md = ["# flux-testbed samples (base model, no LoRA)", "", provenance_md(provenance()),
          f"{len(ims)} images ({len(texts)} prompts x seeds {seeds}), 20 Euler steps, guidance 3.", "",
          f"- background colour as prompted: {bg_ok:.2f}", f"- object colour as prompted (>= 30% of the foreground "
          f"within tolerance): {col_ok:.2f}", "", "Prompts (columns): " + "; ".join(f"`{t}`" for t in texts), "",
          "Grid: `testbed_samples.png` (rows = seeds)."]
    (out / "testbed_samples.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
