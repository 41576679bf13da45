"""Run a bundle's training the way a phone would: a separate runtime-only process under a footprint cap.

    run = run_device(bundle, "executorch", run_dir, margin=0.5)       # cap from the bundle's prediction
    run.status, run.peak_anon_bytes, run.timeline, run.summary["lora"]

What a phone counts is the footprint: dirty anonymous memory (iOS phys_footprint; Android 17's limiter counts
anonymous memory plus swap); clean file-backed pages (a memory-mapped weights file only read) are not counted. So
the cap is on anonymous memory, not on the address space, and it is enforced twice:

- the child sets RLIMIT_DATA = its baseline VmData + data budget (RLIMIT_DATA counts private writable memory, not
  read-only file mappings): an allocation past it fails inside the process, which reports "out of memory" and exits
  3 with the checkpoint untouched;
- the parent samples the child's RssAnon and RssFile every `sample_s` from /proc/PID/status and stops it (SIGKILL,
  as a phone's memory killer does) when RssAnon passes baseline + budget: status "over_budget", exit code 3,
  one line; checkpoints are written atomically, so the last one is whole.

    budget_bytes = prediction_bytes * (1 + margin) + slack_bytes

prediction_bytes comes from predict.py (`ditskip-edge estimate` for the bundle, without its assumed runtime
overhead; the program's memory report when the estimate cannot trace the model) and slack_bytes (default 64 MiB)
covers what neither counts and a device has too: thread stacks, the allocator's arenas, the runtime's bookkeeping.
The data budget adds the address space a runtime reserves without touching (RUNTIME_RESERVED_BYTES: counted by
VmData, not resident). MALLOC_ARENA_MAX=1 keeps glibc from reserving 64 MiB per thread, MALLOC_ENV returns freed
blocks to the system, and threads get 1 MiB stacks (RLIMIT_STACK before exec), as on Android.

runtime="native" trains with the native device runtime (`ditskip-run train`, device_runtime/: no Python in the
process) and counts the WHOLE process, nothing subtracted (baseline zero): the budget is the same prediction plus
margin plus slack (the slack covers the runtime's fixed cost, `ditskip-run footprint`), enforced by the core itself
(--budget-mib: over it, exit 3 with the checkpoint untouched) and by the parent's watch (SIGKILL past it).
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

from ditskip_edge.runtime.footprint import read_footprint

from .predict import Prediction, predict_memory

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20
DEFAULT_MARGIN = 0.5
DEFAULT_SLACK_BYTES = 64 * MIB
# Private address space a runtime reserves but does not touch, measured here on the tiny bundles (VmData growth
# minus RssAnon growth): onnxruntime-training 1.19.2 grows the brk heap by about 270 MiB while its anonymous
# resident memory grows by about 30 MiB. RLIMIT_DATA counts it, a phone's footprint limit would not.
RUNTIME_RESERVED_BYTES = {"ort": 320 * MIB, "executorch": 16 * MIB}
NATIVE = "native"              # run_device's runtime for the native core: it runs the bundle's executorch programs
EXIT_CODES = {"ok": 0, "out_of_memory": 3, "over_budget": 3}


@dataclass
class MemorySample:
    t_s: float
    anon_bytes: int
    file_bytes: int


@dataclass
class DeviceRun:
    status: str                          # ok | out_of_memory | over_budget | error | forbidden_import | killed
    returncode: int
    message: str
    runtime: str
    run_dir: str
    budget_bytes: int | None             # footprint (RssAnon) budget above the baseline
    prediction: dict | None
    result: dict                         # the child's RESULT.json ({} if it was killed before writing it)
    baseline: dict = field(default_factory=dict)
    timeline: list[MemorySample] = field(default_factory=list)

    @property
    def summary(self) -> dict:
        return self.result.get("summary", {})

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.status, 1)

    @property
    def baseline_anon_bytes(self) -> int:
        return int(self.baseline.get("anon_bytes", 0))

    @property
    def peak_anon_bytes(self) -> int:
        """The highest sampled RssAnon (what a phone counts)."""
        ends = [int(self.result.get("end", {}).get("anon_bytes", 0))] if self.result.get("end") else []
        return max([s.anon_bytes for s in self.timeline] + ends, default=0)

    @property
    def peak_file_bytes(self) -> int:
        return max((s.file_bytes for s in self.timeline), default=0)

    @property
    def footprint_above_baseline_bytes(self) -> int | None:
        return self.peak_anon_bytes - self.baseline_anon_bytes if self.baseline else None

    @property
    def footprint_within_budget(self) -> bool | None:
        if self.budget_bytes is None or not self.baseline:
            return None
        return self.footprint_above_baseline_bytes <= self.budget_bytes

    def to_json(self) -> dict:
        d = asdict(self)
        d.update(exit_code=self.exit_code, peak_anon_bytes=self.peak_anon_bytes, peak_file_bytes=self.peak_file_bytes,
                 footprint_above_baseline_bytes=self.footprint_above_baseline_bytes,
                 footprint_within_budget=self.footprint_within_budget)
        d["timeline"] = [[round(s.t_s, 3), s.anon_bytes, s.file_bytes] for s in self.timeline]
        d["timeline_fields"] = ["t_s", "anon_bytes", "file_bytes"]
        return d


THREAD_STACK_BYTES = int(os.environ.get("DEVICE_THREAD_STACK_BYTES", 1 * MIB))
# glibc keeps freed blocks below its dynamic mmap threshold (it rises to 32 MiB after the first large free) in the
# heap, so RSS also counts fragmentation (the subject stage loads and drops a program per block). A fixed threshold
# makes every block >= 64 KiB its own mapping, returned on free: RSS then follows the bytes in use, as on a phone's
# allocator. The benchmarks' eager children run under the same setting (benchmarks/memory_speed.py).
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "131072"}


def _phone_like_limits() -> None:
    """In the child before exec: threads get 1 MiB stacks (glibc takes the default from RLIMIT_STACK at start),
    as on Android (1 MiB) and close to iOS (512 KiB secondary threads), instead of Linux's 8 MiB."""
    import resource
    resource.setrlimit(resource.RLIMIT_STACK, (THREAD_STACK_BYTES, resource.getrlimit(resource.RLIMIT_STACK)[1]))


