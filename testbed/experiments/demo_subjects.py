"""`make demo`'s path on every held-out subject and several training seeds: how often the after row shows the
subject, with the training run (subject x training seed) as the unit, not the image.

`examples/demo.py` personalizes one subject once; whether its after row shows the subject in 3 of 4 prompts depends
on the subject and on the run (`demo_recipe.md`: the teal star's count moved 3 -> 2 of 4 when the residual cache's
rounding changed). Per recipe (optimizer steps x 4 samples, learning rate), per subject, per training seed
(`compile --seed`: the schedule's timesteps, crops and noise), this runs the demo's compile + train
(`examples.recipe.compile_args`, without the generation programs) and draws the 4 eval prompts (backgrounds no
reference shows) x `--noise-seeds` noise seeds at the demo's guidance with the LoRA loaded into the full diffusers
model. Per subject and recipe: the share of a run's images recognised (the subject's shape nearest of the 10 scene
shapes, its colour, its marking, the prompted background: `metrics.subject_recognised`; and apart, the marking
alone and the verdict without it, which the base model passes where it draws the class well), its mean and 95%
Student-t CI over the training seeds; the runs with >= 3 of 4 prompts recognised at noise seed 0 (what `make demo`
prints); subject similarity; the train step's wall seconds. The base model (no LoRA) is drawn once per subject on the
same noise.

`--backgrounds seen` draws the first 4 references' own captions instead (the backgrounds the LoRA was trained on): a
memorization check, which tells a LoRA that did not learn the subject from one that learned it and does not carry it
to new backgrounds.

Images of one prompt barely differ between noise seeds (every caption names the shape, colour, size, placement
and background, so the testbed's samples vary little): a CI over images would count near-copies as independent.

    python testbed/experiments/demo_subjects.py --jobs 2            # 4 subjects x 3 seeds x 2 recipes: ~25 min on 2 cores
    python testbed/experiments/demo_subjects.py --subjects pink_heart --train-seeds 0 --recipes 2x1e-3 --noise-seeds 1 \
        --out /tmp/s                                       # a smoke run (tests)

Writes <out>/demo_subjects.{json,md,png} (png: per subject, the base then each recipe's training seed 0, noise
seed 0, on the 4 eval backgrounds, then a fresh photo).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks._meta import provenance, provenance_md, write_result                               # noqa: E402
from ditskip_edge.generate import grid                                                   # noqa: E402
from ditskip_edge.images import to_uint8_image                                          # noqa: E402
from testbed.metrics import mean_ci, score_images                             # noqa: E402
from testbed.scenes import SUBJECTS, eval_prompts, reference_images, subject_prompt  # noqa: E402
from examples.demo import PHOTOS, SHOWN_PROMPTS                                                  # noqa: E402
from examples.recipe import GUIDANCE, LR, RANK, STEPS                                             # noqa: E402

DEMO_RECIPE = f"{STEPS}x{LR:g}"
TEACHER = "teacher"                   # the instrument's teacher as a row: what a long LoRA on every block draws
RECIPE_FORM = ("STEPSxLR[+dynamic][+r<rank>][+p<photos>][+logit][+g<guidance>][+s<front>-<back>][+prior<images>]"
               "[+linear][+w<scale>][+unnamed][+bg<backgrounds>][+imagestream]")


@dataclass(frozen=True)
class Recipe:
    """A row of the demo's path: optimizer steps (x 4 samples) x learning rate, and what differs from the demo."""
    steps: int
    lr: float
    dynamic_patches: bool = False       # +dynamic: the method's timestep-dependent crops, not the whole photos
    rank: int = RANK                    # +r16: the LoRA's rank
    photos: int = PHOTOS                # +p10: reference photos (beyond 5 they repeat the 5 backgrounds)
    t_sampling: str = "uniform"         # +logit: logit-normal timesteps (SD3 / FLUX), not uniform
    guidance: float = GUIDANCE          # +g4: the pictures' classifier-free guidance
    split: tuple[int, int] | None = None    # +s5-1: skip 5 front / 1 back blocks instead of selecting a 50% split
    prior: int = 0                      # +prior5: DreamBooth's prior preservation, that many class images beside the
                                        # photos (the base model's, demo_recipe.write_class_images)
    lr_schedule: str = "constant"       # +linear: the learning rate falling linearly towards 0 (compile --lr-schedule)
    image_stream: bool = False          # +imagestream: no LoRA on the double blocks' text stream
    backgrounds: int = 0                # +bg7: 7 photos on 7 distinct backgrounds (none an eval one); 0: the demo's
    unnamed_backgrounds: bool = False   # +unnamed: each photo also under the caption naming no background
    adapter_weight: float = 1.0         # +w0.6: the LoRA's weight when the pictures are drawn (diffusers set_adapters)


