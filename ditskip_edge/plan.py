"""The skip plan: skip the first n blocks (front span) and the last m blocks (back span); train the kept blocks.

Block indices are positions in the model's execution order (FLUX: 19 double-stream then 38 single-stream blocks;
SANA: its transformer blocks). `chosen_by` records how the plan was made ("explicit", or "selection" with the
selection's scores).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .runtime.errors import UserError


@dataclass(frozen=True)
class SkipPlan:
    num_blocks: int
    n_front: int
    n_back: int
    chosen_by: str = "explicit"
    selection: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self):
        if self.n_front < 0 or self.n_back < 0:
            raise UserError(f"skip plan: front {self.n_front} and back {self.n_back} must be >= 0")
        if self.n_front + self.n_back >= self.num_blocks:
            raise UserError(f"skip plan leaves no kept block: front {self.n_front} + back {self.n_back} "
                            f">= {self.num_blocks} blocks")

    @property
    def kept(self) -> list[int]:
        return list(range(self.n_front, self.num_blocks - self.n_back))

    @property
    def front(self) -> list[int]:
        return list(range(self.n_front))

    @property
    def back(self) -> list[int]:
        return list(range(self.num_blocks - self.n_back, self.num_blocks))

    @property
    def skip_ratio(self) -> float:
        return (self.n_front + self.n_back) / self.num_blocks

    def to_json(self) -> dict:
        d = asdict(self)
        d["kept"] = [self.n_front, self.num_blocks - self.n_back]   # half-open range of kept block indices
        return d

    @staticmethod
    def from_json(d: dict) -> "SkipPlan":
        return SkipPlan(int(d["num_blocks"]), int(d["n_front"]), int(d["n_back"]), d.get("chosen_by", "explicit"),
                        dict(d.get("selection", {})))


def skip_budget(num_blocks: int, skip_ratio: float) -> int:
    """Number of blocks to skip for a ratio in (0, 1)."""
    if not 0.0 < skip_ratio < 1.0:
        raise UserError(f"skip ratio must be in (0, 1), got {skip_ratio}")
    k = int(round(skip_ratio * num_blocks))
    if k <= 0 or k >= num_blocks:
        raise UserError(f"skip ratio {skip_ratio} of {num_blocks} blocks gives budget {k}: "
                        f"need 0 < k < {num_blocks}")
    return k
