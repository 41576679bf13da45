"""Host driver of the native device runtime (`device_runtime/`, the C++ core a phone runs): build it, run `ditskip-run`.

    runner = build("x86_64")                      # make native        -> build/native/ditskip-run
    runner = build("arm64")                       # make native-arm64  -> build/native-arm64/ditskip-run (qemu)
    r = run(runner, "train", bundle, "--run-dir", run_dir, "--json")
    json.loads(r.stdout)                          # the summary `python -m ditskip_edge.runtime train --json` prints
    m = measure(runner, "step", pte, "--data", ptd, "--inputs", d, "--json")
    m.peak_anon_bytes, m.peak_file_bytes          # the WHOLE process's peaks, sampled from /proc/PID/status

An arm64 runner runs under `qemu-aarch64-static -L /usr/aarch64-linux-gnu` (its libraries: the arm64 ExecuTorch wheel
and Debian's aarch64 libc / libstdc++ / libcrypto). Emulated footprints include the emulator's own memory: compare an
arm64 run by its results (parity), never by its RssAnon.

Builds go through the Makefile (one build folder per architecture, incremental), serialized by a file lock so that
test worker processes building at once do not race.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"x86_64": ("native", ROOT / "build/native/ditskip-run"),
           "arm64": ("native-arm64", ROOT / "build/native-arm64/ditskip-run")}
QEMU = ["qemu-aarch64-static", "-L", "/usr/aarch64-linux-gnu"]
BUILD_TOOLS = {"x86_64": ["cmake", "ninja", "g++"], "arm64": ["cmake", "ninja", "aarch64-linux-gnu-g++",
                                                              "qemu-aarch64-static"]}


class NativeBuildError(RuntimeError):
    pass


@dataclass(frozen=True)
class Runner:
    arch: str                 # "x86_64" | "arm64"
    binary: Path

    @property
    def argv(self) -> list[str]:
        return (QEMU if self.arch == "arm64" else []) + [str(self.binary)]

    @property
    def library(self) -> Path:
        """The core's shared library beside the runner (what the JNI / Swift / ctypes bindings load)."""
        return self.binary.parent / "libditskip.so"


def build(arch: str = "x86_64") -> Runner:
    """`make native` / `make native-arm64` (incremental). Raises NativeBuildError naming what is missing or the
    build's last lines."""
    target, binary = TARGETS[arch]
    missing = [t for t in BUILD_TOOLS[arch] if shutil.which(t) is None]
    if missing:
        raise NativeBuildError(f"{', '.join(missing)} not found: the native runtime's {arch} build needs them "
                               f"(.ci/run installs them with apt)")
    from filelock import FileLock          # torch's dependency: in every venv this project makes
    (ROOT / "build").mkdir(exist_ok=True)
    with FileLock(str(ROOT / "build" / f".{target}.lock")):
        r = subprocess.run(["make", "-s", target], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0 or not binary.is_file():
        tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-25:])
        raise NativeBuildError(f"make {target} failed (rc {r.returncode}):\n{tail}")
    return Runner(arch, binary)


def run(runner: Runner, *args, timeout: float = 600, env: dict | None = None, check: bool = False,
        ) -> subprocess.CompletedProcess:
    """Run `ditskip-run ARGS...`; progress off unless env says otherwise. check: raise on a non-zero exit with the
    runner's stderr."""
    full_env = {**os.environ, "DITSKIP_PROGRESS": "0", **(env or {})}
    r = subprocess.run(runner.argv + [str(a) for a in args], capture_output=True, text=True, timeout=timeout,
                       env=full_env)
    if check and r.returncode != 0:
        raise RuntimeError(f"ditskip-run {' '.join(map(str, args))} exited {r.returncode}: {r.stderr.strip()}")
    return r


def popen(runner: Runner, *args, env: dict | None = None) -> subprocess.Popen:
    """Start `ditskip-run ARGS...` (stdout / stderr piped): for runs a test or benchmark kills or samples."""
    full_env = {**os.environ, "DITSKIP_PROGRESS": "0", **(env or {})}
    return subprocess.Popen(runner.argv + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=full_env)


@dataclass
class Measured:
    """One `ditskip-run` process watched from outside: its whole footprint, nothing subtracted (a phone counts the
    whole app)."""
    returncode: int
    stdout: str
    stderr: str
    timeline: list[tuple[float, int, int]] = field(default_factory=list)   # (t_s, RssAnon bytes, RssFile bytes)
    wall_s: float = 0.0

    @property
    def peak_anon_bytes(self) -> int:
        """The highest sampled RssAnon of the whole process (what a phone counts)."""
        return max((a for _, a, _ in self.timeline), default=0)

    @property
    def peak_file_bytes(self) -> int:
        return max((f for _, _, f in self.timeline), default=0)

    @property
    def json(self) -> dict | None:
        """stdout as JSON (the --json verbs print one document), None when it is not."""
        try:
            return json.loads(self.stdout)
        except ValueError:
            return None

    def to_json(self) -> dict:
        return {"returncode": self.returncode, "peak_anon_bytes": self.peak_anon_bytes,
                "peak_file_bytes": self.peak_file_bytes, "wall_s": round(self.wall_s, 3), "samples": len(self.timeline),
                "timeline_fields": ["t_s", "anon_bytes", "file_bytes"],
                "timeline": [[round(t, 4), a, f] for t, a, f in self.timeline]}


def measure(runner: Runner, *args, sample_s: float = 0.005, env: dict | None = None, timeout: float = 1800,
            preexec_fn=None, stop_when=None) -> Measured:
    """Run `ditskip-run ARGS...` and sample its /proc/PID/status every `sample_s` until it exits: the whole process's
    RssAnon and RssFile over time (peaks included: a step's transient high is caught between the runner's own
    per-step readings). stop_when(sample) -> True SIGKILLs the child (a phone's memory killer); so does the timeout.
    An arm64 runner is measured with its emulator (qemu's own memory in it): compare arm64 by parity, never by this."""
    from ditskip_edge.runtime.footprint import read_footprint
    full_env = {**os.environ, "DITSKIP_PROGRESS": "0", **(env or {})}
    t0 = time.perf_counter()
    proc = subprocess.Popen(runner.argv + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=full_env, preexec_fn=preexec_fn)
    out: dict[str, str] = {}
    readers = [threading.Thread(target=lambda k=k, f=f: out.__setitem__(k, f.read()), daemon=True)
               for k, f in (("stdout", proc.stdout), ("stderr", proc.stderr))]
    for r in readers:
        r.start()
    timeline: list[tuple[float, int, int]] = []
    while proc.poll() is None:
        fp = read_footprint(proc.pid)
        if fp is not None:
            timeline.append((time.perf_counter() - t0, fp.anon_bytes, fp.file_bytes))
            if stop_when is not None and stop_when(timeline[-1]):
                proc.kill()
        if time.perf_counter() - t0 > timeout:
            proc.kill()
        time.sleep(sample_s)
    proc.wait()
    wall = time.perf_counter() - t0
    for r in readers:
        r.join(timeout=10)
    return Measured(proc.returncode, out.get("stdout", ""), out.get("stderr", ""), timeline, wall)
