"""Run a bundle's training the way a phone would: a separate runtime-only process under a memory cap.

    run = run_device(bundle, "executorch", run_dir, margin=0.5)       # cap from the bundle's prediction
    run.status, run.peak_rss_bytes, run.timeline, run.summary["lora"]

The cap. A phone kills an app whose *physical footprint* passes its limit (iOS jetsam, Android lmkd). Here the
child sets RLIMIT_AS on itself (setrlimit, no root, no cgroup): once the runtime is imported it measures its
address-space size (baseline: interpreter + runtime libraries) and allows baseline + budget more, where

    budget_bytes = prediction_bytes * (1 + margin) + slack_bytes

prediction_bytes comes from predict.py (`ditskip-edge estimate`'s traced step peak for the bundle, without its
assumed runtime overhead; the exported programs' memory report when the memory estimate cannot trace the model) and slack_bytes (default 64 MiB) covers what neither counts and a device has too: thread
stacks, the allocator's arenas, the runtime's own bookkeeping. Why RLIMIT_AS and not a cgroup: an allocation past
RLIMIT_AS *fails* (malloc returns NULL -> MemoryError / the runtime's allocation error), so the child reports it and
exits cleanly, whereas a cgroup (v1 here, shared with the sandbox's own process management) OOM-kills with
SIGKILL; and RLIMIT_AS needs no privileges. Its cost: it caps virtual, not resident, memory, so it is stricter than a
phone (mapped-but-untouched pages count). MALLOC_ARENA_MAX=1 keeps glibc from reserving 64 MiB per thread, and threads get 1 MiB stacks
(RLIMIT_STACK before exec), as on Android, instead of 8 MiB of address space each.

Resident memory over time is sampled by the parent from /proc/PID/status (VmRSS, VmSize) every `sample_s`; the
child reports the kernel's exact high-water mark (VmHWM) at the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from .predict import Prediction, predict_memory

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20
DEFAULT_MARGIN = 0.5
DEFAULT_SLACK_BYTES = 64 * MIB
# Address space a runtime reserves but does not touch, measured here on the tiny bundles (peak VmSize minus peak
# RSS growth over the baseline): onnxruntime-training 1.19.2 grows the brk heap by about 270 MiB while its
# resident memory grows by about 30 MiB. RLIMIT_AS counts it, a phone's footprint limit would not: it is added to
# the budget, and the run's resident peak is compared with the prediction separately (DeviceRun.rss_within_budget).
RUNTIME_RESERVED_BYTES = {"ort": 320 * MIB, "executorch": 16 * MIB}   # executorch: VmSize grew 4.4 MiB here


@dataclass
class MemorySample:
    t_s: float
    rss_bytes: int
    vm_bytes: int


@dataclass
class DeviceRun:
    status: str                          # ok | out_of_memory | error | forbidden_import | killed
    returncode: int
    message: str
    runtime: str
    run_dir: str
    budget_bytes: int | None
    prediction: dict | None
    result: dict                          # the child's RESULT.json ({} if it was killed before writing it)
    timeline: list[MemorySample] = field(default_factory=list)

    @property
    def summary(self) -> dict:
        return self.result.get("summary", {})

    @property
    def peak_rss_bytes(self) -> int:
        sampled = max((s.rss_bytes for s in self.timeline), default=0)
        return max(sampled, int(self.result.get("peak_rss_bytes", 0)))

    @property
    def rss_within_budget(self) -> bool | None:
        """The resident peak above the baseline fits the (resident) budget: what a phone's limit would check."""
        if self.budget_bytes is None or not self.result:
            return None
        return self.peak_rss_bytes - self.baseline_rss_bytes <= self.budget_bytes

    @property
    def baseline_rss_bytes(self) -> int:
        return int(self.result.get("baseline", {}).get("rss_bytes", 0))

    def to_json(self) -> dict:
        d = asdict(self)
        d["peak_rss_bytes"] = self.peak_rss_bytes
        d["peak_rss_above_baseline_bytes"] = self.peak_rss_bytes - self.baseline_rss_bytes if self.result else None
        d["rss_within_budget"] = self.rss_within_budget
        d["timeline"] = [[round(s.t_s, 3), s.rss_bytes, s.vm_bytes] for s in self.timeline]
        d["timeline_fields"] = ["t_s", "rss_bytes", "vm_bytes"]
        return d


def _read_status(pid: int) -> tuple[int, int] | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            rss = vm = 0
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("VmSize:"):
                    vm = int(line.split()[1]) * 1024
            return rss, vm
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return None


THREAD_STACK_BYTES = int(os.environ.get("DEVICE_THREAD_STACK_BYTES", 1 * MIB))


def _phone_like_limits() -> None:
    """In the child before exec: threads get 1 MiB stacks (glibc takes the default from RLIMIT_STACK at start),
    as on Android (1 MiB) and close to iOS (512 KiB secondary threads), instead of Linux's 8 MiB."""
    import resource
    resource.setrlimit(resource.RLIMIT_STACK, (THREAD_STACK_BYTES, resource.getrlimit(resource.RLIMIT_STACK)[1]))


