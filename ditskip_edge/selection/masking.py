"""Cross-attention masking: in chosen blocks, the image tokens stop reading the text (PAPER.md section 3).

The masks wrap diffusers' own attention processors; they never re-implement FLUX or SANA attention.

- FLUX (double- and single-stream blocks, joint attention over cat([txt, img])): the wrapped `FluxAttnProcessor`
  is called with a boolean `attention_mask [1, 1, N_txt + N_img, N_txt + N_img]` that is False exactly where an
  image query meets a text key. Image queries still attend to every image key (no row is empty), text queries are
  untouched. The text length comes from the block's `encoder_hidden_states` (a forward pre-hook on the block),
  because single-stream blocks hand their processor the joined sequence only.
- SANA (`attn2`, cross-attention: queries = image tokens, keys/values = text): masking every text key of every
  image query leaves softmax nothing to normalise over. Our meaning: the attention weights over the text are all
  zero, so the weighted sum of text values is zero and `attn2` returns its output projection applied to zeros
  (= the projection's bias, `to_out(0)`). The text contributes nothing to the image in that block; self-attention
  and the feed-forward are untouched.

Blocks are indexed in the view's execution order (`models/views.py: block_names_of`). Blocks not in the masked
set keep their original processor object: they run exactly the code they ran before (bit-for-bit the same).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterable, Iterator

import torch
import torch.nn as nn

from ..runtime.errors import UserError
from ..models.specs import FLUX_ARCH
from ..models.views import DiTView


class FluxTextMaskProcessor:
    """Wraps a FLUX attention processor: image queries get no attention to text keys."""

    def __init__(self, inner):
        self.inner = inner
        self.n_txt: int | None = None       # set by the block's forward pre-hook before every call

    def __call__(self, attn, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None, image_rotary_emb=None) -> torch.Tensor:
        if self.n_txt is None:
            raise RuntimeError("FluxTextMaskProcessor: text length unknown (block pre-hook not installed)")
        n_txt = self.n_txt
        n_total = hidden_states.shape[1] + (0 if encoder_hidden_states is None else encoder_hidden_states.shape[1])
        keep = torch.ones(n_total, n_total, dtype=torch.bool, device=hidden_states.device)
        keep[n_txt:, :n_txt] = False                      # rows: image queries, cols: text keys
        keep = keep[None, None]                           # [1, 1, N, N]
        if attention_mask is not None:
            keep = keep & attention_mask if attention_mask.dtype == torch.bool else \
                attention_mask.masked_fill(~keep, float("-inf"))
        return self.inner(attn, hidden_states, encoder_hidden_states, keep, image_rotary_emb)


class SanaTextMaskProcessor:
    """Replaces a SANA cross-attention processor: zero attention weight on every text key (see module doc)."""

    def __init__(self, inner):
        self.inner = inner

    def __call__(self, attn, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        weighted_values = hidden_states.new_zeros(*hidden_states.shape[:2], attn.to_out[0].in_features)
        return attn.to_out[1](attn.to_out[0](weighted_values))


def _text_attention(arch: str, block: nn.Module) -> nn.Module:
    attn = block.attn if arch == FLUX_ARCH else getattr(block, "attn2", None)
    if attn is None:
        raise UserError(f"block {type(block).__name__} has no text attention to mask")
    return attn


@contextmanager
def text_masked(view: DiTView, block_indices: Iterable[int]) -> Iterator[None]:
    """Inside the context, the view's blocks at `block_indices` (positions in view.blocks) do not let image tokens
    read the text. The original processors are restored on exit, also after an error."""
    idx = sorted(set(int(i) for i in block_indices))
    for i in idx:
        if not 0 <= i < len(view.blocks):
            raise UserError(f"masked block index {i} out of range: the view has {len(view.blocks)} blocks")
    restore: list[tuple[nn.Module, object]] = []
    hooks = []
    try:
        for i in idx:
            block = view.blocks[i]
            attn = _text_attention(view.arch, block)
            original = attn.processor
            if view.arch == FLUX_ARCH:
                wrapper = FluxTextMaskProcessor(original)

                def record_text_length(_module, args, kwargs, wrapper=wrapper):
                    wrapper.n_txt = int(kwargs["encoder_hidden_states"].shape[1])

                hooks.append(block.register_forward_pre_hook(record_text_length, with_kwargs=True))
            else:
                wrapper = SanaTextMaskProcessor(original)
            restore.append((attn, original))
            attn.processor = wrapper
        yield
    finally:
        for h in hooks:
            h.remove()
        for attn, original in restore:
            attn.processor = original
