"""A one-line progress bar on stderr (DITSKIP_PROGRESS=0 or enabled=False turns it off)."""

from __future__ import annotations

import os
import sys
import time


class Progress:
    def __init__(self, label: str, total: int, start: int = 0, enabled: bool = True):
        self.label, self.total, self.done, self.first = label, total, start, start
        self.enabled = enabled and os.environ.get("DITSKIP_PROGRESS", "1") != "0"
        self.t0 = time.perf_counter()

    def update(self, loss: float | None = None) -> None:
        self.done += 1
        if not self.enabled:
            return
        rate = (self.done - self.first) / max(time.perf_counter() - self.t0, 1e-9)
        bar = "#" * int(30 * self.done / max(self.total, 1))
        tail = "" if loss is None else f" loss {loss:.4f}"
        sys.stderr.write(f"\r{self.label} [{bar:<30}] {self.done}/{self.total}{tail} {rate:.2f}/s")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self.done > self.first:
            sys.stderr.write("\n")
            sys.stderr.flush()
