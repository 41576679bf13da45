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

import contextlib
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


def read_kb_fields(path: str, fields: dict[str, str]) -> dict[str, int]:
    """`Key:  N kB` lines of a /proc file (status, smaps_rollup) -> {fields[Key]: N * 1024} for the keys asked."""
    out = {}
    with open(path) as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in fields:
                out[fields[key]] = int(rest.split()[0]) * 1024          # the kernel reports kB
    return out


def read_footprint(pid: int | str = "self") -> Footprint | None:
    try:
        values = read_kb_fields(f"/proc/{pid}/status", FIELDS)
    except (OSError, ValueError):
        return None
    if len(values) != len(FIELDS):
        return None
    return Footprint(**values)


# --------------------------------------------------------------------------------------- mapped files, not locked
# ExecuTorch's Python bindings map the program and its data file with MmapDataLoader and call mlock on what they load
# (errors ignored). Locked pages cannot be reclaimed, so a mapped weights file would count like dirty memory (VmLck);
# a phone app's Module maps without locking. `mlock_refused()` makes mlock fail while a program loads: the soft
# RLIMIT_MEMLOCK at 0 and, for a process with CAP_IPC_LOCK (root), that capability out of the effective set (kept
# in the permitted set, so both are restored afterwards).

CAP_IPC_LOCK = 14
_CAP_VERSION_3 = 0x20080522                        # _LINUX_CAPABILITY_VERSION_3: two 32-bit words per set


def _capabilities():
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    libc = ctypes.CDLL(None, use_errno=True)
    hdr, data = Header(_CAP_VERSION_3, 0), (Data * 2)()
    if libc.capget(ctypes.byref(hdr), data) != 0:
        return None
    return libc, hdr, data


def _set_ipc_lock_effective(on: bool) -> bool:
    """Raise or lower CAP_IPC_LOCK in the effective set (when permitted). Returns whether it was effective before."""
    try:
        caps = _capabilities()
    except (OSError, AttributeError):
        return False
    if caps is None:
        return False
    libc, hdr, data = caps
    bit = 1 << CAP_IPC_LOCK
    was = bool(data[0].effective & bit)
    if on and data[0].permitted & bit:
        data[0].effective |= bit
    elif not on:
        data[0].effective &= ~bit
    import ctypes
    libc.capset(ctypes.byref(hdr), data)
    return was


def refuse_mlock() -> tuple[int, bool]:
    """From now on mlock fails in this process (see above). Returns what restore_mlock needs: the soft limit and
    whether CAP_IPC_LOCK was effective."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (0, hard))
    return soft, _set_ipc_lock_effective(False)


def restore_mlock(state: tuple[int, bool]) -> None:
    import resource
    soft, had_cap = state
    if had_cap:
        _set_ipc_lock_effective(True)
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (soft, resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]))


@contextlib.contextmanager
def mlock_refused():
    """While active, mlock fails in this process; on exit the limit and the capability are restored. ExecuTorch
    loads a method (and maps + would lock its constants) on its first call, so calls run under this too."""
    state = refuse_mlock()
    try:
        yield
    finally:
        restore_mlock(state)
