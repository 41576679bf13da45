"""The main job (`make demo`): personalize the pretrained testbed model (`flux-testbed`) on a subject it never saw,
with BlockSkip 50%, and show the subject being learned.

    reference photos of the held-out "teal star" -> demo_out/photos/
    ditskip-edge compile --model flux-testbed ... --skip-ratio 0.5   (6 of 12 blocks; split chosen by selection)
    ditskip-edge train demo_out/bundle                                           (eager runtime)
    LoRA -> full diffusers model (load_lora_adapter) -> "a large sks cross in the center, on a <colour> background"
    -> demo_out/before_after.png (rows: references, before, after) and subject similarity before -> after

Output goes to demo_out/ (replaced each run).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from ditskip_edge.cli import main as cli_main

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "demo_out"
SUBJECT = "teal_star"


def main() -> int:
    from ditskip_edge.images import to_uint8_image
    from ditskip_edge.models.loading import resolve_spec
    from benchmarks.testbed.metrics import score_images
    from ditskip_edge.generate import generate, grid, load_model
    from benchmarks.testbed.scenes import SUBJECTS, eval_prompts, reference_images, subject_prompt

    torch.set_num_threads(1)   # 2 threads on a busy 2-core machine spin in OpenMP barriers
    subject = SUBJECTS[SUBJECT]
    photos = OUT / "photos"
    photos.mkdir(parents=True, exist_ok=True)
    refs = reference_images(subject, 5)
    for i, r in enumerate(refs):
        to_uint8_image(r).save(photos / f"{i:02d}.png")
    bundle = OUT / "bundle"
    args = ["compile", "--model", "flux-testbed", "--images", str(photos), "--prompt", subject_prompt(subject),
            "--skip-ratio", "0.5", "--steps", "200", "--grad-accum", "4", "--rank", "8", "--lr", "5e-3",
            "--out", str(bundle), "--force"]
    if cli_main(args) != 0:
        return 1
    if cli_main(["train", str(bundle), "--no-resume"]) != 0:
        return 1
    summary = json.loads((bundle / "runs" / "eager" / "summary.json").read_text())

    spec = resolve_spec("flux-testbed")
    prompts = eval_prompts(subject)
    texts, bgs = [p for p, _ in prompts], [bg for _, bg in prompts]
    seeds = [0] * len(texts)
    before = generate(spec, load_model(spec), texts, seeds)
    after = generate(spec, load_model(spec, summary["lora"]), texts, seeds)
    ref_row = torch.nn.functional.interpolate(torch.stack(refs[: len(texts)]), size=before.shape[-2:], mode="area")
    picture = to_uint8_image(grid(torch.cat([ref_row, before, after]), len(texts)))
    png = OUT / "before_after.png"
    picture.resize((picture.width * 4, picture.height * 4), 0).save(png)
    s0 = score_images(list(before), bgs, refs, subject.colour)
    s1 = score_images(list(after), bgs, refs, subject.colour)
    print(f"\nbundle: {bundle}\nLoRA:   {summary['lora']}\n"
          f"loss:   first step {summary['losses'][0]:.4f} -> last step {summary['losses'][-1]:.4f}\n"
          f"subject similarity to the references: before {s0['subject_sim']['mean']:.3f} -> "
          f"after {s1['subject_sim']['mean']:.3f}; background as prompted: before "
          f"{s0['background_ok']['mean']:.2f} -> after {s1['background_ok']['mean']:.2f}\n"
          f"picture: {png} (rows: references, before, after; prompts: {', '.join(texts)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
