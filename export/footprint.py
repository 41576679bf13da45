"""A process's memory as phones count it, read from Linux /proc (the measurement side of ditskip_edge/runtime/footprint.py,
whose /proc reader and mlock guard it uses). Standard library only (no torch, no numpy).

What a phone counts (../shared/DEVICE_MEMORY.md): iOS kills an app on its physical footprint (dirty anonymous
memory, plus compressed), Android 17's limiter counts anonymous memory plus swap; clean file-backed pages (a
memory-mapped weights file that is only read) are reclaimable and count in neither. On Linux the nearest figures:

    rss_anon_bytes    RssAnon of /proc/PID/status: resident anonymous pages (heap, arenas, packed weights, stacks):
                      the phone's count
    rss_file_bytes    RssFile: resident file-backed pages (mapped .pte / .ptd, code of the loaded libraries):
                      clean, reclaimable, not counted by a phone unless locked
    rss_shmem_bytes   RssShmem: shared memory (tmpfs); normally 0 here
    locked_bytes      VmLck: pages locked with mlock (a locked file page cannot be reclaimed: ExecuTorch's Python
                      loader mlocks the files it maps, a phone app's Module in Mmap mode does not)
    private_dirty_bytes  Private_Dirty of /proc/PID/smaps_rollup: written private pages (anonymous or not)
    rss_peak_bytes    VmHWM: the kernel's peak of RSS (anonymous + file) since the process started

`Footprint.read(pid)` takes one reading; `PeakSampler` polls another process's status from a forked helper (the
ExecuTorch Python bindings hold the GIL during a call, so a thread in the measured process could not sample) and
returns the peaks of RssAnon and RssFile over a region; `drop_mlock()` makes later mlock calls of this process
fail, so ExecuTorch's loader (which ignores mlock errors) leaves the mapped program and data file clean and
reclaimable, as the C++ Module does in Mmap mode.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass

from ditskip_edge.runtime.footprint import read_kb_fields, refuse_mlock

_STATUS_FIELDS = {"RssAnon": "rss_anon_bytes", "RssFile": "rss_file_bytes", "RssShmem": "rss_shmem_bytes",
                  "VmRSS": "rss_bytes", "VmHWM": "rss_peak_bytes", "VmLck": "locked_bytes"}
_ROLLUP_FIELDS = {"Private_Dirty": "private_dirty_bytes", "Anonymous": "anonymous_bytes"}


@dataclass
class Footprint:
    rss_anon_bytes: int
    rss_file_bytes: int
    rss_shmem_bytes: int
    rss_bytes: int
    rss_peak_bytes: int
    locked_bytes: int
    private_dirty_bytes: int = -1       # -1: smaps_rollup not read
    anonymous_bytes: int = -1

    @staticmethod
    def read(pid: int | str = "self", rollup: bool = True) -> "Footprint":
        vals = read_kb_fields(f"/proc/{pid}/status", _STATUS_FIELDS)
        if rollup:
            try:
                vals.update(read_kb_fields(f"/proc/{pid}/smaps_rollup", _ROLLUP_FIELDS))
            except OSError:           # kernels before 4.14 have no smaps_rollup
                pass
        return Footprint(**vals)

    def minus(self, base: "Footprint") -> dict[str, int]:
        """Field-wise difference (this reading over a baseline), e.g. what loading or a step added."""
        a, b = asdict(self), asdict(base)
        return {k: a[k] - b[k] for k in a}

    def to_json(self) -> dict[str, int]:
        return asdict(self)


def drop_mlock() -> dict:
    """Make mlock fail for the rest of this process (runtime/footprint.refuse_mlock, never restored): ExecuTorch's
    MmapDataLoader in the Python bindings calls mlock with `UseMlockIgnoreErrors`, so after this the program and
    data files it maps stay clean, unlocked and reclaimable. Returns what was done (for the measurement record)."""
    _, had_cap = refuse_mlock()
    return {"rlimit_memlock": 0, "cap_ipc_lock_dropped": had_cap}


class PeakSampler:
    """Peak RssAnon / RssFile of process `pid` (default: this one) over a region, polled every `interval_s` by a
    forked helper process (no threads, no imports beyond the standard library).

        with PeakSampler() as s:
            module.forward_backward(...)
        s.peak["rss_anon_bytes"]

    A peak shorter than the interval can be missed; VmHWM (rss_peak_bytes) is the kernel's exact peak of the sum."""

    def __init__(self, pid: int | None = None, interval_s: float = 0.001):
        self.pid = pid or os.getpid()
        self.interval_s = interval_s
        self.peak: dict[str, int] = {}
        self._child = None

    def __enter__(self) -> "PeakSampler":
        r, w = os.pipe()
        stop_r, stop_w = os.pipe()
        child = os.fork()
        if child == 0:                                   # the helper: poll until the stop pipe has data
            os.close(r)
            os.close(stop_w)
            os.set_blocking(stop_r, False)
            peak = {"rss_anon_bytes": 0, "rss_file_bytes": 0, "rss_bytes": 0, "samples": 0}
            path = f"/proc/{self.pid}/status"
            try:
                while True:
                    v = read_kb_fields(path, _STATUS_FIELDS)
                    for k in ("rss_anon_bytes", "rss_file_bytes", "rss_bytes"):
                        peak[k] = max(peak[k], v[k])
                    peak["samples"] += 1
                    try:
                        if os.read(stop_r, 1):
                            break
                    except BlockingIOError:
                        pass
                    time.sleep(self.interval_s)
                os.write(w, json.dumps(peak).encode())
            finally:
                os._exit(0)
        os.close(w)
        os.close(stop_r)
        self._child, self._r, self._stop_w = child, r, stop_w
        return self

    def __exit__(self, *exc) -> None:
        os.write(self._stop_w, b"x")
        os.close(self._stop_w)
        chunks = []
        while True:
            b = os.read(self._r, 65536)
            if not b:
                break
            chunks.append(b)
        os.close(self._r)
        os.waitpid(self._child, 0)
        self.peak = json.loads(b"".join(chunks).decode())
        # the last reading after the region (the helper may have slept through the end)
        now = Footprint.read(self.pid, rollup=False)
        self.peak["rss_anon_bytes"] = max(self.peak["rss_anon_bytes"], now.rss_anon_bytes)
        self.peak["rss_file_bytes"] = max(self.peak["rss_file_bytes"], now.rss_file_bytes)
