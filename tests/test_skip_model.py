"""The skip model against the full diffusers model (issue 2's exactness properties), both architectures."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ditskip_edge.lora import LoraSpec, add_lora
from ditskip_edge.models.loading import build_transformer, resolve_spec
from ditskip_edge.models.text import encode_prompt
from ditskip_edge.models.views import block_names_of, full_model_forward, make_view
from ditskip_edge.plan import SkipPlan
from ditskip_edge.skip_model import SkipModel, compute_residuals, noisy_latents_and_target

ARCHS = ["flux-tiny", "sana-tiny"]


def _latent_shape(spec):
    c = spec.transformer_config["in_channels"] // (4 if spec.arch == "flux" else 1)
    side = spec.train_px // spec.vae_scale_factor
    return (1, c, side, side)


def _setup(name: str, plan: SkipPlan, random_b: bool = True, seed: int = 0):
    spec = resolve_spec(name)
    transformer = build_transformer(spec)
    names = block_names_of(transformer)
    trainable = add_lora(transformer, spec.arch, [names[i] for i in plan.kept], LoraSpec(rank=4, alpha=4.0))
    if random_b:   # non-identity LoRA so that lora_A gets gradients and the comparison means something
        g = torch.Generator().manual_seed(123)
        with torch.no_grad():
            for n, p in transformer.named_parameters():
                if "lora_B" in n:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    g = torch.Generator().manual_seed(seed)
    shape = _latent_shape(spec)
    x0, noise = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
    t = torch.tensor([0.63])
    cond = encode_prompt(spec, "a photo of sks toy on a table")
    return spec, transformer, trainable, (x0, noise, t, cond)


def _grads(transformer, names):
    return torch.cat([dict(transformer.named_parameters())[n].grad.flatten() for n in names])


def _zero(transformer):
    for p in transformer.parameters():
        p.grad = None


def _full_loss(spec, transformer, x0, noise, t, cond):
    view = make_view(spec.arch, transformer)
    x_t, target = noisy_latents_and_target(x0, noise, t)
    pred = full_model_forward(spec.arch, transformer, view.pack(x_t), t, cond)
    return F.mse_loss(pred, view.pack(target))


def _skip_loss(spec, transformer, plan, x0, noise, t, cond):
    residuals = compute_residuals(make_view(spec.arch, transformer), plan, x0, noise, t, cond)
    skip = SkipModel(make_view(spec.arch, transformer, plan.kept), plan)
    return skip(x0, noise, t, cond, residuals)


def full_and_skip(spec, transformer, trainable, plan, batch):
    """Loss and LoRA gradients of the full model, then of the skip model, for the same sample."""
    loss_full = _full_loss(spec, transformer, *batch)
    loss_full.backward()
    g_full = _grads(transformer, trainable)
    _zero(transformer)
    loss_skip = _skip_loss(spec, transformer, plan, *batch)
    loss_skip.backward()
    return loss_full, g_full, loss_skip, _grads(transformer, trainable)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("name", ARCHS)
def test_full_view_reproduces_the_diffusers_forward(name):
    spec, transformer, _, (x0, noise, t, cond) = _setup(name, SkipPlan(6, 0, 0))
    view = make_view(spec.arch, transformer)
    x_t = view.pack(noisy_latents_and_target(x0, noise, t)[0])
    with torch.no_grad():
        ours = view(x_t, t, cond)
        theirs = full_model_forward(spec.arch, transformer, x_t, t, cond)
    assert torch.allclose(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ARCHS)
@pytest.mark.parametrize("n_front", [0, 2])
def test_front_skip_gives_the_full_models_loss_and_lora_gradients(name, n_front):
    """n = m = 0 and front-only skip: the front residual is exact, so loss and LoRA gradients equal the full model's."""
    plan = SkipPlan(6, n_front, 0)
    spec, transformer, trainable, batch = _setup(name, plan)
    loss_full, g_full, loss_skip, g_skip = full_and_skip(spec, transformer, trainable, plan, batch)
    assert abs(loss_skip.item() - loss_full.item()) / loss_full.item() <= 1e-5
    assert g_full.norm() > 0
    assert _rel(g_skip, g_full) <= 1e-5


@pytest.mark.parametrize("name", ARCHS)
def test_back_skip_keeps_the_step0_loss_and_reports_gradient_cosine(name, record_property):
    """With a back span, LoRA starts as identity (B = 0): the step-0 loss is the full model's. Gradients are only
    approximate (the back residual is constant): their cosine to the full model's is reported."""
    plan = SkipPlan(6, 1, 2)
    spec, transformer, trainable, batch = _setup(name, plan, random_b=False)
    loss_full, g_full, loss_skip, g_skip = full_and_skip(spec, transformer, trainable, plan, batch)
    assert abs(loss_skip.item() - loss_full.item()) / loss_full.item() <= 1e-5
    cosine = F.cosine_similarity(g_skip, g_full, dim=0).item()
    record_property("lora_grad_cosine_back_skip", cosine)
    print(f"{name}: LoRA gradient cosine, back span of 2 skipped vs full model = {cosine:.4f}")
    assert -1.0 <= cosine <= 1.0 and g_skip.norm() > 0


def test_residuals_cover_every_stream_crossing_a_span():
    plan = SkipPlan(6, 1, 2)
    spec, transformer, _, batch = _setup("flux-tiny", plan)
    r = compute_residuals(make_view(spec.arch, transformer), plan, *batch)
    assert set(r) == {"front.img", "front.txt", "back.img"}
    spec, transformer, _, batch = _setup("sana-tiny", plan)
    r = compute_residuals(make_view(spec.arch, transformer), plan, *batch)
    assert set(r) == {"front.img", "back.img"}


def test_skip_model_holds_no_skipped_block():
    plan = SkipPlan(6, 2, 1)
    spec, transformer, _, _ = _setup("flux-tiny", plan)
    skip = SkipModel(make_view(spec.arch, transformer, plan.kept), plan)
    n_params_skip = sum(p.numel() for p in skip.parameters())
    blocks = [m for i, m in enumerate(make_view(spec.arch, transformer).blocks) if i not in plan.kept]
    assert all(not any(p is q for q in skip.parameters()) for b in blocks for p in b.parameters())
    assert n_params_skip < sum(p.numel() for p in transformer.parameters())
