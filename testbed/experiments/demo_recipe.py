"""Which captions, length and guidance make `make demo`'s after row show the subject on backgrounds no reference
shows: the demo's own path (`examples/recipe.py compile_args`: BlockSkip 50%, selected split, per-photo captions, a
LoRA on every linear layer of the kept blocks, whole photos, `ditskip-edge train`, the LoRA loaded into the full
diffusers model), varied in
  - the captions: "plain" ("a large sks star in the center, on a red background", the identifier carries
    everything) or "described" (the subject's colour word before the identifier, "a large teal sks star ...",
    `scenes.subject_prompt(described=True)`: the colour is a word the model composes with any background, the LoRA
    has the shape and the orange centre to learn);
  - the optimizer steps (x 4 samples) and the LoRA's learning rate;
and drawn at classifier-free guidance 3 and 6 on the 4 eval prompts (backgrounds no reference shows) x `--seeds`
seeds, the same noise in every row; the base model is drawn on both caption styles.

Per cell: subject similarity to the references (`metrics.subject_similarity`; a fresh photo of the subject on these
backgrounds is scored too), the subject's colour, the share of foregrounds nearest the subject's shape of the 10
scene shapes (chance 0.10), the background as prompted, and the share `subject_recognised` (all three); 95% CIs
over images; "demo seed" = prompts recognised with seed 0, what `make demo` prints.

    python testbed/experiments/demo_recipe.py                   # ~12 min on 2 cores (AMD EPYC)
    python testbed/experiments/demo_recipe.py --steps 2 --seeds 1 --out /tmp/r     # a smoke run (tests)

Writes <out>/demo_recipe.{json,md,png} (png: per row, seed 0's 4 eval prompts at guidance 6).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks._meta import provenance, provenance_md                                              # noqa: E402
from compiler.cli import main as cli_main                                           # noqa: E402
from ditskip_edge.generate import generate, grid, load_model                            # noqa: E402
from ditskip_edge.images import to_uint8_image                                          # noqa: E402
from ditskip_edge.models.loading import resolve_spec                                    # noqa: E402
from testbed.instrument import fresh_photos                                 # noqa: E402
from testbed.metrics import SubjectEmbedder, mean_ci, score_images, subject_similarity  # noqa: E402
from testbed.scenes import (SUBJECTS, eval_prompts, reference_images, subject_prompt,  # noqa: E402
                                      write_reference_photos)
from examples.demo import PHOTOS                                                                  # noqa: E402
from examples.recipe import GUIDANCE, LR, RANK, compile_args                                      # noqa: E402

CAPTIONS = {"plain": False, "described": True}       # caption style -> scenes.subject_prompt(described=)
GUIDANCES = (3.0, 6.0)
PICTURE_GUIDANCE = GUIDANCE           # the picture's rows: the demo's guidance
CLASS_IMAGE_SEED = 1000              # the class images' noise seeds: CLASS_IMAGE_SEED + i, none of the eval pictures'


def score_cell(images: torch.Tensor, subject, refs, backgrounds: list[str], seeds: list[int]) -> dict:
    scores = score_images(list(images), backgrounds, refs, subject.colour, subject.shape, subject.marking)
    recognised = scores.pop("per_image")["recognised"]
    return {**scores, "demo_seed_recognised": int(sum(r for r, s in zip(recognised, seeds) if s == 0))}


def split_arg(text: str) -> tuple[int, int] | None:
    """--splits "selected" -> None (compile selects a 50% split); "1/5" -> skip 1 front / 5 back blocks."""
    if text == "selected":
        return None
    try:
        front, back = (int(k) for k in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f'{text!r}: "selected" or front/back blocks, e.g. 1/5') from None
    return front, back


def split_name(text: str) -> str:
    """argparse type of --splits: the text, once `split_arg` reads it."""
    split_arg(text)
    return text


def write_class_images(subject, folder: Path, n: int, start: int, described: bool,
                       model: str = "flux-testbed") -> list[str]:
    """DreamBooth's prior preservation, as photos: n class images drawn by the base model from the class prompt
    (the subject's caption without the identifier "sks": "a teal star in the center, on a red background") on the
    palette's backgrounds in turn, none of the eval backgrounds and not the subject's colour, written as photos
    `start`.. of `folder` with their captions beside them (`compile --photo-captions` then trains on them with the
    references, one class image drawn as often as one reference). Returns the class prompts."""
    from testbed.scenes import EVAL_BACKGROUNDS, PALETTE
    spec = resolve_spec(model)
    backgrounds = [c for c in PALETTE if c != subject.colour_word and c not in EVAL_BACKGROUNDS]
    prompts = [subject_prompt(subject, backgrounds[i % len(backgrounds)], described).replace("sks ", "")
               for i in range(n)]
    images = generate(spec, load_model(spec), prompts, [CLASS_IMAGE_SEED + i for i in range(n)],
                      guidance=GUIDANCE)                       # as the demo's pictures
    for i, (image, prompt) in enumerate(zip(images, prompts)):
        to_uint8_image(image).save(folder / f"{start + i:02d}.png")
        (folder / f"{start + i:02d}.txt").write_text(prompt + "\n")
    return prompts


TEXT_STREAM = ("attn.add_", "attn.to_add_out", "ff_context.", "norm1_context.")   # FLUX double blocks' text side


def image_stream_targets(model: str = "flux-testbed") -> str:
    """compile --lora-targets for every linear layer of a block but the double blocks' text stream (their text
    tokens' projections, feed-forward and modulation): the caption's tokens enter the joint attention as the base
    model encodes them."""
    from ditskip_edge.lora import every_linear_suffix
    spec = resolve_spec(model)
    return ",".join(s for s in every_linear_suffix(spec.arch, spec.transformer_config) if not s.startswith(TEXT_STREAM))


def more_backgrounds(subject, n: int, model: str = "flux-testbed"):
    """The subject with n distinct reference backgrounds: its own, then the palette's others that are neither an eval
    background nor the subject's colour and whose caption the model's text encoder reads whole (5 to 7 of the 12
    colours: the bowtie's 5 are all); ValueError beyond those."""
    from dataclasses import replace

    from testbed.scenes import EVAL_BACKGROUNDS, PALETTE
    from ditskip_edge.models.text import prompt_tokens
    spec = resolve_spec(model)

    def fits(colour: str) -> bool:
        needed, read, _ = prompt_tokens(spec, subject_prompt(subject, colour, described=True))
        return needed <= read
    others = [c for c in PALETTE if c not in subject.reference_backgrounds and c not in EVAL_BACKGROUNDS
              and PALETTE[c] != subject.colour and fits(c)]
    pool = [*subject.reference_backgrounds, *others]
    if not 1 <= n <= len(pool):
        raise ValueError(f"{subject.name}: {n} backgrounds asked, {len(pool)} are neither an eval one nor its colour "
                         "with a caption the text encoder reads whole")
    return replace(subject, reference_backgrounds=tuple(pool[:n]))


def train_lora(subject, captions: str, steps: int, split: tuple[int, int] | None, work: Path,
               lr: float = LR, seed: int = 0, dynamic_patches: bool = False, rank: int = RANK, photos: int = PHOTOS,
               t_sampling: str = "uniform", prior: int = 0, model: str = "flux-testbed",
               lr_schedule: str = "constant", unnamed_backgrounds: bool = False,
               backgrounds: int = 0, lora_targets: str | None = None) -> tuple[Path, dict]:
    """The demo's compile + train on `photos` reference photos with `captions`-style captions (`seed`: the
    schedule's; `prior`: that many class images beside them, `write_class_images`; `model`: the testbed or a file
    of its weights; `unnamed_backgrounds`: each photo a second time, captioned with the training prompt, which names no
    background, as a caption dropout of the background phrase; `backgrounds`: that many photos on that many distinct
    backgrounds, `more_backgrounds`; the rest as `examples.recipe.compile_args`); returns the LoRA file and the plan."""
    folder, bundle = work / "photos", work / "bundle"
    if backgrounds:
        subject, photos = more_backgrounds(subject, backgrounds, model), backgrounds
    write_reference_photos(subject, folder, photos, captions=True, described=CAPTIONS[captions])
    written = photos
    if unnamed_backgrounds:
        for i in range(photos):
            shutil.copyfile(folder / f"{i:02d}.png", folder / f"{photos + i:02d}.png")
            (folder / f"{photos + i:02d}.txt").write_text(subject_prompt(subject, described=CAPTIONS[captions]) + "\n")
        written += photos
    if prior:
        write_class_images(subject, folder, prior, start=written, described=CAPTIONS[captions], model=model)
    request = compile_args(subject_prompt(subject, described=CAPTIONS[captions]), folder, bundle, jobs=1,
                           steps=steps, generation=False, split=split, lr=lr, seed=seed,
                           dynamic_patches=dynamic_patches, rank=rank, t_sampling=t_sampling, model=model,
                           lr_schedule=lr_schedule, lora_targets=lora_targets)
    if cli_main(request) != 0 or cli_main(["train", str(bundle), "--no-resume"]) != 0:
        raise SystemExit(f"demo_recipe: the {captions} / {steps}-step bundle failed (see above)")
    summary = json.loads((bundle / "runs" / "eager" / "summary.json").read_text())
    return Path(summary["lora"]), json.loads((bundle / "manifest.json").read_text())["plan"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subject", default="teal_star", choices=sorted(SUBJECTS))
    ap.add_argument("--steps", type=int, nargs="+", default=[400, 800], help="optimizer steps (x 4 samples)")
    ap.add_argument("--captions", nargs="+", default=list(CAPTIONS), choices=list(CAPTIONS))
    ap.add_argument("--splits", nargs="+", default=["selected"], type=split_name,
                    help='"selected" (compile --skip-ratio 0.5) or front/back blocks skipped, e.g. 1/5')
    ap.add_argument("--lrs", type=float, nargs="+", default=[LR], help=f"LoRA learning rates (default the demo's, {LR:g})")
    ap.add_argument("--seeds", type=int, default=4, help="noise seeds per eval prompt")
    ap.add_argument("--append", action="store_true",
                    help="keep the rows of <out>/demo_recipe.json this run does not redo (same seeds)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "testbed" / "results"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    spec = resolve_spec("flux-testbed")
    subject = SUBJECTS[args.subject]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="demo_recipe_"))
    refs = reference_images(subject, 5)
    seeds = [s for s in range(args.seeds) for _ in eval_prompts(subject)]
    backgrounds = [bg for _ in range(args.seeds) for _, bg in eval_prompts(subject)]
    fresh = torch.cat([fresh_photos(subject, bg, 1, spec.train_px) for _, bg in eval_prompts(subject)])
    rows, picture = [], []
    fresh_sim = mean_ci([subject_similarity(im, refs, SubjectEmbedder()) for im in fresh])
    try:
        models = [(f"base, {style} prompt", style, 0, None, None) for style in args.captions]
        for style in args.captions:
            for steps in args.steps:
                for split in args.splits:
                    for lr in args.lrs:
                        lora, plan = train_lora(subject, style, steps, split_arg(split),
                                                work / f"{style}_{steps}_{split.replace('/', '-')}_{lr:g}", lr)
                        how = "selected " if split == "selected" else ""
                        models.append((f"LoRA, {style} captions, {steps} steps, lr {lr:g}, {how}split "
                                       f"{plan['n_front']}/{plan['n_back']}", style, steps, lora, plan))
        for name, style, steps, lora, plan in models:
            model = load_model(spec, lora)
            texts = [p for _ in range(args.seeds) for p, _ in eval_prompts(subject, CAPTIONS[style])]
            for guidance in GUIDANCES:
                images = generate(spec, model, texts, seeds, guidance=guidance)
                row = {"row": name, "captions": style, "steps": steps, "guidance": guidance,
                       "split": None if plan is None else f"{plan['n_front']}/{plan['n_back']}",
                       **score_cell(images, subject, refs, backgrounds, seeds)}
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items()}), file=sys.stderr, flush=True)
                if guidance == PICTURE_GUIDANCE:
                    picture.append(images[[i for i, s in enumerate(seeds) if s == 0]])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    picture.append(fresh)
    names = [m[0] for m in models]
    runs, pictures = [provenance()], {}
    if args.append and (out / "demo_recipe.json").exists():
        old = json.loads((out / "demo_recipe.json").read_text())
        if old["seeds"] != args.seeds or old["subject"] != subject.name:
            raise SystemExit("demo_recipe --append: the saved rows used other seeds or another subject")
        redone = {(r["row"], r["guidance"]): r for r in rows}
        kept = [redone.pop((r["row"], r["guidance"]), r) for r in old["rows"]]     # a redone row keeps its place
        rows = kept + list(redone.values())
        runs, pictures = old["runs"] + runs, old["pictures"]
    png = "demo_recipe.png" if not pictures else f"demo_recipe_{len(pictures) + 1}.png"
    pictures[png] = names
    doc = {"runs": runs, "subject": subject.name, "seeds": args.seeds, "fresh_photo_sim": fresh_sim,
           "eval_backgrounds": [bg for _, bg in eval_prompts(subject)], "rows": rows, "pictures": pictures}
    (out / "demo_recipe.json").write_text(json.dumps(doc, indent=1))
    (out / "demo_recipe.md").write_text(markdown(doc))
    image = to_uint8_image(grid(torch.cat(picture), 4))
    image.resize((image.width * 4, image.height * 4), 0).save(out / png)
    print((out / "demo_recipe.md").read_text())
    return 0


