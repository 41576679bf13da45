"""QuantLinear / QuantConv2d: integer storage, error against the float layer, and a quantized SANA skip model that
still trains its LoRA."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from ditskip_edge.lora import LoraSpec, add_lora
from ditskip_edge.models.loading import build_transformer, resolve_spec
from ditskip_edge.models.text import encode_prompt
from ditskip_edge.models.views import block_names_of, make_view
from ditskip_edge.plan import SkipPlan
from ditskip_edge.quantize import QuantConv2d, QuantLinear, QuantSpec, quantize_frozen_layers
from ditskip_edge.skip_model import SkipModel, compute_residuals

# relative L2 error of the output against the float layer, random N(0, 1/fan_in) weights and N(0, 1) inputs:
# int8 per output channel ~ 1%; int4 in groups of 32 (or per channel) ~ 10%
CONV_REL_ERROR = {"int8": 0.02, "int4": 0.2}
# SANA-tiny skip model (1 front / 2 back of 6 blocks), every frozen linear and conv quantized: loss vs float
LOSS_REL_ERROR = {"int8": 0.01, "int4": 0.1}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def _conv(cin, cout, k, groups=1, bias=True, seed=0):
    torch.manual_seed(seed)
    c = nn.Conv2d(cin, cout, k, padding=k // 2, groups=groups, bias=bias)
    with torch.no_grad():
        c.weight.normal_(0, (c.weight[0].numel()) ** -0.5)
    return c.requires_grad_(False)


CONVS = {   # SANA GLUMBConv's three convolutions, and a grouped 3x3 whose K = 4 * 9 = 36 (group 32 does not divide)
    "pointwise": dict(cin=64, cout=256, k=1),
    "depthwise": dict(cin=160, cout=160, k=3, groups=160),
    "pointwise_nobias": dict(cin=128, cout=64, k=1, bias=False),
    "grouped3x3": dict(cin=16, cout=8, k=3, groups=4),
}


@pytest.mark.parametrize("precision", ["int8", "int4"])
@pytest.mark.parametrize("kind", list(CONVS))
def test_quant_conv_matches_the_float_conv(kind, precision):
    conv = _conv(**CONVS[kind])
    q = QuantConv2d(conv, QuantSpec(precision))
    x = torch.randn(2, conv.in_channels, 9, 7, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref, out = conv(x), q(x)
    assert out.shape == ref.shape
    assert _rel(out, ref) <= CONV_REL_ERROR[precision], (kind, precision, _rel(out, ref))
    assert q.weight.shape == conv.weight.shape


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_quant_conv_recompute_in_backward_gives_the_same_input_gradient(precision):
    conv = _conv(32, 48, 3, groups=2)
    plain, recomp = QuantConv2d(conv, QuantSpec(precision)), QuantConv2d(conv, QuantSpec(precision,
                                                                                         recompute_in_backward=True))
    x = torch.randn(1, 32, 6, 6, requires_grad=True)
    g = torch.randn(1, 48, 6, 6)
    plain(x).backward(g)
    g_plain, x.grad = x.grad.clone(), None
    recomp(x).backward(g)
    assert torch.allclose(x.grad, g_plain, rtol=1e-5, atol=1e-6)


def test_quantized_storage_is_a_fraction_of_fp32():
    conv = _conv(256, 512, 1)                                  # 131k weights: scales and bias are noise
    fp32 = sum(t.numel() * 4 for t in conv.state_dict().values())
    assert QuantConv2d(conv, QuantSpec("int8")).storage_bytes() <= fp32 / 3.5
    assert QuantConv2d(conv, QuantSpec("int4")).storage_bytes() <= fp32 / 6
    # depthwise 3x3: 9 weights per channel next to an fp32 scale and fp32 bias: 17 (int8) / 12.5 (int4) bytes
    # per channel against 40 (fp32); small either way (SANA-1600M: 0.3% of a block's conv weights)
    dw = _conv(1024, 1024, 3, groups=1024)
    fp32 = sum(t.numel() * 4 for t in dw.state_dict().values())
    assert QuantConv2d(dw, QuantSpec("int8")).storage_bytes() <= fp32 / 2.3
    assert QuantConv2d(dw, QuantSpec("int4")).storage_bytes() <= fp32 / 3.1


def _sana_skip(seed=0):
    spec = resolve_spec("sana-tiny")
    plan = SkipPlan(6, 1, 2)
    transformer = build_transformer(spec)
    names = block_names_of(transformer)
    trainable = add_lora(transformer, spec.arch, [names[i] for i in plan.kept], LoraSpec(rank=4, alpha=4.0))
    g = torch.Generator().manual_seed(123)
    with torch.no_grad():
        for n, p in transformer.named_parameters():
            if "lora_B" in n:                                  # non-zero B: lora_A gets gradients too
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    g = torch.Generator().manual_seed(seed)
    side = spec.train_px // spec.vae_scale_factor
    shape = (1, spec.transformer_config["in_channels"], side, side)
    x0, noise, t = torch.randn(shape, generator=g), torch.randn(shape, generator=g), torch.tensor([0.63])
    cond = encode_prompt(spec, "a photo of sks toy on a table")
    with torch.no_grad():
        residuals = compute_residuals(make_view(spec.arch, transformer), plan, x0, noise, t, cond)
    view = make_view(spec.arch, transformer, plan.kept)
    return transformer, view, SkipModel(view, plan), trainable, (x0, noise, t, cond, residuals)


def _loss_and_grads(transformer, skip, trainable, batch):
    params = dict(transformer.named_parameters())
    for p in transformer.parameters():
        p.grad = None
    loss = skip(*batch)
    loss.backward()
    return loss.detach(), torch.cat([params[n].grad.flatten() for n in trainable])


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_sana_skip_model_with_quantized_convs_trains_its_lora(precision):
    transformer, view, skip, trainable, batch = _sana_skip()
    loss_f, grads_f = _loss_and_grads(transformer, skip, trainable, batch)
    n_conv = sum(isinstance(m, nn.Conv2d) for m in view.modules())
    n_lin = sum(type(m) is nn.Linear and "lora_" not in n for n, m in view.named_modules())
    assert n_conv >= 3 * 3                                     # 3 kept blocks x GLUMBConv's three (+ patch embedder)
    n = quantize_frozen_layers(view, QuantSpec(precision, recompute_in_backward=True))
    assert n == n_conv + n_lin
    assert not any(type(m) in (nn.Conv2d, nn.Linear) and "lora_" not in name for name, m in view.named_modules())
    assert sum(isinstance(m, QuantConv2d) for m in view.modules()) == n_conv
    # peft's wrappers still hold a (quantized) base layer and their LoRA factors
    wrapped = [m for m in view.modules() if hasattr(m, "base_layer")]
    assert wrapped and all(isinstance(m.base_layer, QuantLinear) for m in wrapped)
    loss_q, grads_q = _loss_and_grads(transformer, skip, trainable, batch)
    assert torch.isfinite(loss_q) and abs(loss_q / loss_f - 1) <= LOSS_REL_ERROR[precision], (loss_q, loss_f)
    assert grads_q.norm() > 0 and torch.isfinite(grads_q).all()
    assert all(p.grad is not None and p.grad.abs().sum() > 0
               for n, p in transformer.named_parameters() if n in set(trainable))
    assert _rel(grads_q, grads_f) <= 5 * LOSS_REL_ERROR[precision], _rel(grads_q, grads_f)


def test_convs_can_be_left_float():
    conv_model = nn.Sequential(_conv(8, 8, 1), nn.Linear(8, 8).requires_grad_(False))
    assert quantize_frozen_layers(conv_model, QuantSpec("int8"), convs=False) == 1
    assert type(conv_model[0]) is nn.Conv2d and isinstance(conv_model[1], QuantLinear)
