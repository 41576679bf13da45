"""Query-chunked attention for inference programs: the same scaled_dot_product_attention, one block of queries at a
time, so a program holds one chunk's scores [B, H, chunk, S_k] instead of all [B, H, S_q, S_k].

    with chunked_attention(1024):
        out = block(...)            # every F.scaled_dot_product_attention call inside runs per query chunk

The diffusers models are untouched: a TorchFunctionMode intercepts the call their attention dispatch makes
(`torch.nn.functional.scaled_dot_product_attention`) and returns the concatenation of the chunks' outputs, which is
the same attention (each query's row of the softmax depends on its own scores only). torch.export traces through it,
so an exported program gets the chunks unrolled and its memory plan reuses one chunk's scores for the next. Used by
the generation programs (FLUX at 1024 px: 4608 tokens, whose full scores are 1.9 GiB at 24 heads) and by the
planner's trace of them (memory_estimate/generation.py), so both count the same program.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode


class _ChunkedSDPA(TorchFunctionMode):
    def __init__(self, chunk: int):
        super().__init__()
        self.chunk = int(chunk)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is not F.scaled_dot_product_attention:
            return func(*args, **kwargs)
        names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale")
        kwargs.update(zip(names, args))                  # positional or by name, as the caller wrote it
        q, k, v = kwargs.pop("query"), kwargs.pop("key"), kwargs.pop("value")
        n = q.shape[-2]
        if n <= self.chunk or kwargs.get("is_causal"):
            return func(q, k, v, **kwargs)
        mask = kwargs.pop("attn_mask", None)
        outs = []
        for i in range(0, n, self.chunk):
            m = mask
            if m is not None and m.dim() >= 2 and m.shape[-2] == n:
                m = m[..., i:i + self.chunk, :]
            outs.append(func(q[..., i:i + self.chunk, :], k, v, attn_mask=m, **kwargs))
        return torch.cat(outs, dim=-2)


@contextlib.contextmanager
def chunked_attention(chunk: int | None):
    """Attention in query chunks of `chunk` tokens inside the block (None: unchanged)."""
    if not chunk:
        yield
        return
    if chunk < 1:
        raise ValueError(f"attention chunk {chunk}: expected a positive number of query tokens")
    with _ChunkedSDPA(chunk):
        yield