def markdown(doc: dict) -> str:
    def cell(m: dict) -> str:
        return f"{m['mean']:.2f} +- {m['ci95']:.2f}"
    lines = ["# What makes `make demo`'s after row show the subject", "",
             *[provenance_md(run) for run in doc["runs"]],
             f"Subject `{doc['subject']}`; eval prompts: the 4 backgrounds no reference shows "
             f"({', '.join(doc['eval_backgrounds'])}) x {doc['seeds']} seeds, the same noise in every row. A fresh "
             f"photo of the subject on these backgrounds scores similarity {cell(doc['fresh_photo_sim'])}. "
             "recognised = nearest shape, colour, marking (`metrics.marking_present`; before 2026-12-05 not "
             "required) and background all as asked; demo seed = prompts recognised at "
             "seed 0 (of 4). 95% CIs over images.", "",
             "| row | split | guidance | similarity | colour | shape | background | recognised | demo seed |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        lines.append(f"| {r['row']} | {r['split'] or '-'} | {r['guidance']:g} | {cell(r['subject_sim'])} | "
                     f"{cell(r['colour_ok'])} | {cell(r['subject_shape'])} | {cell(r['background_ok'])} | "
                     f"{cell(r['recognised'])} | {r['demo_seed_recognised']}/4 |")
    lines += [""] + [f"Picture `{png}`: rows {'; '.join(names)} (seed 0, guidance {PICTURE_GUIDANCE:g}), then a fresh "
                     "photo; columns the eval backgrounds." for png, names in doc["pictures"].items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
