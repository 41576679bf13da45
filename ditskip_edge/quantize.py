"""Frozen weights of the kept blocks, quantized with real integer storage and dequantized inside the graph.

torchao computes the quantization (symmetric `choose_qparams_affine` + `quantize_affine`, per output channel for
int8, per group of `group_size` input features for int4). The storage is ours, because what the device runtimes
need differs from torchao's tensor subclasses (STACK.md: torchao's int4 keeps one value per byte, and in ONNX its
weights are baked as float constants):
  - int8: codes int8 [O, I], scales fp32 [O, 1]
  - int4: codes packed two per byte uint8 [O, I/2] (low nibble = even column), offset by 8; scales fp32 [O, I/g, 1]
Forward dequantizes with plain ops (int4 unpacking with remainder/div, no bitwise ops: portable ExecuTorch
kernels and ONNX opset 16 take them) and calls F.linear. LoRA layers (peft) wrap the quantized base unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class QuantSpec:
    bits: int = 8                 # 8 | 4 | 16 (16 = keep float: no quantization)
    group_size: int = 32          # int4 only: input features per scale
    # eager only: recompute the dequantized weight in backward instead of letting autograd save it (F.linear saves
    # its weight for the input gradient: without this every kept linear keeps an fp32 copy of its weight until
    # backward, more than the fp32 model itself). Off by default: exporters trace the plain graph.
    recompute_in_backward: bool = False

    def __post_init__(self):
        if self.bits not in (4, 8, 16):
            raise ValueError(f"bits must be 4, 8 or 16, got {self.bits}")


def _symmetric_codes(w: torch.Tensor, block: tuple[int, int], bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    from torchao.quantization.quant_primitives import MappingType, choose_qparams_affine, quantize_affine
    qmin, qmax = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    scale, zero = choose_qparams_affine(w, MappingType.SYMMETRIC, block, torch.int8, qmin, qmax,
                                        eps=1e-12, scale_dtype=torch.float32)
    codes = quantize_affine(w, block, scale, zero, torch.int8, qmin, qmax)
    return codes, scale.float()


class _DequantLinear(torch.autograd.Function):
    """y = x W^T + b with W dequantized in forward and again in backward; saves no weight-sized tensor."""

    @staticmethod
    def forward(ctx, x, layer):
        ctx.layer = layer
        return F.linear(x, layer.dequantized_weight(), layer.bias)

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out @ ctx.layer.dequantized_weight(), None


class QuantLinear(nn.Module):
    """A frozen nn.Linear with integer weight storage. Buffers only: nothing here trains."""

    def __init__(self, linear: nn.Linear, spec: QuantSpec):
        super().__init__()
        w = linear.weight.detach().float()
        self.out_features, self.in_features = w.shape
        self.bits = spec.bits
        self.recompute_in_backward = spec.recompute_in_backward
        if spec.bits == 8:
            codes, scale = _symmetric_codes(w, (1, self.in_features), 8)
            self.register_buffer("w_codes", codes.contiguous())                      # int8 [O, I]
            self.register_buffer("w_scale", scale.reshape(self.out_features, 1))    # [O, 1]
            self.group = self.in_features
        elif spec.bits == 4:
            g = spec.group_size if self.in_features % spec.group_size == 0 else self.in_features
            if self.in_features % 2:
                raise ValueError(f"int4 packing needs an even input width, got {self.in_features}")
            codes, scale = _symmetric_codes(w, (1, g), 4)
            u = (codes.to(torch.int16) + 8).to(torch.uint8)                           # 0..15
            self.register_buffer("w_packed", (u[:, 0::2] + u[:, 1::2] * 16).contiguous())  # uint8 [O, I/2]
            self.register_buffer("w_scale", scale.reshape(self.out_features, self.in_features // g, 1))
            self.group = g
        else:
            raise ValueError("QuantLinear needs bits 8 or 4")
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float().clone())

    # peft's LoRA wrapper reads base_layer.weight for shapes and dtype
    @property
    def weight(self) -> torch.Tensor:
        return self.dequantized_weight()

    def dequantized_weight(self) -> torch.Tensor:
        o, i = self.out_features, self.in_features
        if self.bits == 8:
            return self.w_codes.to(torch.float32) * self.w_scale
        p = self.w_packed.to(torch.int32)
        lo = torch.remainder(p, 16)
        hi = torch.div(p, 16, rounding_mode="floor")
        q = torch.stack([lo, hi], dim=-1).reshape(o, i).to(torch.float32) - 8.0
        return (q.reshape(o, i // self.group, self.group) * self.w_scale).reshape(o, i)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recompute_in_backward and x.requires_grad and torch.is_grad_enabled():
            return _DequantLinear.apply(x, self)
        return F.linear(x, self.dequantized_weight(), self.bias)

    def storage_bytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self.buffers())


def quantize_frozen_linears(module: nn.Module, spec: QuantSpec) -> int:
    """Replace every frozen nn.Linear under `module` (not LoRA's own layers; a peft-wrapped layer's base_layer is
    replaced inside the wrapper) by a QuantLinear. Returns the number replaced. bits=16 leaves the module as it is."""
    if spec.bits == 16:
        return 0
    n = 0
    for name, parent in list(module.named_modules()):
        for child_name, child in list(parent.named_children()):
            if type(child) is not nn.Linear or "lora_" in f"{name}.{child_name}":
                continue
            if child.weight.requires_grad:
                continue
            setattr(parent, child_name, QuantLinear(child, spec))
            n += 1
    return n