def parse_recipe(text: str) -> Recipe:
    """"400x2e-3", "200x4e-3+dynamic", "200x4e-3+r16+p10+logit+g4" -> Recipe; ValueError on anything else."""
    head, *options = text.split("+")
    steps, lr = head.split("x")
    recipe = Recipe(int(steps), float(lr))
    if recipe.steps < 1 or not recipe.lr > 0:
        raise ValueError(text)
    for option in options:
        if option == "dynamic":
            recipe = replace(recipe, dynamic_patches=True)
        elif option == "logit":
            recipe = replace(recipe, t_sampling="logit_normal")
        elif option.startswith("bg") and option[2:].isdigit() and 1 <= int(option[2:]) <= 7:
            recipe = replace(recipe, backgrounds=int(option[2:]))
        elif option == "imagestream":
            recipe = replace(recipe, image_stream=True)
        elif option == "unnamed":
            recipe = replace(recipe, unnamed_backgrounds=True)
        elif option == "linear":
            recipe = replace(recipe, lr_schedule="linear")
        elif option[:1] == "r" and option[1:].isdigit() and int(option[1:]) >= 1:
            recipe = replace(recipe, rank=int(option[1:]))
        elif option[:1] == "p" and option[1:].isdigit() and int(option[1:]) >= 1:
            recipe = replace(recipe, photos=int(option[1:]))
        elif option[:1] == "w" and float(option[1:]) > 0:
            recipe = replace(recipe, adapter_weight=float(option[1:]))
        elif option[:1] == "g" and float(option[1:]) > 0:
            recipe = replace(recipe, guidance=float(option[1:]))
        elif option.startswith("prior") and option[5:].isdigit():
            recipe = replace(recipe, prior=int(option[5:]))
        elif option[:1] == "s" and option[1:].count("-") == 1 and option[1:].replace("-", "").isdigit():
            recipe = replace(recipe, split=tuple(int(n) for n in option[1:].split("-")))
        else:
            raise ValueError(text)
    return recipe


