"""Block rematerialization: which kept blocks' forward the training step recomputes in backward.

One setting for every place that names it (the exporter's graph pass, `compile --remat`, the memory estimate's
`estimate --remat`, the manifest's program entry):

    "none"      activations saved from forward to backward (no recompute)
    "blocks"    a checkpoint at every kept block's input; each block's internals recomputed just before its gradients
    "every:K"   a checkpoint every K kept blocks; K blocks recomputed together (K >= 1; "every:1" is "blocks")
"""

from __future__ import annotations

from dataclasses import dataclass

from .runtime.errors import UserError

REMAT_CHOICES = "none | blocks | every:K"


@dataclass(frozen=True)
class RematSpec:
    every: int = 0                  # 0: no remat; K: one checkpoint every K kept blocks

    @staticmethod
    def parse(text: str | None) -> "RematSpec":
        """'none' | 'blocks' | 'every:K' (K >= 1); anything else is a UserError naming the value."""
        if text in ("none", None):
            return RematSpec(0)
        if text == "blocks":
            return RematSpec(1)
        head, _, k = str(text).partition(":")
        if head == "every" and k.isdigit() and int(k) >= 1:
            return RematSpec(int(k))
        raise UserError(f"remat {text!r}: expected none, blocks or every:K (K >= 1)")

    @property
    def enabled(self) -> bool:
        return self.every > 0

    def __str__(self) -> str:
        return "none" if self.every == 0 else "blocks" if self.every == 1 else f"every:{self.every}"