def budget_from(prediction: Prediction, margin: float, slack_bytes: int) -> int:
    """Footprint budget above the baseline: the prediction plus margin plus slack."""
    return int(prediction.bytes * (1.0 + margin)) + int(slack_bytes)


def run_device(bundle: str | Path, runtime: str, run_dir: str | Path, *, margin: float = DEFAULT_MARGIN,
               slack_bytes: int = DEFAULT_SLACK_BYTES, budget_bytes: int | None = None, uncapped: bool = False,
               steps: int | None = None, checkpoint_every: int = 1, resume: bool = True, sample_s: float = 0.005,
               kill_when: Callable[[Path], bool] | None = None, reserve: bool = True, use_estimate: bool = True,
               precision: str | None = None, extra_data_bytes: int = 0, timeout_s: float = 600,
               photos: str | Path | None = None, subject_out: str | Path | None = None, cache_mode: str = "stored",
               no_train: bool = False, keep_blocks: bool = False, overwrite: bool = False) -> DeviceRun:
    """Train `bundle` with `runtime` in a child process. budget_bytes overrides the prediction-derived budget;
    uncapped=True runs without a cap (to measure). kill_when(run_dir) -> True makes the parent SIGKILL the child
    (an interrupted run, as when a phone kills the app). reserve=False leaves RUNTIME_RESERVED_BYTES out of the
    data budget; extra_data_bytes widens it (to test the footprint watch alone). With `photos`, `bundle` is a model
    bundle: the child runs the subject stage first (runtime/subject.py) into `subject_out` (in `cache_mode`:
    stored, x0-only or cache-free), then trains that subject bundle (unless `no_train`); the cap is the larger of the subject stage's
    and the training step's predictions."""
    bundle, run_dir = Path(bundle).resolve(), Path(run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    prediction = None
    if not uncapped and budget_bytes is None:
        prediction = predict_memory(bundle, "executorch" if runtime == NATIVE else runtime, use_estimate, precision,
                                    subject_stage=photos is not None, cache_free=cache_mode != "stored")
        budget_bytes = budget_from(prediction, margin, slack_bytes)
    if uncapped:
        budget_bytes = None
    if runtime == NATIVE:
        if photos is not None or no_train or keep_blocks or overwrite:
            raise ValueError("run_device(runtime='native'): the native core trains a subject bundle; the subject "
                             "stage runs in the Python runtime (photos / no_train / keep_blocks / overwrite)")
        return _run_native(bundle, run_dir, budget_bytes, prediction, steps=steps, checkpoint_every=checkpoint_every,
                           resume=resume, precision=precision, sample_s=sample_s, kill_when=kill_when,
                           timeout_s=timeout_s)
    data_budget = None if budget_bytes is None else (budget_bytes + extra_data_bytes
                                                     + (RUNTIME_RESERVED_BYTES.get(runtime, 0) if reserve else 0))
    tmp = Path(tempfile.mkdtemp(prefix="device-", dir=run_dir))
    result_path, baseline_path = tmp / "result.json", tmp / "baseline.json"
    request = {"bundle": str(bundle), "runtime": runtime, "precision": precision, "run_dir": str(run_dir),
               "result": str(result_path), "baseline": str(baseline_path), "data_budget_bytes": data_budget,
               "steps": steps, "checkpoint_every": checkpoint_every, "resume": resume,
               "photos": None if photos is None else str(Path(photos).resolve()),
               "subject_out": None if subject_out is None else str(Path(subject_out).resolve()),
               "cache_mode": cache_mode, "no_train": no_train, "keep_blocks": keep_blocks, "overwrite": overwrite,
               "computes_residuals": _computes_residuals(bundle)}
    req_path = run_dir / "device_request.json"
    req_path.write_text(json.dumps(request, indent=1))
    env = dict(os.environ, **{k: os.environ.get(k, v) for k, v in MALLOC_ENV.items()},
               MALLOC_ARENA_MAX=os.environ.get("DEVICE_MALLOC_ARENA_MAX", "1"),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), PYTHONDONTWRITEBYTECODE="1")
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "device_tests.child", str(req_path)], cwd=str(ROOT), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=_phone_like_limits)
    timeline: list[MemorySample] = []
    log_chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: log_chunks.extend(iter(lambda: proc.stdout.read(4096), b"")),
                              daemon=True)
    reader.start()
    killed_by, baseline = None, {}
    while proc.poll() is None:
        fp = read_footprint(proc.pid)
        if fp is not None:
            timeline.append(MemorySample(time.perf_counter() - t0, fp.anon_bytes, fp.file_bytes))
        if not baseline and baseline_path.is_file():
            baseline = json.loads(baseline_path.read_text())
        if (budget_bytes is not None and baseline and fp is not None and killed_by is None
                and fp.anon_bytes - baseline["anon_bytes"] > budget_bytes):
            proc.send_signal(signal.SIGKILL)
            killed_by = "budget"
        if kill_when is not None and killed_by is None and kill_when(run_dir):
            proc.send_signal(signal.SIGKILL)
            killed_by = "request"
        if time.perf_counter() - t0 > timeout_s and killed_by is None:
            proc.kill()
            killed_by = "timeout"
        time.sleep(sample_s)
    proc.wait()
    reader.join(timeout=5)
    log_text = b"".join(log_chunks).decode(errors="replace")
    (run_dir / "device_log.txt").write_text(log_text)
    result = json.loads(result_path.read_text()) if result_path.is_file() else {}
    if result_path.is_file():
        os.replace(result_path, run_dir / "device_result.json")
    if not baseline and baseline_path.is_file():
        baseline = json.loads(baseline_path.read_text())
    for p in tmp.iterdir():
        p.unlink()
    tmp.rmdir()
    status, message = _outcome(proc.returncode, killed_by, result, log_text, budget_bytes, data_budget, timeline,
                               baseline)
    run = DeviceRun(status, proc.returncode, message, runtime, str(run_dir), budget_bytes,
                    asdict(prediction) if prediction else None, result, baseline, timeline)
    (run_dir / "device_run.json").write_text(json.dumps(run.to_json(), indent=1, default=str))
    return run


