"""What every trainer (eager, ExecuTorch runtime, ORT runtime) is told about a run. Torch-free: the runtime-only
trainers import it on a device."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class RunConfig:
    run_dir: Path
    steps: int | None = None          # None: the whole schedule
    checkpoint_every: int = 50
    resume: bool = True
    stop_after: int | None = None     # stop (as if interrupted) after this many steps in this call: for tests
