"""Frozen weights of the kept blocks, quantized with real integer storage and dequantized inside the graph.

torchao computes the quantization (symmetric `choose_qparams_affine` + `quantize_affine`, per output channel for
int8, per group of `group_size` input features for int4). The storage is ours, because what the device runtimes
need differs from torchao's tensor subclasses (STACK.md: torchao's int4 keeps one value per byte, and in ONNX its
weights are baked as float constants):
  - int8: codes int8 [O, I], scales fp32 [O, 1]
  - int4: codes packed two per byte uint8 [O, I/2] (low nibble = even column), offset by 8; scales fp32 [O, I/g, 1]
int8 uses its codes as integers (issue 57): the per-output-channel scale commutes with the matmul, so forward is
(x @ float(codes).T) * s + b and the input gradient (grad_y * s) @ float(codes). The only weight-sized tensor is the
exact int8 -> fp32 cast of the codes (no second fp32 copy for codes * s); the scale multiplies the output, tokens x O
instead of O x K. int4 dequantizes with plain ops (unpacking with remainder/div, no bitwise ops: portable ExecuTorch
kernels and ONNX opset 16 take them) and calls F.linear: moving its per-group scales to the output would need one
partial product per group (K/g x tokens x O, larger than the O x K weight whenever tokens > g), so it does not pay.
LoRA layers (peft) wrap the quantized base unchanged.

Frozen nn.Conv2d (SANA's GLUMBConv: 1x1 conv_inverted / conv_point, depthwise 3x3 conv_depth; the patch embedder)
get the same scheme over the flattened weight [O, K], K = in/groups * kh * kw (QuantConv2d):
  - int8: codes int8 [O, K], scales fp32 [O, 1]
  - int4: codes packed two per byte uint8 [ceil(O*K/2)] over the flattened [O, K] codes (row-major; a depthwise
    3x3 has K = 9, odd, so pairs may straddle rows; an odd total is padded with one zero nibble), offset by 8;
    scales fp32 [O, K/g, 1] with g = group_size when it divides K, else g = K (per output channel)
and forward is F.conv2d with the module's stride / padding / dilation / groups: at int8 on the cast codes with the
scale on the output channels (as the linear), at int4 on the dequantized weight.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .runtime.contract import PROGRAM_PRECISIONS


# int8 layers multiply the scale into the output (module docstring); False restores the weight dequantization
# (x @ (float(codes) * s).T), for before/after measurements only (environment DITSKIP_INT8_SCALE_ON_OUTPUT=0).
INT8_SCALE_ON_OUTPUT = os.environ.get("DITSKIP_INT8_SCALE_ON_OUTPUT", "1") != "0"


@dataclass(frozen=True)
class QuantSpec:
    precision: str = "int8"       # frozen weights: "int8" | "int4" | "fp32" (fp32: no quantization)
    group_size: int = 32          # int4 only: input features per scale
    # eager only: recompute the dequantized weight in backward instead of letting autograd save it (F.linear saves
    # its weight for the input gradient: without this every kept linear keeps an fp32 copy of its weight until
    # backward, more than the fp32 model itself). Off by default: exporters trace the plain graph.
    recompute_in_backward: bool = False

    def __post_init__(self):
        if self.precision not in PROGRAM_PRECISIONS:
            raise ValueError(f"precision must be one of {PROGRAM_PRECISIONS}, got {self.precision!r}")

    @property
    def bits(self) -> int | None:
        """Integer storage bits (8 or 4), None for fp32."""
        return {"int8": 8, "int4": 4}.get(self.precision)


def _symmetric_codes(w: torch.Tensor, block: tuple[int, int], bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    from torchao.quantization.quant_primitives import MappingType, choose_qparams_affine, quantize_affine
    qmin, qmax = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    scale, zero = choose_qparams_affine(w, MappingType.SYMMETRIC, block, torch.int8, qmin, qmax,
                                        eps=1e-12, scale_dtype=torch.float32)
    codes = quantize_affine(w, block, scale, zero, torch.int8, qmin, qmax)
    return codes, scale.float()


def _unpack_int4(packed: torch.Tensor, n: int) -> torch.Tensor:
    """Packed bytes (low nibble first) -> the first n codes as fp32 in -8..7, flat. Plain ops only (remainder / div,
    no bitwise). Intermediates are dropped as soon as they are used: eager (and the planner's trace) then holds about
    2 fp32 weights at once here instead of 4.5 (int32 bytes, both nibbles and their stack alive together)."""
    p = packed.reshape(-1).to(torch.int32)
    lo = torch.remainder(p, 16)
    hi = torch.div(p, 16, rounding_mode="floor")
    del p
    q = torch.stack([lo, hi], dim=-1).reshape(-1)
    del lo, hi
    if q.shape[0] != n:
        q = q[:n]
    q = q.to(torch.float32)
    return q - 8.0



def _encode_rows(w2: torch.Tensor, spec: QuantSpec) -> tuple[dict[str, torch.Tensor], int]:
    """Quantize a weight matrix [O, K] row-wise: the buffers to register and the group size (layouts: module
    docstring; int4 codes are packed over the flattened matrix, padded with one zero nibble if O*K is odd)."""
    o, k = w2.shape
    if spec.bits == 8:
        codes, scale = _symmetric_codes(w2, (1, k), 8)
        return {"w_codes": codes.contiguous(), "w_scale": scale.reshape(o, 1)}, k
    if spec.bits == 4:
        g = spec.group_size if k % spec.group_size == 0 else k
        codes, scale = _symmetric_codes(w2, (1, g), 4)
        u = (codes.to(torch.int16) + 8).to(torch.uint8).reshape(-1)                  # 0..15, [O*K]
        if u.numel() % 2:
            u = torch.cat([u, torch.full((1,), 8, dtype=torch.uint8)])                # pad nibble (code 0)
        return {"w_packed": (u[0::2] + u[1::2] * 16).contiguous(), "w_scale": scale.reshape(o, k // g, 1)}, g
    raise ValueError(f"integer storage needs bits 8 or 4, got {spec.bits}")


def _decode_rows(layer: nn.Module, o: int, k: int) -> torch.Tensor:
    """The dequantized fp32 matrix [O, K] of a layer holding _encode_rows' buffers."""
    if layer.bits == 8:
        return layer.w_codes.to(torch.float32) * layer.w_scale
    q = _unpack_int4(layer.w_packed, o * k)
    return (q.reshape(o, k // layer.group, layer.group) * layer.w_scale).reshape(o, k)


def _codes_float(layer: nn.Module) -> torch.Tensor:
    """int8 codes as fp32 (exact), the only weight-sized tensor an int8 layer makes."""
    return layer.w_codes.to(torch.float32)


def _channel_scale(layer: nn.Module, ndim: int) -> torch.Tensor:
    """The int8 per-output-channel scale shaped to multiply an output whose channels are dim -1 (linear, ndim 0) or
    dim 1 of an ndim-D tensor (convolution)."""
    s = layer.w_scale.reshape(-1)
    return s if ndim == 0 else s.reshape([1, -1] + [1] * (ndim - 2))


def _scaled_linear(x: torch.Tensor, layer: nn.Module) -> torch.Tensor:
    """int8: (x @ float(codes).T) * s (+ b); autograd's input gradient is then (grad_y * s) @ float(codes)."""
    y = F.linear(x, _codes_float(layer)) * _channel_scale(layer, 0)
    return y if layer.bias is None else y + layer.bias


class _DequantLinear(torch.autograd.Function):
    """y = x W^T + b with W (int8: the cast codes) made in forward and again in backward; saves no weight-sized
    tensor."""

    @staticmethod
    def forward(ctx, x, layer):
        ctx.layer = layer
        if layer.bits == 8 and INT8_SCALE_ON_OUTPUT:
            return _scaled_linear(x, layer)
        return F.linear(x, layer.dequantized_weight(), layer.bias)

    @staticmethod
    def backward(ctx, grad_out):
        m = ctx.layer
        if m.bits == 8 and INT8_SCALE_ON_OUTPUT:
            return (grad_out * _channel_scale(m, 0)) @ _codes_float(m), None
        return grad_out @ m.dequantized_weight(), None


class QuantLinear(nn.Module):
    """A frozen nn.Linear with integer weight storage. Buffers only: nothing here trains."""

    def __init__(self, linear: nn.Linear, spec: QuantSpec):
        super().__init__()
        w = linear.weight.detach().float()
        self.out_features, self.in_features = w.shape
        self.bits = spec.bits
        self.recompute_in_backward = spec.recompute_in_backward
        if spec.bits == 4 and self.in_features % 2:
            raise ValueError(f"int4 packing needs an even input width, got {self.in_features}")
        buffers, self.group = _encode_rows(w, spec)
        if spec.bits == 4:      # rows never straddle a byte when I is even: keep the [O, I/2] layout
            buffers["w_packed"] = buffers["w_packed"].reshape(self.out_features, self.in_features // 2)
        for name, value in buffers.items():
            self.register_buffer(name, value)
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float().clone())

    # peft's LoRA wrapper reads base_layer.weight for shapes and dtype
    @property
    def weight(self) -> torch.Tensor:
        return self.dequantized_weight()

    def dequantized_weight(self) -> torch.Tensor:
        return _decode_rows(self, self.out_features, self.in_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recompute_in_backward and x.requires_grad and torch.is_grad_enabled():
            return _DequantLinear.apply(x, self)
        if self.bits == 8 and INT8_SCALE_ON_OUTPUT:
            return _scaled_linear(x, self)
        return F.linear(x, self.dequantized_weight(), self.bias)

    def storage_bytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self.buffers())


class _DequantConv2d(torch.autograd.Function):
    """F.conv2d with W dequantized in forward and again in backward (input gradient only; W and b are frozen)."""

    @staticmethod
    def forward(ctx, x, layer):
        ctx.layer = layer
        ctx.input_shape = x.shape
        return layer(x)

    @staticmethod
    def backward(ctx, grad_out):
        m = ctx.layer
        if m.bits == 8 and INT8_SCALE_ON_OUTPUT:
            w, grad_out = _codes_float(m).reshape(m.weight_shape), grad_out * _channel_scale(m, grad_out.dim())
        else:
            w = m.dequantized_weight()
        gx = torch.nn.grad.conv2d_input(ctx.input_shape, w, grad_out, stride=m.stride,
                                        padding=m.padding, dilation=m.dilation, groups=m.groups)
        return gx, None


class QuantConv2d(nn.Module):
    """A frozen nn.Conv2d with integer weight storage (layouts: module docstring). Buffers only."""

    def __init__(self, conv: nn.Conv2d, spec: QuantSpec):
        super().__init__()
        if conv.padding_mode != "zeros" or isinstance(conv.padding, str):
            raise ValueError(f"QuantConv2d takes zero padding given as numbers, got {conv.padding_mode} / "
                             f"{conv.padding!r}")
        w = conv.weight.detach().float()
        self.out_channels, self.in_channels = conv.out_channels, conv.in_channels
        self.kernel_size, self.stride, self.padding = tuple(conv.kernel_size), tuple(conv.stride), tuple(conv.padding)
        self.dilation, self.groups = tuple(conv.dilation), conv.groups
        self.weight_shape = tuple(w.shape)                                   # [O, I/groups, kh, kw]
        o = w.shape[0]
        k = w[0].numel()
        self.flat_in = k
        self.bits = spec.bits
        self.recompute_in_backward = spec.recompute_in_backward
        buffers, self.group = _encode_rows(w.reshape(o, k), spec)
        for name, value in buffers.items():
            self.register_buffer(name, value)
        self.register_buffer("bias", None if conv.bias is None else conv.bias.detach().float().clone())

    # peft's LoRA Conv2d wrapper reads base_layer.weight for shapes and dtype
    @property
    def weight(self) -> torch.Tensor:
        return self.dequantized_weight()

    def dequantized_weight(self) -> torch.Tensor:
        return _decode_rows(self, self.weight_shape[0], self.flat_in).reshape(self.weight_shape)

    def _conv(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return F.conv2d(x, w, bias, self.stride, self.padding, self.dilation, self.groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recompute_in_backward and x.requires_grad and torch.is_grad_enabled():
            return _DequantConv2d.apply(x, self)
        if self.bits == 8 and INT8_SCALE_ON_OUTPUT:      # the scale on the output channels, as the linear's
            y = self._conv(x, _codes_float(self).reshape(self.weight_shape), None) * _channel_scale(self, x.dim())
            return y if self.bias is None else y + self.bias.reshape(_channel_scale(self, x.dim()).shape)
        return self._conv(x, self.dequantized_weight(), self.bias)

    def storage_bytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self.buffers())


QUANT_LAYERS = (QuantLinear, QuantConv2d)


def quantize_frozen_layers(module: nn.Module, spec: QuantSpec, convs: bool = True) -> int:
    """Replace every frozen nn.Linear (QuantLinear) and, with `convs`, every frozen nn.Conv2d (QuantConv2d) under
    `module`: not LoRA's own layers; a peft-wrapped layer's base_layer is replaced inside the wrapper. Returns the
    number replaced. Precision fp32 leaves the module as it is."""
    if spec.bits is None:
        return 0
    kinds = {nn.Linear: QuantLinear, **({nn.Conv2d: QuantConv2d} if convs else {})}
    n = 0
    for name, parent in list(module.named_modules()):
        for child_name, child in list(parent.named_children()):
            cls = kinds.get(type(child))
            if cls is None or "lora_" in f"{name}.{child_name}":
                continue
            if child.weight.requires_grad:
                continue
            setattr(parent, child_name, cls(child, spec))
            n += 1
    return n
