"""The skip model: one training step's loss on the kept blocks (PAPER.md section 2).

    x_t    = (1 - t) x0 + t noise                      rectified flow; target velocity v = noise - x0
    s      = embed(x_t, t, text) + front residual      (the front span's effect, replayed)
    s      = kept blocks (with LoRA) (s)
    img    = s["img"] + back residual                  (the back span's effect; identity for gradients)
    loss   = mse(head(img), v)

Inputs are one scheduled sample: clean latents x0 [B, C, h, w], noise (same shape), t [B], the text conditioning
and the sample's residual-cache entry {"front.img", "front.txt" (FLUX), "back.img"}. The skipped blocks are not in
this module (not even as meta tensors), so what it exports is the kept span only.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .models.views import Conditioning, DiTView
from .plan import SkipPlan

Residuals = dict[str, torch.Tensor]


def noisy_latents_and_target(x0: torch.Tensor, noise: torch.Tensor, t: torch.Tensor):
    tt = t.reshape(-1, *([1] * (x0.dim() - 1))).to(x0.dtype)
    return (1 - tt) * x0 + tt * noise, noise - x0


class SkipModel(nn.Module):
    def __init__(self, view: DiTView, plan: SkipPlan):
        super().__init__()
        if view.block_indices != plan.kept:
            raise ValueError(f"view blocks {view.block_indices[:3]}.. are not the plan's kept blocks {plan.kept[:3]}..")
        self.view = view
        self.n_front = plan.n_front
        self.n_back = plan.n_back

    def predict(self, x0, noise, t, cond: Conditioning, residuals: Residuals):
        x_t, target = noisy_latents_and_target(x0, noise, t)
        view = self.view
        streams, ctx = view.embed(view.pack(x_t), t, cond)
        if self.n_front:
            streams = {k: v + residuals[f"front.{k}"] for k, v in streams.items()}
        streams = view.run_blocks(view.blocks, streams, ctx)
        if self.n_back:
            streams = dict(streams, img=streams["img"] + residuals["back.img"])
        return view.head(streams, ctx), view.pack(target)

    def forward(self, x0, noise, t, cond: Conditioning, residuals: Residuals) -> torch.Tensor:
        pred, target = self.predict(x0, noise, t, cond, residuals)
        return F.mse_loss(pred, target)


def residual_names(arch_streams: tuple[str, ...], plan: SkipPlan) -> list[str]:
    names = [f"front.{s}" for s in arch_streams] if plan.n_front else []
    return names + (["back.img"] if plan.n_back else [])


@torch.no_grad()
def compute_residuals(full_view: DiTView, plan: SkipPlan, x0, noise, t, cond: Conditioning) -> Residuals:
    """Run the frozen full model once for one sample and return the skipped spans' residuals
    delta = span output - span input, per stream: front for every stream crossing it, back for "img"."""
    if len(full_view.blocks) != plan.num_blocks:
        raise ValueError("compute_residuals needs a view over all blocks")
    x_t, _ = noisy_latents_and_target(x0, noise, t)
    streams, ctx = full_view.embed(full_view.pack(x_t), t, cond)
    embedded = streams
    out: Residuals = {}
    back_start = plan.num_blocks - plan.n_back
    kept_out = None
    for i, block in enumerate(full_view.blocks):
        if i == plan.n_front and plan.n_front:
            out.update({f"front.{k}": (streams[k] - embedded[k]).contiguous() for k in streams})
        if i == back_start:
            kept_out = streams["img"]
        streams = full_view.run_block(block, streams, ctx)
    if plan.n_back:
        out["back.img"] = (streams["img"] - kept_out).contiguous()
    return out
