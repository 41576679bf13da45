"""A training program's footprint as phones count it, measured in a fresh process that imports only the ExecuTorch
runtime (export/footprint.py says what each figure counts).

    measure_program(pte, inputs, data=ptd, steps=3) -> dict      (runs `python -m export.executorch_footprint`)

The child: makes mlock fail (footprint.drop_mlock: ExecuTorch's Python loader maps the .pte / .ptd with
`UseMlockIgnoreErrors`, so the files stay clean and reclaimable, as the C++ Module's Mmap mode leaves them), imports
the runtime (`executorch.extension.training`, which imports torch: the Python bindings link libtorch), reads the
baseline, loads the program and its method (`_load_program(pte, data_path=ptd).load_method("forward")`: both files
memory-mapped; the method's arena and delegates are set up here, not in the first step), reads again,
then runs `forward_backward` `steps` times, each under a PeakSampler. Reported, in bytes over the baseline:

    load_*              what loading added (RssAnon: method allocations, XNNPACK runtimes; RssFile: mapped pages)
    step_peak_*         per step: the peak during the step (the phone's count is step_peak_rss_anon_bytes)
    footprint_*         the largest step peak (steady state: the arena is fully touched after step 1)

plus wall and CPU seconds per step (medians of the steps after the first; CPU time of the whole process, all its
threads: the steadier figure on a shared machine), the loss, and VmLck (0 when nothing is locked).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _import_runtime():
    """The runtime's Python bindings without the compiler: `portable_lib` imports `executorch.exir._warnings` only
    for a warning class, and `executorch.exir` would pull in the exporter (torch.export, torchao, ...). A stand-in
    module keeps the measured process to torch (which the bindings link) plus the bindings."""
    import types
    import warnings
    if "executorch.exir._warnings" not in sys.modules:
        import executorch
        exir = types.ModuleType("executorch.exir")
        exir.__path__ = []
        w = types.ModuleType("executorch.exir._warnings")

        class ExperimentalWarning(UserWarning):
            pass

        w.ExperimentalWarning = ExperimentalWarning
        w.experimental = lambda *a, **k: (lambda f: f)
        exir._warnings = w
        sys.modules["executorch.exir"], sys.modules["executorch.exir._warnings"] = exir, w
        executorch.exir = exir
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from executorch.extension.pybindings.portable_lib import _load_program, _unsafe_reset_threadpool
    return _load_program, _unsafe_reset_threadpool


class Trainer:
    """What executorch.extension.training.TrainingModule.forward_backward does (its module imports the compiler),
    on a program loaded with `_load_program` so that loading the method (arena, delegates) happens in `__init__`,
    apart from the first step. The joint program returns [loss, gradients..., parameters...]; the metadata methods
    give the split and the names."""

    def __init__(self, program, method: str = "forward"):
        def meta(name):
            return program.load_method(f"{name}{method}").call((), clone_outputs=True)
        g0 = meta("__et_training_gradients_index_")[0]
        p0 = meta("__et_training_parameters_index_")[0]
        names = meta("__et_training_fqn_")
        self.method = program.load_method(method)
        self.program, self._split, self._names, self._grads = program, (g0, p0), names, None

    def forward_backward(self, inputs) -> list:
        g0, p0 = self._split
        self._grads = None                  # one copy of the gradients at a time (a loop's gradient sums)
        out = self.method.call(inputs, clone_outputs=False)
        self._grads = dict(zip(self._names, [g.clone() for g in out[g0:p0]]))
        return [x.clone() for x in out[:g0]]

    def named_gradients(self) -> dict:
        return self._grads


def _child(pte: str, inputs: str, data: str | None, steps: int, threads: int, keep_mlock: bool = False) -> dict:
    from export.footprint import Footprint, PeakSampler, drop_mlock
    mlock = {"kept": True} if keep_mlock else drop_mlock()
    _load_program, _unsafe_reset_threadpool = _import_runtime()
    import torch
    if threads:
        _unsafe_reset_threadpool(threads)
        torch.set_num_threads(threads)
    tensors = list(torch.load(inputs, weights_only=True))
    base = Footprint.read()
    t0 = time.perf_counter()
    m = Trainer(_load_program(pte, data_path=data) if data else _load_program(pte))
    load_s = time.perf_counter() - t0
    loaded = Footprint.read()
    peaks, times, cpu, loss = [], [], [], None
    for _ in range(steps):
        with PeakSampler() as s:
            t0, c0 = time.perf_counter(), time.process_time()
            loss = float(m.forward_backward(tensors)[0])
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        peaks.append(s.peak)
    end = Footprint.read()
    grads = {k: float(v.norm()) for k, v in m.named_gradients().items()}
    step = [{"rss_anon_bytes": p["rss_anon_bytes"] - base.rss_anon_bytes,
             "rss_file_bytes": p["rss_file_bytes"] - base.rss_file_bytes, "samples": p["samples"]} for p in peaks]
    later, later_cpu = times[1:] or times, cpu[1:] or cpu
    return {"mlock": mlock, "baseline": base.to_json(), "after_load": loaded.to_json(), "after_steps": end.to_json(),
            "load_rss_anon_bytes": loaded.rss_anon_bytes - base.rss_anon_bytes,
            "load_rss_file_bytes": loaded.rss_file_bytes - base.rss_file_bytes,
            "step_peaks": step,
            "footprint_rss_anon_bytes": max(p["rss_anon_bytes"] for p in step),
            "footprint_rss_file_bytes": max(p["rss_file_bytes"] for p in step),
            "locked_bytes": end.locked_bytes, "rss_peak_over_baseline_bytes": end.rss_peak_bytes - base.rss_bytes,
            "seconds_per_step": sorted(later)[len(later) // 2], "step_seconds": times, "load_seconds": load_s,
            "cpu_seconds_per_step": sorted(later_cpu)[len(later_cpu) // 2], "step_cpu_seconds": cpu,
            "loss": loss, "grad_norms": grads}


def measure_program(pte: str | Path, inputs: str | Path, data: str | Path | None = None, steps: int = 3,
                    threads: int = 0, env: dict | None = None, keep_mlock: bool = False) -> dict:
    """Run the child in a fresh interpreter and return its report. `inputs`: a torch.save'd list of the step's
    input tensors in contract order. `threads`: 0 leaves the runtime's default thread pool. `keep_mlock`: let the
    Python loader lock the mapped files (its default; locked_bytes then shows how much it locked)."""
    cmd = [sys.executable, "-m", "export.executorch_footprint", str(pte), str(inputs), "--steps", str(steps),
           "--threads", str(threads)] + (["--keep-mlock"] if keep_mlock else [])
    if data:
        cmd += ["--data", str(data)]
    e = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **(env or {}))
    out = subprocess.run(cmd, capture_output=True, text=True, env=e, cwd=str(ROOT), check=False)
    if out.returncode != 0:
        raise RuntimeError(f"footprint child failed ({out.returncode}): {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("pte")
    ap.add_argument("inputs")
    ap.add_argument("--data", default=None)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--keep-mlock", action="store_true")
    a = ap.parse_args()
    print(json.dumps(_child(a.pte, a.inputs, a.data, a.steps, a.threads, a.keep_mlock)))
