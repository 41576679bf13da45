"""Memory as a phone counts it, read from the kernel (Linux; elsewhere every figure is None).

A phone kills an app on its footprint: dirty anonymous memory (iOS phys_footprint, Android 17's limiter: anonymous +
swap). Clean file-backed pages (a memory-mapped weights file only read) are not counted and are dropped under
pressure instead. On Linux `/proc/<pid>/status` gives both apart:

    RssAnon   resident anonymous memory: the stand-in for the phone's footprint
    RssFile   resident file-backed pages (mapped programs, weights, shared libraries)
    RssShmem  resident shared memory
    VmData    private writable address space (what RLIMIT_DATA caps; includes untouched reservations)
    VmLck     locked memory (mlock'ed pages cannot be reclaimed: they count as if dirty)

Every figure is bytes. `Footprint.since(baseline)` gives the growth over a baseline (the loaded runtime).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

FIELDS = {"RssAnon": "anon_bytes", "RssFile": "file_bytes", "RssShmem": "shmem_bytes", "VmData": "data_bytes",
          "VmLck": "locked_bytes", "VmHWM": "peak_rss_bytes"}


@dataclass(frozen=True)
class Footprint:
    anon_bytes: int            # dirty anonymous resident memory: what a phone counts
    file_bytes: int            # clean file-backed resident memory: reported apart
    shmem_bytes: int
    data_bytes: int
    locked_bytes: int
    peak_rss_bytes: int

    def since(self, baseline: "Footprint") -> dict:
        return {"anon_bytes": self.anon_bytes - baseline.anon_bytes,
                "file_bytes": self.file_bytes - baseline.file_bytes,
                "locked_bytes": self.locked_bytes - baseline.locked_bytes}

    def to_json(self) -> dict:
        return asdict(self)


def read_footprint(pid: int | str = "self") -> Footprint | None:
    values = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in FIELDS:
                    values[FIELDS[key]] = int(rest.split()[0]) * 1024          # kB
    except (OSError, ValueError):
        return None
    if len(values) != len(FIELDS):
        return None
    return Footprint(**values)
