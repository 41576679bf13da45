"""What fine-tuning can make flux-testbed draw of a held-out subject: the ceiling behind `make demo`'s after row.

For one subject (default the demo's teal star) each configuration fine-tunes the committed base on the 5 reference
photos with `testbed/finetune.py` and draws, with the same noise for every configuration,
  - the training prompt ("a large sks star in the center"), 8 seeds: can the model reproduce the subject at all?
  - the 4 eval prompts (", on a <colour> background", backgrounds no reference shows), 2 seeds: can it compose the
    subject with a prompted background (what the demo's after row asks for)?
each at classifier-free guidance 1 and 3 (the demo's). Scores per cell: the share of images whose foreground is
nearest the subject's shape among the 10 scene shapes (`metrics.nearest_shape`; chance 0.10), subject similarity
to the references and, on the eval prompts, the background as prompted; 95% CIs over images.

Configurations: the base; every weight fine-tuned (lr 1e-3, 600 steps x 4 photos) on whole photos, on dynamic
patches, on whole photos with the prior-preservation loss on pretraining scenes (weight 1), and on whole photos with
per-photo captions (each photo's prompt also names its background); a LoRA on the demo's kept blocks
(`--lora-blocks`, the split `make demo` selects: blocks 1-6) at the demo's lr 5e-3 for 400 steps; and LoRAs on every
linear layer of a block (not only the attention projections the product targets by default; `compile --lora-targets
all-linear`), with per-photo captions, for 1200 steps: on every block (whole photos; dynamic patches) and on the kept blocks (whole
photos). The last row is the product on that recipe: BlockSkip with the same kept blocks (the blocks before and after
them skipped, their effect replayed from the residual cache), compiled and trained by `ditskip-edge compile` /
`train` (eager runtime, 1200 x 4 samples) and its LoRA loaded into the full diffusers model: what the row before it
loses to the replay.

    python testbed/experiments/testbed_ceiling.py                     # ~11 min on 2 cores (AMD EPYC)
    python testbed/experiments/testbed_ceiling.py --steps-scale 0.01 --out /tmp/c   # a smoke run (tests)

Writes <out>/testbed_ceiling.{json,md,png} (png: per configuration, the training prompt's first 4 seeds and the 4
eval prompts' first seed at guidance 1).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks._meta import provenance, provenance_md                                              # noqa: E402
from ditskip_edge.generate import generate, grid                                        # noqa: E402
from ditskip_edge.images import to_uint8_image                                          # noqa: E402
from ditskip_edge.lora import ALL_LINEAR, every_linear_suffix                           # noqa: E402
from ditskip_edge.models.loading import build_transformer, resolve_spec                 # noqa: E402
from testbed.finetune import FinetuneConfig, finetune                        # noqa: E402
from testbed.metrics import (SubjectEmbedder, background_match, mean_ci, nearest_shape,  # noqa: E402
                                       subject_similarity)
from testbed.scenes import (SUBJECTS, eval_prompts, reference_captions, reference_images,  # noqa: E402
                                      subject_prompt)

TRAIN_SEEDS = 8        # images of the training prompt per cell
EVAL_SEEDS = 2         # images per eval prompt per cell
GUIDANCES = (1.0, 3.0)


def configurations(lora_blocks: tuple[int, ...], steps_scale: float,
                   linear_targets: tuple[str, ...] = ()) -> dict[str, tuple[FinetuneConfig | None, bool]]:
    """name -> (fine-tune config or None for the base, per-photo captions: each photo trained with the training
    prompt plus its own background, ", on a red background", instead of one caption for all). `linear_targets`:
    lora.every_linear_suffix of the model (what `compile --lora-targets all-linear` takes); () leaves the
    every-linear rows out."""
    full = FinetuneConfig(mode="full", steps=600, lr=1e-3, dynamic_patches=False)
    lora = FinetuneConfig(mode="lora", steps=400, lr=5e-3, rank=8, blocks=lora_blocks)
    every = replace(lora, steps=1200, blocks=None, targets=linear_targets, dynamic_patches=False)
    kept = f"{lora_blocks[0]}-{lora_blocks[-1]}"
    configs = {"base": (None, False),
               "full, whole photos": (full, False),
               "full, dynamic patches": (replace(full, dynamic_patches=True), False),
               "full, whole photos, prior 1": (replace(full, prior_weight=1.0), False),
               "full, whole photos, per-photo captions": (full, True),
               f"LoRA blocks {kept}, dynamic patches": (lora, False)}
    if linear_targets:
        configs.update({"LoRA every block, every linear, whole photos, per-photo captions": (every, True),
                        "LoRA every block, every linear, dynamic patches, per-photo captions":
                            (replace(every, dynamic_patches=True), True),
                        f"LoRA blocks {kept}, every linear, whole photos, per-photo captions":
                            (replace(every, blocks=lora_blocks), True)})
    return {k: (None if c is None else replace(c, steps=max(1, round(c.steps * steps_scale))), per_photo)
            for k, (c, per_photo) in configs.items()}


def score_cell(images: torch.Tensor, subject, refs, backgrounds: list[str] | None = None) -> dict:
    """Subject shape and similarity per image; the background as prompted where the prompts named one."""
    drawn = [nearest_shape(im) for im in images]
    emb = SubjectEmbedder()
    cell = {"subject_shape": mean_ci([float(d == subject.shape) for d in drawn]), "drawn_shapes": drawn,
            "subject_sim": mean_ci([subject_similarity(im, refs, emb) for im in images])}
    if backgrounds is not None:
        cell["background_ok"] = mean_ci([background_match(im, bg) for im, bg in zip(images, backgrounds)])
    return cell


def is_span(blocks: tuple[int, ...]) -> bool:
    """Consecutive block indices: what BlockSkip can keep (the blocks before and after them are skipped)."""
    return list(blocks) == list(range(blocks[0], blocks[-1] + 1))


def blockskip_request(photos: Path, out: Path, prompt: str, lora_blocks: tuple[int, ...], num_blocks: int,
                      steps: int) -> list[str]:
    """The product's compile request of the BlockSkip row: `lora_blocks` kept (a span), the blocks before and
    after them skipped and replayed from their residuals (fp32 cache), the every-linear recipe of the row it is read
    against (per-photo captions, whole photos, all-linear targets, rank 8, lr 5e-3, `steps` x 4 samples)."""
    if not is_span(lora_blocks):
        raise ValueError(f"BlockSkip keeps a contiguous span of blocks, not {lora_blocks}")
    return ["compile", "--model", "flux-testbed", "--images", str(photos), "--prompt", prompt, "--photo-captions",
            "--skip-front", str(lora_blocks[0]), "--skip-back", str(num_blocks - 1 - lora_blocks[-1]),
            "--steps", str(steps), "--grad-accum", "4", "--rank", "8", "--lr", "5e-3", "--no-dynamic-patches",
            "--lora-targets", ALL_LINEAR, "--cache-codec", "fp32", "--out", str(out), "--force"]


def block_list(text: str) -> tuple[int, ...]:
    """--lora-blocks "1,2,3" -> (1, 2, 3); argparse turns the ValueError into a one-line usage error."""
    blocks = tuple(int(b) for b in text.split(","))
    if not blocks or min(blocks) < 0:
        raise ValueError(text)
    return blocks


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subject", default="teal_star", choices=sorted(SUBJECTS))
    ap.add_argument("--lora-blocks", type=block_list, default=(1, 2, 3, 4, 5, 6),
                    help="comma-separated blocks the LoRA row trains (default: the demo's kept ones)")
    ap.add_argument("--steps-scale", type=float, default=1.0, help="scale every configuration's steps (smoke runs)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "testbed" / "results"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    spec = resolve_spec("flux-testbed")
    subject = SUBJECTS[args.subject]
    refs = reference_images(subject, 5)
    train_prompt = subject_prompt(subject)
    evals = eval_prompts(subject)
    eval_texts = [p for p, _ in evals for _ in range(EVAL_SEEDS)]
    eval_bgs = [bg for _, bg in evals for _ in range(EVAL_SEEDS)]
    eval_seeds = [s for _ in evals for s in range(EVAL_SEEDS)]
    num_blocks = spec.transformer_config["num_layers"] + spec.transformer_config["num_single_layers"]
    if max(args.lora_blocks) >= num_blocks:
        ap.error(f"--lora-blocks: flux-testbed has blocks 0-{num_blocks - 1}")
    blocks = args.lora_blocks
    rows, tiles = [], []
    per_photo_captions = reference_captions(subject, len(refs))
    targets = tuple(every_linear_suffix(spec.arch, spec.transformer_config))
    runs = {name: (cfg, per_photo, None) for name, (cfg, per_photo) in
            configurations(blocks, args.steps_scale, targets).items()}
    if is_span(blocks):
        runs[f"BlockSkip blocks {blocks[0]}-{blocks[-1]} (residuals replayed), every linear, whole photos, per-photo "
             f"captions"] = (None, True, max(1, round(1200 * args.steps_scale)))
    for name, (cfg, per_photo, product_steps) in runs.items():
        t0 = time.perf_counter()
        request = None
        if product_steps is None:
            model = build_transformer(spec)
            if cfg is not None:
                finetune(spec, model, refs, per_photo_captions if per_photo else train_prompt, cfg)
        else:                         # the product: compile (residual cache) + the eager runtime, LoRA into diffusers
            model, request = blockskip_lora(spec, subject, train_prompt, blocks, num_blocks, product_steps,
                                            Path(args.out) / "work" / "ceiling_blockskip")
        train_s = time.perf_counter() - t0
        row = {"config": name, "finetune": None if cfg is None else asdict(cfg), "per_photo_captions": per_photo,
               "train_seconds": round(train_s, 1), **({"product_request": request} if request else {})}
        for g in GUIDANCES:
            train_ims = generate(spec, model, [train_prompt] * TRAIN_SEEDS, list(range(TRAIN_SEEDS)), guidance=g)
            eval_ims = generate(spec, model, eval_texts, eval_seeds, guidance=g)
            row[f"g{g:g}"] = {"training_prompt": score_cell(train_ims, subject, refs),
                              "eval_prompts": score_cell(eval_ims, subject, refs, eval_bgs)}
            if g == GUIDANCES[0]:
                tiles.append(torch.cat([train_ims[:4], eval_ims[::EVAL_SEEDS]]))
        rows.append(row)
        print(f"{name}: {train_s:.0f} s, " + ", ".join(
            f"g{g:g} star {row[f'g{g:g}']['training_prompt']['subject_shape']['mean']:.2f} / "
            f"{row[f'g{g:g}']['eval_prompts']['subject_shape']['mean']:.2f}" for g in GUIDANCES),
              file=sys.stderr, flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    picture = to_uint8_image(grid(torch.cat(tiles), 8))
    picture.resize((picture.width * 4, picture.height * 4), 0).save(out / "testbed_ceiling.png")
    meta = provenance()
    doc = {"meta": meta, "subject": args.subject, "training_prompt": train_prompt,
           "eval_prompts": [p for p, _ in evals], "train_seeds": TRAIN_SEEDS, "eval_seeds": EVAL_SEEDS,
           "rows": rows}
    (out / "testbed_ceiling.json").write_text(json.dumps(doc, indent=1))
    (out / "testbed_ceiling.md").write_text(markdown(doc))
    print(markdown(doc))
    return 0


def blockskip_lora(spec, subject, prompt: str, blocks: tuple[int, ...], num_blocks: int, steps: int, work: Path):
    """Compile the references (with their captions) with blockskip_request, train with the eager runtime, and load the
    LoRA into the full diffusers model. Returns (model, the compile arguments)."""
    import json as _json
    import shutil

    from testbed.scenes import write_reference_photos
    from compiler.cli import main as cli_main
    from ditskip_edge.generate import load_model
    shutil.rmtree(work, ignore_errors=True)
    write_reference_photos(subject, work / "photos", 5, captions=True)
    request = blockskip_request(work / "photos", work / "bundle", prompt, blocks, num_blocks, steps)
    if cli_main(request) != 0 or cli_main(["train", str(work / "bundle"), "--no-resume"]) != 0:
        raise RuntimeError(f"the BlockSkip row's compile or train failed: {' '.join(request)}")
    summary = _json.loads((work / "bundle" / "runs" / "eager" / "summary.json").read_text())
    return load_model(spec, summary["lora"]), [a.replace(str(work), "<work>") for a in request]


def markdown(doc: dict) -> str:
    def f(c: dict) -> str:
        return f"{c['mean']:.2f} +- {c['ci95']:.2f}"
    lines = ["# What fine-tuning makes flux-testbed draw of a held-out subject", "", provenance_md(doc["meta"]),
             f"Subject `{doc['subject']}`; training prompt `{doc['training_prompt']}` ({doc['train_seeds']} seeds); "
             f"eval prompts: the 4 backgrounds no reference shows ({doc['eval_seeds']} seeds each). "
             "Subject shape = share of images whose foreground is nearest the subject's shape of the 10 scene "
             "shapes (chance 0.10). 95% CIs over images; the same noise in every row.", "",
             "| configuration | train s | guidance | shape, training prompt | shape, eval prompts | "
             "similarity, eval prompts | background as prompted |", "|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        for g in GUIDANCES:
            c = r[f"g{g:g}"]
            lines.append(f"| {r['config']} | {r['train_seconds']:.0f} | {g:g} | "
                         f"{f(c['training_prompt']['subject_shape'])}"
                         f" | {f(c['eval_prompts']['subject_shape'])} | {f(c['eval_prompts']['subject_sim'])} | "
                         f"{f(c['eval_prompts']['background_ok'])} |")
    lines += ["", "Picture `testbed_ceiling.png`: a row per configuration (in the table's order), guidance 1; "
              "columns 1-4 the training prompt (seeds 0-3), 5-8 the eval prompts (green, black, yellow, purple "
              "background; seed 0)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
