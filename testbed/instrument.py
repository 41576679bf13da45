"""The planted-subject instrument: how far a method's LoRA moves the base model towards a teacher that knows the
subject.

    teacher  = the base model + a planted low-rank change: a rank-8 LoRA on every block with the students' targets,
               trained long on the subject's references with the training prompt and merged into the weights
               (TeacherConfig(mode="lora"), the default). It defines what "learned the subject" means on this model
               with a change every LoRA method can make. mode="full" (every weight, the first design) is kept for
               comparison: instrument_pilot.md scores full LoRA against both.
    held-out = what no method trained on: the eval prompts (backgrounds the references never show), and
               - velocity inputs: fresh photos of the subject *on those backgrounds* (rendered, never trained on),
                 noised at PROBE_TIMES with fixed noise:  x_t = (1 - t) x0 + t noise
               - sample seeds: generations from the same noise and prompt for every model (paired samples)
    progress = <f_method - f_base, f_teacher - f_base> / |f_teacher - f_base|^2    (the primary measure)
               the share of the way along the base -> teacher direction; movement sideways of it does not count
    closure  = 1 - sum |f_method - f_teacher|^2 / sum |f_base - f_teacher|^2
               the share of the distance closed; sideways movement counts against it
               f = the conditional velocity v(x_t, t, prompt) on the velocity inputs ("velocity_*"), or the
               generated image in pixels ("sample_*").

By construction the teacher scores 1 and the base 0 on all four; a LoRA that changed nothing scores exactly 0.
Why progress is primary (instrument_pilot.md, 4 subjects x 2 seeds, full LoRA scored during training): a LoRA's
velocity progress rises with training length (0.31 -> 0.76 from 50 to 400 steps against the planted teacher) with
a CI of about 0.1, while its closure falls below 0 (-0.05 -> -0.63): a LoRA moves a lot sideways of the teacher's
direction as it learns, so closure mostly measured how much it moved, not where to. Each measure is a sum over many
inputs (velocity: prompts x photos x times x tokens), so one trained LoRA gets one nearly noise-free number; the 95%
CIs of the study are over what varies between runs: subjects and training seeds.

What it cannot tell: the teacher is this 4.6M-parameter model's own picture of the subject, not the subject; a
planted LoRA on every block favours methods that train every block (full LoRA can reach the teacher exactly,
BlockSkip only with its kept blocks), which is the comparison the paper makes but with the scale tilted towards full
LoRA; a method could draw the subject better than the teacher and score < 1 (subject similarity to the references
is reported beside it, and the teacher's own subject similarity says how good that picture is).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from ditskip_edge.runtime.bundle import sha256_file
from ditskip_edge.generate import generate
from ditskip_edge.models.latents import LatentEncoder
from ditskip_edge.models.loading import build_transformer, build_vae, builtin_weights_path
from ditskip_edge.models.specs import ModelSpec
from ditskip_edge.models.text import encode_prompt
from ditskip_edge.models.views import make_view
from .finetune import FinetuneConfig, finetune
from .scenes import EVAL_BACKGROUNDS, PALETTE, Subject, reference_images, render, subject_prompt

ANCHORED = ("velocity_progress", "velocity_closure", "sample_progress", "sample_closure")   # base 0, teacher 1
PROBE_TIMES = (0.25, 0.5, 0.75)     # rectified-flow times of the velocity inputs (1 = noise)
FRESH_SEED = 7                      # placement / size of the fresh photos (the references use seed 0)


@dataclass(frozen=True)
class TeacherConfig:
    mode: str = "lora"               # "lora": a planted low-rank change (the students' family); "full": every weight
    steps: int = 800
    lr: float = 5e-3
    batch: int = 4
    prior_weight: float = 0.5        # pretraining scenes in every step: the teacher keeps the base's abilities
    rank: int = 8                    # lora only
    seed: int = 0

    def finetune_config(self) -> FinetuneConfig:
        return FinetuneConfig(mode=self.mode, steps=self.steps, lr=self.lr, batch=self.batch, rank=self.rank,
                              prior_weight=self.prior_weight, seed=self.seed)


def teacher_path(spec: ModelSpec, subject: Subject, n_references: int, cfg: TeacherConfig, folder: Path) -> Path:
    key = json.dumps({"model_sha256": sha256_file(builtin_weights_path(spec)), "subject": asdict(subject),
                      "n_references": n_references, "prompt": subject_prompt(subject), **asdict(cfg)},
                     sort_keys=True)
    return Path(folder) / f"teacher_{subject.name}_{hashlib.sha256(key.encode()).hexdigest()[:12]}.safetensors"


def train_teacher(spec: ModelSpec, subject: Subject, n_references: int, cfg: TeacherConfig, folder: Path) -> Path:
    """The subject's teacher weights (kept in `folder` under a key of the model weights, subject and config)."""
    from safetensors.torch import save_file
    path = teacher_path(spec, subject, n_references, cfg, folder)
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    model = finetune(spec, build_transformer(spec), reference_images(subject, n_references), subject_prompt(subject),
                     cfg.finetune_config())
    if cfg.mode == "lora":             # the planted change merged into the weights: the teacher is a plain model
        model.fuse_lora()
        model.unload_lora()
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(path))
    path.with_suffix(".json").write_text(json.dumps({"subject": subject.name, "config": asdict(cfg),
                                                     "train_s": round(time.perf_counter() - t0, 1)}, indent=1))
    return path


def load_weights(spec: ModelSpec, path: Path) -> nn.Module:
    from safetensors.torch import load_file
    model = build_transformer(spec)
    model.load_state_dict(load_file(str(path)), strict=True)
    return model.eval()


