"""Research fine-tuning on the full diffusers model: a plain torch loop, not the product's trainer.

Two uses in the testbed: the teacher (a long fine-tune that defines what "learned the subject" means, instrument.py)
and the tuned-model selection probe (a short LoRA before cross-attention masking, as the paper probes).

    for step in range(steps):
        batch of `batch` samples: a reference photo, t ~ U(0, 1), a dynamic-patch crop (PAPER.md section 1:
        side 32 + t * 32 px at this model's sizes, uniform placement, resized to 32 px), noise
        x_t = (1 - t) x0 + t noise;  loss = |v(x_t, t, prompt) - (noise - x0)|^2          (rectified flow)
        + prior_weight x the same loss on pretraining scenes with their captions (keeps the base's abilities)

`mode`: "full" trains every transformer weight; "lora" injects a peft LoRA (the product's targets) into `blocks`
(None: all). The model is changed in place and returned.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ditskip_edge.lora import LoraSpec, add_lora
from ditskip_edge.models.latents import LatentEncoder
from ditskip_edge.models.loading import build_vae
from ditskip_edge.models.specs import ModelSpec
from ditskip_edge.models.text import encode_prompt
from ditskip_edge.models.views import block_names_of, make_view
from ditskip_edge.patch_sampling import PatchSampler
from ditskip_edge.runtime.schedule import crop_side_px, place_crop


@dataclass(frozen=True)
class FinetuneConfig:
    mode: str = "full"                     # "full" | "lora"
    steps: int = 400
    batch: int = 4                         # subject samples per step
    lr: float = 1e-4
    rank: int = 8                          # lora only
    blocks: tuple[int, ...] | None = None  # lora only: block indices (None: all)
    targets: tuple[str, ...] = ()          # lora only: module suffixes in a block (() = the product's default)
    prior_weight: float = 0.0              # weight of the pretraining-scene loss
    prior_batch: int = 4
    seed: int = 0
    dynamic_patches: bool = True           # False: the whole photo resized (the fixed-resize ablation)


def crop_batch(photos: Sequence[torch.Tensor], t: torch.Tensor, spec: ModelSpec, sampler: PatchSampler,
               rnd: random.Random, dynamic: bool = True) -> tuple[torch.Tensor, list[int]]:
    """One dynamic-patch crop per t (random photo, uniform placement), each resized to the train size; and which
    photo each crop was cut from."""
    out, drawn = [], []
    for ti in t.tolist():
        drawn.append(rnd.randrange(len(photos)))
        photo = photos[drawn[-1]][None]
        h, w = photo.shape[-2:]
        if dynamic:
            side, _ = crop_side_px(ti, spec.train_px, spec.data_px, spec.pixel_multiple, min(h, w))
            x0, y0 = place_crop(side, h, w, rnd.random(), rnd.random())
        else:
            side, x0, y0 = min(h, w), 0, 0
        out.append(sampler(photo, torch.tensor([x0, y0, side], dtype=torch.float32)))
    return torch.cat(out), drawn


class PriorScenes:
    """Pretraining scenes with their captions, rendered on demand (captions encoded once)."""

    def __init__(self, spec: ModelSpec, n: int = 256, seed: int = 1234):
        from ditskip_edge.models.text import MiniLMTextEncoder

        from .scenes import random_scenes
        pairs = random_scenes(n, seed)
        self.scenes = [s for s, _ in pairs]
        enc = MiniLMTextEncoder(spec).encode_batch([c for _, c in pairs])
        self.txt, self.pooled = enc["txt"], enc["pooled"]

    def batch(self, k: int, rnd: random.Random, np_rng: np.random.Generator, px: int):
        from .scenes import render
        idx = [rnd.randrange(len(self.scenes)) for _ in range(k)]
        imgs = torch.stack([F.interpolate(render(self.scenes[i], rng=np_rng)[None], size=(px, px),
                                          mode="area")[0] for i in idx])
        return imgs, {"txt": self.txt[idx], "pooled": self.pooled[idx]}


def finetune(spec: ModelSpec, transformer: nn.Module, photos: Sequence[torch.Tensor], prompt: str | Sequence[str],
             cfg: FinetuneConfig, log_every: int = 0,
             on_step: Callable[[int, nn.Module], None] | None = None) -> nn.Module:
    """`on_step(k, model)` after optimizer step k (1-based), e.g. to score intermediate lengths of one run.
    `prompt`: one caption for every photo, or one per photo (photos[i] trained with prompt[i])."""
    if not isinstance(prompt, str) and len(prompt) != len(photos):
        raise ValueError(f"finetune: {len(prompt)} captions for {len(photos)} photos")
    torch.manual_seed(cfg.seed)
    rnd, np_rng = random.Random(cfg.seed), np.random.default_rng(cfg.seed)
    if cfg.mode == "lora":
        names = block_names_of(transformer)
        kept = names if cfg.blocks is None else [names[i] for i in cfg.blocks]
        add_lora(transformer, spec.arch, kept, LoraSpec(rank=cfg.rank, alpha=float(cfg.rank), targets=list(cfg.targets)))
    elif cfg.mode == "full":
        transformer.requires_grad_(True)
    else:
        raise ValueError(f"finetune mode {cfg.mode!r}: expected 'full' or 'lora'")
    transformer.train()
    view = make_view(spec.arch, transformer)
    encoder = LatentEncoder(spec.arch, build_vae(spec))
    sampler = PatchSampler(spec.train_px)
    shared = encode_prompt(spec, prompt) if isinstance(prompt, str) else None     # one caption for every photo
    per_photo = None if shared is not None else [encode_prompt(spec, p) for p in prompt]   # [i]: photo i's
    prior = PriorScenes(spec) if cfg.prior_weight > 0 else None
    params = [p for p in transformer.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    for step in range(cfg.steps):
        t = torch.rand(cfg.batch)
        crops, drawn = crop_batch(photos, t, spec, sampler, rnd, cfg.dynamic_patches)
        x0 = view.pack(encoder(crops))
        cond = ({k: v.expand(cfg.batch, *v.shape[1:]) for k, v in shared.items()} if per_photo is None
                else {k: torch.cat([per_photo[i][k] for i in drawn]) for k in per_photo[0]})
        loss = _fm_loss(view, x0, t, cond)
        if prior is not None:
            imgs, pc = prior.batch(cfg.prior_batch, rnd, np_rng, spec.train_px)
            loss = loss + cfg.prior_weight * _fm_loss(view, view.pack(encoder(imgs)), torch.rand(cfg.prior_batch), pc)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if log_every and (step + 1) % log_every == 0:
            print(f"finetune step {step + 1}/{cfg.steps} loss {loss.item():.4f}", flush=True)
        if on_step is not None:
            transformer.eval()
            on_step(step + 1, transformer)
            transformer.train()
    return transformer.eval().requires_grad_(False)


def _fm_loss(view, x0: torch.Tensor, t: torch.Tensor, cond) -> torch.Tensor:
    noise = torch.randn_like(x0)
    x_t = (1 - t[:, None, None]) * x0 + t[:, None, None] * noise
    return F.mse_loss(view(x_t, t, cond), noise - x0)
