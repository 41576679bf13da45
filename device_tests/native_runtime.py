"""Host driver of the native device runtime (`device_runtime/`, the C++ core a phone runs): build it, run `ditskip-run`.

    runner = build("x86_64")                      # make native        -> build/native/ditskip-run
    runner = build("arm64")                       # make native-arm64  -> build/native-arm64/ditskip-run (qemu)
    r = run(runner, "train", bundle, "--run-dir", run_dir, "--json")
    json.loads(r.stdout)                          # the summary `python -m ditskip_edge.runtime train --json` prints

An arm64 runner runs under `qemu-aarch64-static -L /usr/aarch64-linux-gnu` (its libraries: the arm64 ExecuTorch wheel
and Debian's aarch64 libc / libstdc++ / libcrypto). Emulated footprints include the emulator's own memory: compare an
arm64 run by its results (parity), never by its RssAnon.

Builds go through the Makefile (one build folder per architecture, incremental), serialized by a file lock so that
test worker processes building at once do not race.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
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