@dataclass
class HeldOut:
    """One subject's held-out inputs."""
    prompts: list[str]                 # one per eval background
    backgrounds: list[str]
    x_t: torch.Tensor                  # [N, tokens, C] velocity inputs (packed)
    t: torch.Tensor                    # [N]
    prompt_of: list[int]               # [N] index into prompts
    gen_prompts: list[str]             # paired samples: prompt x sample seed
    gen_backgrounds: list[str]
    gen_seeds: list[int]


def fresh_photos(subject: Subject, background: str, n: int, px: int) -> torch.Tensor:
    """n new photos of the subject on `background` (placement / size drawn as the references'), at px: [n, 3, px, px]."""
    rnd = np.random.default_rng(FRESH_SEED)
    out = []
    for _ in range(n):
        centre = tuple(0.5 + rnd.uniform(-0.12, 0.12, 2))
        img = render(subject.scene(PALETTE[background], centre, float(rnd.uniform(14.0, 19.0))))
        out.append(torch.nn.functional.interpolate(img[None], size=(px, px), mode="area")[0])
    return torch.stack(out)


def held_out(spec: ModelSpec, subject: Subject, photos_per_prompt: int = 2, sample_seeds: list[int] | None = None,
             times: tuple[float, ...] = PROBE_TIMES, prompts: int | None = None) -> HeldOut:
    sample_seeds = list(sample_seeds if sample_seeds is not None else [0, 1, 2])
    bgs = list(EVAL_BACKGROUNDS)[:prompts]
    texts = [subject_prompt(subject, bg) for bg in bgs]
    encoder = LatentEncoder(spec.arch, build_vae(spec))
    view = make_view(spec.arch, build_transformer(spec, device="meta"))
    xs, ts, of = [], [], []
    g = torch.Generator().manual_seed(FRESH_SEED)
    for i, bg in enumerate(bgs):
        x0 = view.pack(encoder(fresh_photos(subject, bg, photos_per_prompt, spec.train_px)))   # [P, tokens, C]
        for t in times:
            noise = torch.randn(x0.shape, generator=g)
            xs.append((1 - t) * x0 + t * noise)
            ts += [t] * len(x0)
            of += [i] * len(x0)
    return HeldOut(prompts=texts, backgrounds=bgs, x_t=torch.cat(xs), t=torch.tensor(ts), prompt_of=of,
                   gen_prompts=[p for p in texts for _ in sample_seeds],
                   gen_backgrounds=[b for b in bgs for _ in sample_seeds],
                   gen_seeds=[s for _ in texts for s in sample_seeds])


@torch.no_grad()
def velocities(spec: ModelSpec, model: nn.Module, h: HeldOut) -> torch.Tensor:
    """Conditional velocity v(x_t, t, prompt) on every velocity input: [N, tokens, C]."""
    view = make_view(spec.arch, model)
    enc = [encode_prompt(spec, p) for p in h.prompts]
    cond = {k: torch.cat([enc[i][k] for i in h.prompt_of]) for k in enc[0]}
    return view(h.x_t, h.t, cond)


def samples(spec: ModelSpec, model: nn.Module, h: HeldOut, steps: int = 20, guidance: float = 3.0) -> torch.Tensor:
    """Paired samples: [len(gen_prompts), 3, px, px]."""
    return generate(spec, model, h.gen_prompts, h.gen_seeds, steps, guidance)


@dataclass
class Anchors:
    """The base's and the teacher's outputs on one subject's held-out inputs (the two ends of the scale)."""
    v_base: torch.Tensor
    v_teacher: torch.Tensor
    x_base: torch.Tensor
    x_teacher: torch.Tensor


def anchors(spec: ModelSpec, base: nn.Module, teacher: nn.Module, h: HeldOut, steps: int = 20,
            guidance: float = 3.0) -> Anchors:
    return Anchors(velocities(spec, base, h), velocities(spec, teacher, h), samples(spec, base, h, steps, guidance),
                   samples(spec, teacher, h, steps, guidance))


def closure(f: torch.Tensor, f_base: torch.Tensor, f_teacher: torch.Tensor) -> float:
    """1 - |f - f_teacher|^2 / |f_base - f_teacher|^2 (sums over everything): base 0, teacher 1."""
    den = float(((f_base - f_teacher) ** 2).sum())
    if den == 0.0:
        raise ValueError("closure: the base and the teacher give the same outputs (no distance to close)")
    return 1.0 - float(((f - f_teacher) ** 2).sum()) / den


def progress(f: torch.Tensor, f_base: torch.Tensor, f_teacher: torch.Tensor) -> float:
    """<f - f_base, f_teacher - f_base> / |f_teacher - f_base|^2: the share of the way along the base -> teacher
    direction (base 0, teacher 1); movement sideways of that direction neither adds nor subtracts."""
    d_teacher = (f_teacher - f_base).flatten().double()
    den = float(d_teacher @ d_teacher)
    if den == 0.0:
        raise ValueError("progress: the base and the teacher give the same outputs (no direction to move along)")
    return float((f - f_base).flatten().double() @ d_teacher) / den


def closures(spec: ModelSpec, model: nn.Module, h: HeldOut, a: Anchors, steps: int = 20,
             guidance: float = 3.0) -> tuple[dict, torch.Tensor]:
    """{"velocity_closure", "velocity_progress", "sample_closure", "sample_progress"} of one model, and its paired
    samples."""
    x = samples(spec, model, h, steps, guidance)
    v = velocities(spec, model, h)
    return {"velocity_closure": closure(v, a.v_base, a.v_teacher),
            "velocity_progress": progress(v, a.v_base, a.v_teacher),
            "sample_closure": closure(x, a.x_base, a.x_teacher),
            "sample_progress": progress(x, a.x_base, a.x_teacher)}, x
