"""FLUX's rotary embedding with its pair rotation as a matmul, for exported programs.

diffusers' apply_rotary_emb (use_real, unbind_dim -1: FLUX) builds the rotated pairs (-x[2k+1], x[2k]) with two
selects, a negation and a stack along a last dimension of size 2: in an ExecuTorch program that is a cat and slices
of one element per row on the portable kernels, forward, recompute and backward (about 6% of the FLUX layout's
training step in paired runs: benchmarks/results/step_alternate_flux_layout.txt, `rotary_stack` against `base`). Here the same rotation is x @ R with R [D, D] holding one +1 or -1 per column:

    x_rot[..., 2k] = x[..., 2k + 1] * R[2k + 1, 2k] = -x[..., 2k + 1]
    x_rot[..., 2k + 1] = x[..., 2k] * R[2k, 2k + 1] = x[..., 2k]

one matmul (an XNNPACK bmm in the program; its gradient x_grad @ R.T another), each output one product by +-1 plus
zeros: the same values (a zero's sign aside). The rest of the formula is diffusers' own.

    with rotary_as_matmul():
        ep = torch.export.export(...)   # FLUX's attention processors call the function below

Other models and rotary variants (complex, unbind_dim -2) go to diffusers' function unchanged.
"""

from __future__ import annotations

import contextlib

import torch


def pair_rotation(dim: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """R [dim, dim] with x @ R = stack([-x[..., 1::2], x[..., 0::2]], -1).flatten(-2)."""
    r = torch.zeros(dim, dim, dtype=dtype)
    k = torch.arange(0, dim, 2)
    r[k + 1, k] = -1.0
    r[k, k + 1] = 1.0
    return r


_ROTATIONS: dict[tuple[int, torch.dtype], torch.Tensor] = {}


def _constant_rotation(dim: int, dtype: torch.dtype) -> torch.Tensor:
    """pair_rotation as a real tensor made outside any tracing, so an exported program holds it as a constant (made
    inside torch.export it would be zeros + index_put run by the program on every call)."""
    key = (dim, dtype)
    if key not in _ROTATIONS:
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
        with unset_fake_temporarily(), disable_proxy_modes_tracing():
            _ROTATIONS[key] = pair_rotation(dim, dtype)
    return _ROTATIONS[key]


def _rotary_matmul(original):
    def apply_rotary_emb(x, freqs_cis, use_real=True, use_real_unbind_dim=-1, sequence_dim=2):
        if not use_real or use_real_unbind_dim != -1 or sequence_dim not in (1, 2):
            return original(x, freqs_cis, use_real, use_real_unbind_dim, sequence_dim)
        cos, sin = freqs_cis                                    # [S, D]
        index = (None, None, slice(None), slice(None)) if sequence_dim == 2 else (None, slice(None), None, slice(None))
        cos, sin = cos[index].to(x.device), sin[index].to(x.device)
        r = _constant_rotation(x.shape[-1], x.dtype).to(x.device)
        if sequence_dim == 1:       # [B, S, H, D]: rotated in attention's [B, H, S, D] layout, where its gradient is
            x_rot = (x.transpose(1, 2) @ r).transpose(1, 2)         # contiguous (a matmul's reads it as rows)
        else:
            x_rot = x @ r
        return (x.float() * cos + x_rot.float() * sin).to(x.dtype)
    return apply_rotary_emb


@contextlib.contextmanager
def rotary_as_matmul():
    """While active, diffusers' FLUX attention processors rotate pairs with a matmul (see the module docstring)."""
    from diffusers.models.transformers import transformer_flux
    original = transformer_flux.apply_rotary_emb
    transformer_flux.apply_rotary_emb = _rotary_matmul(original)
    try:
        yield
    finally:
        transformer_flux.apply_rotary_emb = original
