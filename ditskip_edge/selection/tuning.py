"""The tuned-model probe (PAPER.md section 3 probes "a LoRA-tuned model"): a short LoRA on the subject's photos
before the cross-attention masking, so the probe sees where *this subject* lives in the blocks.

    copy = deepcopy(transformer); LoRA (the product's targets) in every block of the copy
    for step in range(tune_steps):               rectified flow on the photos, the prompt, dynamic-patch crops
        x0 = crop of a photo at t (s_min + t (s_max - s_min)), resized to s_min; x_t = (1 - t) x0 + t noise
        loss = |v(x_t, t) - (noise - x0)|^2 averaged over tune_batch samples; AdamW

The caller's transformer is not touched (the compiler builds the bundle from it afterwards). This runs on the host,
with a full backward through every block: for FLUX.1-dev that is the LoRA memory the paper reports (about 36 GiB),
once, before compiling; the device never runs it.
"""

from __future__ import annotations

import copy
import random
from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..images import Photo
from ..lora import LoraSpec, add_lora
from ..models.latents import LatentEncoder
from ..models.specs import ModelSpec
from ..models.text import encode_prompt
from ..models.views import block_names_of, make_view
from ..patch_sampling import PatchSampler
from ..runtime.schedule import crop_side_px, place_crop


def tuned_copy(spec: ModelSpec, transformer: nn.Module, vae: nn.Module, photos: Sequence[Photo], prompt: str,
               steps: int, lr: float, rank: int, batch: int, seed: int) -> nn.Module:
    """A copy of `transformer` with a LoRA trained `steps` steps on the photos (eval mode, no gradients)."""
    tuned = copy.deepcopy(transformer)
    add_lora(tuned, spec.arch, block_names_of(tuned), LoraSpec(rank=rank, alpha=float(rank)))
    tuned.train()
    view = make_view(spec.arch, tuned)
    encoder = LatentEncoder(spec.arch, vae)
    sampler = PatchSampler(spec.train_px)
    cond1 = encode_prompt(spec, prompt)
    cond = {k: v.expand(batch, *v.shape[1:]) for k, v in cond1.items()}
    params = [p for p in tuned.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    rnd = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        t = torch.rand(batch, generator=gen)
        crops = []
        for ti in t.tolist():
            pixels = photos[rnd.randrange(len(photos))].pixels[None]
            h, w = pixels.shape[-2:]
            side, _ = crop_side_px(ti, spec.train_px, spec.data_px, spec.pixel_multiple, min(h, w))
            x, y = place_crop(side, h, w, rnd.random(), rnd.random())
            crops.append(sampler(pixels, torch.tensor([x, y, side], dtype=torch.float32)))
        with torch.no_grad():
            x0 = view.pack(encoder(torch.cat(crops)))
        noise = torch.randn(x0.shape, generator=gen)
        tt = t.reshape(-1, *([1] * (x0.dim() - 1)))
        loss = F.mse_loss(view((1 - tt) * x0 + tt * noise, t, cond), noise - x0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return tuned.eval().requires_grad_(False)