def budget_from(prediction: Prediction, margin: float, slack_bytes: int) -> int:
    """Resident budget above the baseline: the prediction plus margin plus slack."""
    return int(prediction.bytes * (1.0 + margin)) + int(slack_bytes)


def run_device(bundle: str | Path, runtime: str, run_dir: str | Path, *, margin: float = DEFAULT_MARGIN,
               slack_bytes: int = DEFAULT_SLACK_BYTES, budget_bytes: int | None = None, uncapped: bool = False,
               steps: int | None = None, checkpoint_every: int = 1, resume: bool = True, sample_s: float = 0.005,
               kill_when: Callable[[Path], bool] | None = None, reserve: bool = True, use_estimate: bool = True,
               timeout_s: float = 600) -> DeviceRun:
    """Train `bundle` with `runtime` in a child process. budget_bytes overrides the prediction-derived budget;
    uncapped=True runs without a cap (to measure). kill_when(run_dir) -> True makes the parent SIGKILL the child
    (an interrupted run, as when a phone kills the app). reserve=False leaves out RUNTIME_RESERVED_BYTES."""
    bundle, run_dir = Path(bundle).resolve(), Path(run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    prediction = None
    if not uncapped and budget_bytes is None:
        prediction = predict_memory(bundle, runtime, use_estimate)
        budget_bytes = budget_from(prediction, margin, slack_bytes)
    if uncapped:
        budget_bytes = None
    as_budget = None if budget_bytes is None else budget_bytes + (RUNTIME_RESERVED_BYTES.get(runtime, 0)
                                                                 if reserve else 0)
    fd, result_path = tempfile.mkstemp(prefix="device-result-", suffix=".json", dir=run_dir)
    os.close(fd)
    os.unlink(result_path)
    request = {"bundle": str(bundle), "runtime": runtime, "run_dir": str(run_dir), "result": result_path,
               "budget_bytes": as_budget, "steps": steps, "checkpoint_every": checkpoint_every,
               "resume": resume}
    req_path = run_dir / "device_request.json"
    req_path.write_text(json.dumps(request, indent=1))
    env = dict(os.environ, MALLOC_ARENA_MAX=os.environ.get("DEVICE_MALLOC_ARENA_MAX", "1"), PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PYTHONDONTWRITEBYTECODE="1")
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "device_tests.child", str(req_path)], cwd=str(ROOT), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=_phone_like_limits)
    timeline: list[MemorySample] = []
    log_chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: log_chunks.extend(iter(lambda: proc.stdout.read(4096), b"")),
                              daemon=True)
    reader.start()
    killed = False
    while proc.poll() is None:
        st = _read_status(proc.pid)
        if st is not None:
            timeline.append(MemorySample(time.perf_counter() - t0, *st))
        if kill_when is not None and not killed and kill_when(run_dir):
            proc.send_signal(signal.SIGKILL)
            killed = True
        if time.perf_counter() - t0 > timeout_s:
            proc.kill()
            killed = True
        time.sleep(sample_s)
    proc.wait()
    reader.join(timeout=5)
    log_text = b"".join(log_chunks).decode(errors="replace")
    (run_dir / "device_log.txt").write_text(log_text)
    result = {}
    if Path(result_path).is_file():
        result = json.loads(Path(result_path).read_text())
        os.replace(result_path, run_dir / "device_result.json")
    if killed and not result:
        status, message = "killed", f"child {proc.pid} killed (SIGKILL) by the runner"
    elif not result and budget_bytes is not None and proc.returncode < 0 and _allocation_abort(log_text):
        # Some native libraries abort instead of failing the allocation (safetensors' Rust allocator: "memory
        # allocation of N bytes failed", SIGABRT). Under a cap that is an out-of-memory, reported as such.
        status = "out_of_memory"
        message = (f"out of memory under the cap: the device process aborted (signal {-proc.returncode}) when an "
                   f"allocation failed under RLIMIT_AS = baseline + {as_budget / MIB:.1f} MiB: "
                   f"{_allocation_abort(log_text)}")
    elif result:
        status = result["status"]
        message = result.get("message", "")
        if status == "out_of_memory":
            message = (f"out of memory under the cap: the device process could not allocate within baseline "
                       f"{result['baseline']['vm_size_bytes'] / MIB:.1f} MiB + budget {as_budget / MIB:.1f} MiB "
                       f"(RLIMIT_AS {result.get('rlimit_as_bytes', 0) / MIB:.1f} MiB): {message}")
    else:
        status = "error"
        message = f"child exited with code {proc.returncode} and wrote no result; log: {log_text[-2000:]}"
    run = DeviceRun(status, proc.returncode, message, runtime, str(run_dir), budget_bytes,
                    asdict(prediction) if prediction else None, result, timeline)
    (run_dir / "device_run.json").write_text(json.dumps(run.to_json(), indent=1, default=str))
    return run


def _allocation_abort(log_text: str) -> str:
    for line in log_text.splitlines():
        if "memory allocation of" in line and "failed" in line or "std::bad_alloc" in line:
            return line.strip()
    return ""


def file_appeared(name: str) -> Callable[[Path], bool]:
    """kill_when predicate: the run folder has `name` (e.g. the first checkpoint)."""
    return lambda run_dir: (run_dir / name).exists()
