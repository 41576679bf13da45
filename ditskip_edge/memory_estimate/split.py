"""Which blocks a skip ratio skips: the front / back split.

- FLUX (57 blocks) at the paper's ratios: its reported splits (PAPER.md section 3), chosen there by
  cross-attention masking: 30% -> (7, 10), 40% -> (13, 10), 50% -> (19, 10).
- Otherwise the documented default, shaped like those splits (the back span stays about 10/57 of the model,
  the front span takes the rest of the budget): back = min(round(blocks * 10 / 57), k), front = k - back, with
  k = round(ratio * blocks). It is a planning default, not a selection: `ditskip-edge compile --skip-ratio` selects.
- An explicit (front, back) always wins.
"""

from __future__ import annotations

from ..runtime.errors import UserError
from ..plan import SkipPlan, skip_budget

PAPER_FLUX_SPLITS = {0.3: (7, 10), 0.4: (13, 10), 0.5: (19, 10)}
FLUX_DEV_BLOCKS = 57
BACK_FRACTION = 10 / 57


def split_for_ratio(num_blocks: int, skip_ratio: float | None, n_front: int | None = None,
                    n_back: int | None = None) -> SkipPlan:
    if n_front is not None or n_back is not None:
        if skip_ratio is not None:
            raise UserError("give either --skip-ratio or --skip-front/--skip-back, not both")
        return SkipPlan(num_blocks, n_front or 0, n_back or 0, "explicit")
    if skip_ratio is None:
        raise UserError("give --skip-ratio R (0 < R < 1) or --skip-front N --skip-back M")
    k = skip_budget(num_blocks, skip_ratio)
    if num_blocks == FLUX_DEV_BLOCKS:
        for r, (front, back) in PAPER_FLUX_SPLITS.items():
            if abs(skip_ratio - r) < 1e-6:
                return SkipPlan(num_blocks, front, back, "paper")
    back = min(int(round(num_blocks * BACK_FRACTION)), k)
    return SkipPlan(num_blocks, k - back, back, "default")