def _run_native(bundle: Path, run_dir: Path, budget_bytes: int | None, prediction: Prediction | None, *,
                steps: int | None, checkpoint_every: int, resume: bool, precision: str | None, sample_s: float,
                kill_when: Callable[[Path], bool] | None, timeout_s: float) -> DeviceRun:
    """`ditskip-run train BUNDLE` under the cap: the core's own budget (--budget-mib) and the parent's watch, both on
    the whole process's RssAnon."""
    from .native_runtime import build, measure
    runner = build("x86_64")
    args = ["train", bundle, "--run-dir", run_dir, "--json", "--checkpoint-every", checkpoint_every]
    if steps is not None:
        args += ["--steps", steps]
    if not resume:
        args.append("--no-resume")
    if precision:
        args += ["--precision", precision]
    if budget_bytes is not None:
        args += ["--budget-mib", f"{budget_bytes / MIB:.9g}"]
    killed_by: list[str] = []

    def stop_when(sample) -> bool:
        _, anon, _ = sample
        if budget_bytes is not None and anon > budget_bytes:
            killed_by.append("budget")
        elif kill_when is not None and kill_when(run_dir):
            killed_by.append("request")
        return bool(killed_by)

    env = {**MALLOC_ENV, "MALLOC_ARENA_MAX": os.environ.get("DEVICE_MALLOC_ARENA_MAX", "1"),
           **{k: os.environ[k] for k in MALLOC_ENV if k in os.environ}}
    m = measure(runner, *args, sample_s=sample_s, env=env, timeout=timeout_s, preexec_fn=_phone_like_limits,
                stop_when=stop_when)
    (run_dir / "device_log.txt").write_text(m.stderr)
    timeline = [MemorySample(t, a, f) for t, a, f in m.timeline]
    stderr_line = next((ln for ln in reversed(m.stderr.strip().splitlines()) if ln.startswith("ditskip-run")), "")
    summary = m.json if m.returncode == 0 else None
    if killed_by and killed_by[0] == "budget":
        peak = max(s.anon_bytes for s in timeline)
        status, message = "over_budget", (f"over budget: the native process's dirty anonymous memory (RssAnon, whole "
                                          f"process) reached {peak / MIB:.1f} MiB, past the {budget_bytes / MIB:.1f} MiB "
                                          f"budget; stopped as a phone would stop it (the last checkpoint is whole)")
    elif killed_by or m.returncode < 0:
        status, message = "killed", f"child killed (SIGKILL) by the runner ({killed_by[0] if killed_by else 'timeout'})"
    elif m.returncode == 3:
        status, message = "over_budget", f"over budget (the core's own check): {stderr_line}"
    elif m.returncode == 0 and summary is not None:
        status, message = "ok", ""
    else:
        status, message = "error", f"ditskip-run exited {m.returncode}: {stderr_line or m.stderr.strip()[-2000:]}"
    baseline = {"anon_bytes": 0, "file_bytes": 0, "whole_process": True}   # nothing subtracted
    result = {"status": status, "message": message, "summary": summary or {}, "command": "ditskip-run " +
              " ".join(map(str, args))}
    run = DeviceRun(status, m.returncode, message, NATIVE, str(run_dir), budget_bytes,
                    asdict(prediction) if prediction else None, result, baseline, timeline)
    (run_dir / "device_run.json").write_text(json.dumps(run.to_json(), indent=1, default=str))
    return run