def recipe_arg(text: str) -> str:
    """--recipes "400x2e-3": optimizer steps (x 4 samples) x learning rate, options after "+" (`Recipe`)."""
    try:
        parse_recipe(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected {RECIPE_FORM}, e.g. 400x2e-3 or 200x4e-3+r16") from None
    return text


BACKGROUNDS = {"eval": "the 4 eval backgrounds, which no reference shows (the demo's)",
               "seen": "the first 4 references' own backgrounds, in their captions' words (what the LoRA was trained "
                       "on: a memorization check)"}


def eval_batch(subject, noise_seeds: int, backgrounds: str = "eval") -> tuple[list[str], list[int], list[str]]:
    """The eval prompts x noise seeds, seed-major: images [0:4] are noise seed 0 (the demo's pictures).
    `backgrounds` "seen": the prompts of the first 4 reference photos' captions instead (`BACKGROUNDS`)."""
    if backgrounds == "seen":
        prompts = [(subject_prompt(subject, bg, described=True), bg) for bg in subject.reference_backgrounds[:4]]
    else:
        prompts = eval_prompts(subject, described=True)
    texts = [p for _ in range(noise_seeds) for p, _ in prompts]
    seeds = [s for s in range(noise_seeds) for _ in prompts]
    backgrounds = [bg for _ in range(noise_seeds) for _, bg in prompts]
    return texts, seeds, backgrounds


def score_run(images: torch.Tensor, subject, backgrounds: list[str]) -> dict:
    refs = reference_images(subject, 5)
    scores = score_images(list(images), backgrounds, refs, subject.colour, subject.shape, subject.marking)
    per = scores["per_image"]
    recognised = [int(r) for r in per["recognised"]]
    unmarked = per["shape_colour_background"]
    return {"recognised": sum(recognised) / len(recognised), "demo_seed_recognised": sum(recognised[:4]),
            "marking": scores["marking_ok"]["mean"], "shape_colour_background": sum(unmarked) / len(unmarked),
            "similarity": scores["subject_sim"]["mean"], "per_image_recognised": recognised}


def run_one(task: dict) -> dict:
    """One training run of the demo's path (a worker process, one torch thread); returns its scores and the noise
    seed 0 pictures. A failed compile or train (SystemExit) comes back to the pool as an error: a worker that exits
    instead leaves the pool waiting for its result forever."""
    try:
        return _run_one(task)
    except SystemExit as e:
        raise RuntimeError(f"{task['subject']} {task['recipe']} seed {task['train_seed']}: {e}") from None


def _run_one(task: dict) -> dict:
    torch.set_num_threads(1)
    from testbed.experiments.demo_recipe import image_stream_targets, train_lora
    from ditskip_edge.generate import generate, load_model
    from ditskip_edge.models.loading import resolve_spec
    subject = SUBJECTS[task["subject"]]
    spec = resolve_spec(task["model"])
    texts, seeds, backgrounds = eval_batch(subject, task["noise_seeds"], task.get("backgrounds", "eval"))
    work = Path(tempfile.mkdtemp(prefix="demo_subjects_"))
    try:
        seconds_per_step, guidance = 0.0, GUIDANCE
        if task["recipe"] is None:
            model = load_model(spec)
        elif task["recipe"] == TEACHER:
            from testbed.instrument import TeacherConfig, load_weights, teacher_path
            weights = teacher_path(spec, subject, 5, TeacherConfig(), Path(task["teacher_dir"]))
            if not weights.is_file():
                raise SystemExit(f"demo_subjects: no teacher for {subject.name} of these weights in "
                                 f"{task['teacher_dir']} (personalization_study.py trains them)")
            model = load_weights(spec, weights)
            texts = [subject_prompt(subject, bg) for bg in backgrounds]       # the teacher's own (plain) prompts
        else:
            recipe = parse_recipe(task["recipe"])
            lora, _ = train_lora(subject, "described", recipe.steps, recipe.split, work, recipe.lr,
                                 seed=task["train_seed"],
                                 dynamic_patches=recipe.dynamic_patches, rank=recipe.rank, photos=recipe.photos,
                                 t_sampling=recipe.t_sampling, prior=recipe.prior, model=task["model"],
                                 lr_schedule=recipe.lr_schedule, unnamed_backgrounds=recipe.unnamed_backgrounds,
                                 backgrounds=recipe.backgrounds,
                                 lora_targets=image_stream_targets(task["model"]) if recipe.image_stream else None)
            model = load_model(spec, lora, recipe.adapter_weight)
            seconds_per_step = json.loads((work / "bundle" / "runs" / "eager" / "summary.json").read_text())[
                "seconds_per_step"]
            guidance = recipe.guidance
        images = generate(spec, model, texts, seeds, guidance=guidance)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    png = Path(task["images_dir"]) / images_name(task)
    png.parent.mkdir(parents=True, exist_ok=True)
    to_uint8_image(grid(images, 4, pad=0)).save(png)         # every image, for --rescore (8-bit, as a person sees)
    return {**task, **score_run(images, subject, backgrounds), "train_seconds_per_step": seconds_per_step,
            "images": str(png.relative_to(png.parent.parent)), "picture": images[:4].tolist()}


def images_name(task: dict) -> str:
    return f"{task['subject']}_{task['recipe'] or 'base'}_seed{task['train_seed']}.png"


def load_images(png: Path, n: int) -> torch.Tensor:
    """A run's saved images -> [n, 3, px, px] in [-1, 1] (the grid's 4 columns, rows = noise seeds)."""
    import numpy as np
    from PIL import Image
    pixels = torch.from_numpy(np.asarray(Image.open(png).convert("RGB"), np.float32) / 127.5 - 1.0).permute(2, 0, 1)
    px = pixels.shape[-1] // 4
    tiles = [pixels[:, r * px:(r + 1) * px, c * px:(c + 1) * px] for r in range(pixels.shape[1] // px)
             for c in range(4)]
    return torch.stack(tiles[:n])


def rescore(doc: dict, out: Path) -> list[dict]:
    """The saved runs scored again from their saved images (after a change of the metrics). The images are 8-bit:
    a borderline picture can flip (rescoring demo_subjects.json unchanged moved 2 of its 448 pictures' verdicts)."""
    runs = []
    for run in doc["runs"]:
        subject = SUBJECTS[run["subject"]]
        _, _, backgrounds = eval_batch(subject, run["noise_seeds"], run.get("backgrounds", "eval"))
        images = load_images(out / run["images"], len(backgrounds))
        runs.append({**run, **score_run(images, subject, backgrounds), "picture": images[:4].tolist()})
    return runs


def runs_shown(runs: list[dict]) -> int:
    """The runs whose noise seed 0 (`make demo`'s pictures) has >= SHOWN_PROMPTS prompts recognised."""
    return sum(r["demo_seed_recognised"] >= SHOWN_PROMPTS for r in runs)


def summarize(runs: list[dict]) -> list[dict]:
    rows = []
    for subject in dict.fromkeys(r["subject"] for r in runs):
        for recipe in dict.fromkeys(r["recipe"] for r in runs):
            mine = sorted((r for r in runs if r["subject"] == subject and r["recipe"] == recipe),
                          key=lambda r: -1 if r["train_seed"] is None else r["train_seed"])   # runs finish in any order
            if not mine:
                continue
            rows.append({"subject": subject, "recipe": recipe or "base", "runs": len(mine),
                         "recognised": mean_ci([r["recognised"] for r in mine]),
                         "similarity": mean_ci([r["similarity"] for r in mine]),
                         "marking": mean_ci([r["marking"] for r in mine]),
                         "shape_colour_background": mean_ci([r["shape_colour_background"] for r in mine]),
                         "demo_seed_recognised": [r["demo_seed_recognised"] for r in mine],
                         "runs_shown": runs_shown(mine),
                         "train_seconds_per_step": max(r["train_seconds_per_step"] for r in mine)})
    return rows


def paired(a: list[dict], b: list[dict]) -> dict:
    """Recipe b - recipe a over the runs both have (subject x training seed): recognised and similarity per run,
    mean +- 95% Student-t CI over those pairs; refuses recipes with no run in common."""
    key = {(r["subject"], r["train_seed"]): r for r in a}
    pairs = [(key[(r["subject"], r["train_seed"])], r) for r in b if (r["subject"], r["train_seed"]) in key]
    if not pairs:
        raise SystemExit("demo_subjects --paired: the two recipes have no run (subject x training seed) in common")
    return {"runs": len(pairs), **{m: mean_ci([y[m] - x[m] for x, y in pairs]) for m in ("recognised", "similarity")},
            "shown": [runs_shown(side) for side in zip(*pairs)]}


def paired_runs(arg: str, out: Path) -> list[dict]:
    """"demo_subjects:200x4e-3" -> the runs of that recipe in <out>/demo_subjects.json."""
    stem, _, recipe = arg.partition(":")
    path = out / f"{stem}.json"
    if not path.is_file() or not recipe:
        raise SystemExit(f"demo_subjects --paired: {arg!r}: expected STEM:RECIPE with <out>/STEM.json a result")
    runs = [r for r in json.loads(path.read_text())["runs"] if r["recipe"] == recipe]
    if not runs:
        raise SystemExit(f"demo_subjects --paired: no {recipe} run in {path}")
    return runs


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subjects", nargs="+", default=list(SUBJECTS), choices=sorted(SUBJECTS))
    ap.add_argument("--train-seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--recipes", nargs="*", type=recipe_arg, default=["400x2e-3", "200x4e-3"],
                    help=f"STEPSxLR, optimizer steps of 4 samples x learning rate (the demo's: {DEMO_RECIPE}; "
                         "400x2e-3 its recipe before 2026-12-05)")
    ap.add_argument("--noise-seeds", type=int, default=4, help="noise seeds per eval prompt")
    ap.add_argument("--backgrounds", choices=sorted(BACKGROUNDS), default="eval",
                    help="the pictures' backgrounds: " + "; ".join(f"{k}: {v}" for k, v in BACKGROUNDS.items()))
    ap.add_argument("--model", default="flux-testbed",
                    help="the committed testbed (default), or a .safetensors file of other testbed weights "
                         "(pretrain_testbed.py --out, a grown testbed too): new weights measured before they replace "
                         "the committed ones")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (one torch thread each)")
    ap.add_argument("--teacher-dir", default=None,
                    help="also draw each subject's instrument teacher (a rank-8 LoRA on every block, 800 steps, "
                         "merged; personalization_study.py's) from this folder, on its own plain prompts")
    ap.add_argument("--no-base", action="store_true", help="skip the base model's row")
    ap.add_argument("--stem", default=None,
                    help="result files <out>/<stem>.{json,md,png} (default demo_subjects; demo_subjects_paired.json "
                         "with --paired)")
    ap.add_argument("--rescore", action="store_true",
                    help="score <out>/<stem>.json's runs again from their saved images (no training)")
    ap.add_argument("--paired", nargs=2, metavar="STEM:RECIPE",
                    help="no training: recipe B - recipe A over their common runs, from two saved results, e.g. "
                         "demo_subjects:200x4e-3 demo_subjects_unskipped:200x4e-3+s0-0 (writes <out>/<stem>.json, "
                         "by default demo_subjects_paired.json)")
    ap.add_argument("--out", default=str(ROOT / "testbed" / "results"))
    args = ap.parse_args()
    out = Path(args.out)
    if args.paired:
        paired_stem = args.stem or "demo_subjects_paired"
        if paired_stem in (x.partition(":")[0] for x in args.paired):
            ap.error(f"--paired: --stem {paired_stem} would overwrite an input")
        a, b = (paired_runs(x, out) for x in args.paired)
        doc = {"run": provenance(), "a": args.paired[0], "b": args.paired[1], **paired(a, b)}
        (out / f"{paired_stem}.json").write_text(json.dumps(doc, indent=1))
        print(json.dumps(doc, indent=1))
        return 0
    stem = args.stem or "demo_subjects"
    if args.rescore:
        if not (out / f"{stem}.json").is_file():
            ap.error(f"--rescore: no {out / stem}.json (a result of this script) to score again")
        doc = json.loads((out / f"{stem}.json").read_text())
        runs = rescore(doc, out)
        doc.update(rows=summarize(runs), runs=[{k: v for k, v in r.items() if k != "picture"} for r in runs],
                   rescored=provenance())
        print(write_result(doc, out / stem, markdown))
        picture(runs, list(dict.fromkeys(r["recipe"] for r in runs if r["recipe"])), out / f"{stem}.png")
        return 0
    from ditskip_edge.models.loading import builtin_weights_path, resolve_spec
    from ditskip_edge.runtime.bundle import sha256_file
    from ditskip_edge.runtime.errors import UserError
    try:
        spec = resolve_spec(args.model)
    except UserError as e:
        ap.error(f"--model: {e}")
    weights = builtin_weights_path(spec) if spec.weights else None     # which weights drew the pictures
    model_sha256 = sha256_file(weights) if weights is not None and weights.is_file() else None
    from testbed.experiments.demo_recipe import more_backgrounds
    for recipe in args.recipes:
        n_backgrounds = parse_recipe(recipe).backgrounds
        for subject in args.subjects if n_backgrounds else []:
            try:
                more_backgrounds(SUBJECTS[subject], n_backgrounds, args.model)
            except ValueError as e:
                ap.error(f"--recipes {recipe}: {e}")
    images_dir = str(out / f"{stem}_images")
    tasks = [] if args.no_base else [{"subject": s, "recipe": None, "train_seed": None,
                                      "noise_seeds": args.noise_seeds} for s in args.subjects]
    if args.teacher_dir:
        tasks += [{"subject": s, "recipe": TEACHER, "train_seed": None, "noise_seeds": args.noise_seeds,
                   "teacher_dir": args.teacher_dir} for s in args.subjects]
    tasks += [{"subject": s, "recipe": r, "train_seed": seed, "noise_seeds": args.noise_seeds}
              for r in args.recipes for s in args.subjects for seed in args.train_seeds]
    if not tasks:
        ap.error("nothing to run: give --recipes, --teacher-dir, or leave out --no-base")
    for task in tasks:
        task.update(images_dir=images_dir, model=args.model, backgrounds=args.backgrounds)
    t0 = time.time()
    runs = []
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        for run in pool.imap_unordered(run_one, tasks):
            runs.append(run)
            brief = {k: v for k, v in run.items() if k not in ("picture", "per_image_recognised", "images_dir")}
            print(json.dumps(brief),
                  f"({len(runs)}/{len(tasks)}, {time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"run": provenance(), "stem": stem, "model": args.model, "model_sha256": model_sha256,
           "backgrounds": args.backgrounds,
           "guidance": GUIDANCE,
           "noise_seeds": args.noise_seeds,
           "train_seeds": args.train_seeds, "rows": summarize(runs),
           "runs": [{k: v for k, v in r.items() if k not in ("picture", "images_dir")} for r in runs]}
    print(write_result(doc, out / stem, markdown))
    picture(runs, [TEACHER] * bool(args.teacher_dir) + args.recipes, out / f"{stem}.png")
    return 0


def picture(runs: list[dict], recipes: list[str], png: Path) -> None:
    """Per subject: base, then each recipe's lowest training seed; noise seed 0 on the 4 backgrounds (the eval ones
    or the seen ones); then a fresh photo on each."""
    from testbed.instrument import fresh_photos
    from ditskip_edge.generate import grid
    from ditskip_edge.images import to_uint8_image
    rows = []
    for subject in dict.fromkeys(r["subject"] for r in runs):
        for recipe in [None, *recipes]:     # (a row only where runs exist)
            mine = sorted((r for r in runs if r["subject"] == subject and r["recipe"] == recipe),
                          key=lambda r: r["train_seed"] or 0)
            if mine:
                rows.append(torch.tensor(mine[0]["picture"]))
        which = next(r for r in runs if r["subject"] == subject).get("backgrounds", "eval")
        _, _, backgrounds = eval_batch(SUBJECTS[subject], 1, which)
        rows.append(torch.cat([fresh_photos(SUBJECTS[subject], bg, 1, rows[-1].shape[-1]) for bg in backgrounds]))
    image = to_uint8_image(grid(torch.cat(rows), 4))
    image.resize((image.width * 3, image.height * 3), 0).save(png)


def markdown(doc: dict) -> str:
    def cell(m: dict) -> str:
        return f"{m['mean']:.2f}" if m["ci95"] != m["ci95"] else f"{m['mean']:.2f} +- {m['ci95']:.2f}"   # nan: one run
    rescored = [f"Scored again from the saved images (`{doc['stem']}_images/`): {provenance_md(doc['rescored'])}"] \
        if doc.get("rescored") else []
    lines = ["# `make demo`'s path on every held-out subject, over training seeds", "", provenance_md(doc["run"]),
             *rescored, f"Model: `{doc.get('model', 'flux-testbed')}`"
             + (f" (weights sha256 {doc['model_sha256']})" if doc.get("model_sha256") else ""), "",
             f"Per run (subject x training seed {', '.join(map(str, doc['train_seeds']))}): the demo's compile + "
             f"train (BlockSkip 50% by selection, captions naming the colour, a LoRA on every linear layer of the "
             f"kept blocks, whole photos) with the recipe's steps (x 4 samples) and learning rate, then 4 prompts on "
             f"{BACKGROUNDS[doc.get('backgrounds', 'eval')]} x {doc['noise_seeds']} noise seeds at guidance "
             f"{doc['guidance']:g}. recognised = the share of a run's images with the subject's shape nearest of the "
             "10 scene shapes, its colour, its marking (the detail no prompt names: the heart's dots, the star's "
             "centre, the bowtie's stripes, the crescent's checks) and the prompted background; marking = that "
             "check alone; without marking = the other three, the verdict before 2026-12-05; "
             "mean +- 95% CI over runs (the base: one run, "
             f"no CI). shown = runs whose noise seed 0 (`make demo`'s pictures) has >= {SHOWN_PROMPTS} of "
             "4 prompts recognised; per run in brackets.", "",
             "| subject | recipe (steps x lr) | recognised | marking | without marking | similarity | "
             "shown (prompts at noise seed 0) | train s / step |", "|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        lines.append(f"| {r['subject']} | {r['recipe']} | {cell(r['recognised'])} | {cell(r['marking'])} | "
                     f"{cell(r['shape_colour_background'])} | {cell(r['similarity'])} | "
                     f"{r['runs_shown']} of {r['runs']} ({', '.join(map(str, r['demo_seed_recognised']))}) | "
                     f"{r['train_seconds_per_step']:.3f} |")
    if any(r["recipe"] == TEACHER for r in doc["rows"]):
        lines += ["", "teacher: the instrument's teacher of the subject (`instrument.TeacherConfig()`: a rank-8 LoRA "
                  "on every block, 800 steps of 4 at lr 5e-3 with pretraining scenes mixed in, merged), drawn on its "
                  "own plain prompts (\"a large sks <shape> in the center, on a <colour> background\"): what a long "
                  "fine-tune draws on this model."]
    if any("+" in r["recipe"] for r in doc["rows"]):
        lines += ["", f"Recipe options (`Recipe`): +r<n> the LoRA's rank (the demo's: {RANK}), +p<n> reference "
                  f"photos (the demo's: {PHOTOS}; beyond 5 they repeat the 5 backgrounds at other sizes and places), "
                  "+logit logit-normal training timesteps (the demo's: uniform), +g<x> the pictures' guidance, "
                  "+dynamic the method's timestep-dependent crops instead of the whole photos, +s<f>-<b> skip f front "
                  "/ b back blocks instead of selecting a 50% split (+s0-0: a LoRA on every block, no skipping), "
                  "+prior<n> DreamBooth's prior preservation: n class images drawn by the base model from the class "
                  "prompt (the caption without \"sks\") on backgrounds neither an eval one nor the subject's colour, "
                  "trained on beside the references (`demo_recipe.write_class_images`), +linear the learning rate "
                  "falling linearly from the recipe's towards 0 over the steps (`compile --lr-schedule linear`; the "
                  "demo's: constant), +w<x> the LoRA's weight when the pictures are drawn (diffusers' "
                  "`set_adapters`; the demo's: 1), +unnamed each photo a second time under the caption that names "
                  "no background (\"a teal sks star in the center\"): a caption dropout of the background phrase, "
                  "+bg<n> n photos on n distinct backgrounds, the subject's 5 then the palette's others that are "
                  "neither an eval background nor its colour, with captions the text encoder reads whole "
                  "(`demo_recipe.more_backgrounds`), +imagestream no LoRA on the double blocks' text stream "
                  "(`demo_recipe.image_stream_targets`: the caption's tokens enter the joint attention as the base "
                  "encodes them)."]
    lines += ["", f"Picture `{doc.get('stem', 'demo_subjects')}.png`: per subject the rows above (the recipes' "
              f"training seed {min(doc['train_seeds'])}), noise seed 0, then a fresh photo; columns the "
              f"{'references' if doc.get('backgrounds') == 'seen' else 'eval'} backgrounds."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