def _computes_residuals(bundle: Path) -> bool:
    """An x0-only or cache-free subject bundle: each step runs the forward programs (the child imports them)."""
    try:
        m = json.loads((bundle / "manifest.json").read_text())
        return (m.get("subject_stage") or {}).get("cache_mode", "stored") != "stored"
    except (OSError, ValueError):
        return False


def _outcome(returncode: int, killed_by: str | None, result: dict, log_text: str, budget: int | None,
             data_budget: int | None, timeline: list[MemorySample], baseline: dict) -> tuple[str, str]:
    if killed_by == "budget":
        peak = max(s.anon_bytes for s in timeline) - baseline["anon_bytes"]
        return "over_budget", (f"over budget: the device process's dirty anonymous memory (RssAnon) reached "
                               f"{peak / MIB:.1f} MiB above its baseline, past the {budget / MIB:.1f} MiB budget; "
                               f"stopped as a phone would stop it (the last checkpoint is whole)")
    if killed_by in ("request", "timeout"):
        return "killed", f"child killed (SIGKILL) by the runner ({killed_by})"
    if not result and data_budget is not None and returncode < 0 and _allocation_abort(log_text):
        # Some native libraries abort instead of failing the allocation (safetensors' Rust allocator: "memory
        # allocation of N bytes failed", SIGABRT). Under a cap that is an out-of-memory, reported as such.
        return "out_of_memory", (f"out of memory under the cap: the device process aborted (signal {-returncode}) "
                                 f"when an allocation failed under RLIMIT_DATA = baseline + "
                                 f"{data_budget / MIB:.1f} MiB: {_allocation_abort(log_text)}")
    if result:
        status, message = result["status"], result.get("message", "")
        if status == "out_of_memory":
            message = (f"out of memory under the cap: the device process could not allocate within its baseline "
                       f"+ {data_budget / MIB:.1f} MiB of private memory (RLIMIT_DATA "
                       f"{result.get('rlimit_data_bytes', 0) / MIB:.1f} MiB): {message}")
        return status, message
    return "error", f"child exited with code {returncode} and wrote no result; log: {log_text[-2000:]}"


def _allocation_abort(log_text: str) -> str:
    for line in log_text.splitlines():
        if "memory allocation of" in line and "failed" in line or "std::bad_alloc" in line:
            return line.strip()
    return ""


def file_appeared(name: str) -> Callable[[Path], bool]:
    """kill_when predicate: the run folder has `name` (e.g. the first checkpoint)."""
    return lambda run_dir: (run_dir / name).exists()
