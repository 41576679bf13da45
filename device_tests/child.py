"""The device stand-in: one process that trains a bundle with the runtime package under a footprint cap.

    python -m device_tests.child REQUEST.json          (started by device_tests/runner.py, not by hand)

1. installs the import guard (runtime_imports.forbid_host_modules): nothing but the runtime package and the runtime
   libraries can be imported in this process;
2. imports the runtime package's loop and adapters (ExecuTorch's training bindings or onnxruntime.training.api);
3. measures its own baseline (footprint: RssAnon / RssFile, and VmData: interpreter + runtime libraries, no bundle
   yet), writes it to BASELINE.json for the parent, and, capped, sets RLIMIT_DATA = baseline VmData + the request's
   data budget. RLIMIT_DATA counts private writable memory (heap, anonymous mappings) and not read-only file
   mappings: a memory-mapped weights file does not count, as on a phone. An allocation past it fails cleanly here
   (exit 3); the parent also watches RssAnon and stops the process when it passes the budget (what a phone does);
4. with `photos` in the request (the bundle is then a model bundle): runs the subject stage first (runtime/subject.py,
   as `python -m ditskip_edge.runtime personalize` does: photos -> schedule -> x0 -> the skipped blocks' forward ->
   residual cache, x0-only or cache-free), writing the subject bundle `subject_out`; then (unless `no_train`)
   trains the bundle with the runtime package's loop (checkpoint, resume, LoRA, as
   `python -m ditskip_edge.runtime train --runtime R` does);
5. writes RESULT.json atomically: ok / out_of_memory / error, the message, the summary, the footprint at the end,
   the modules that got in (must be none of FORBIDDEN).

Exit codes: 0 done, 3 out of memory under the cap, 4 other error, 5 a forbidden module was imported.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path

EXIT_OK, EXIT_OOM, EXIT_ERROR, EXIT_FORBIDDEN = 0, 3, 4, 5

OOM_MARKERS = ("failed to map segment", "MemoryError", "can't allocate memory", "Cannot allocate memory", "bad_alloc",
               "MemoryAllocationFailed", "error: 0x21", "Failed to allocate", "out of memory", "alloc failed",
               "Allocation failed", "memory allocation")
# ExecuTorch's Error::AccessFailed (0x22): its data loader could not map or read the program. Under a cap that is
# the loader's allocation failing; without one it is a real I/O error.
CAPPED_OOM_MARKERS = ("error: 0x22",)


def write_json_atomic(path: Path, doc: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    os.replace(tmp, path)


def _looks_like_oom(exc: BaseException, capped: bool) -> bool:
    if isinstance(exc, MemoryError):
        return True
    text = f"{type(exc).__name__}: {exc}".lower()
    return any(m.lower() in text for m in OOM_MARKERS + (CAPPED_OOM_MARKERS if capped else ()))


def import_runtime(runtime: str, subject_stage: bool = False):
    """The guard first, then the runtime package's loop and adapters (which import the runtime bindings alone)."""
    from device_tests import runtime_imports as ri
    ri.forbid_host_modules()
    if runtime == "executorch":
        ri.executorch_training()
    elif runtime == "ort":
        ri.ort_training_api()
    else:
        raise ValueError(f"runtime must be executorch or ort, got {runtime!r}")
    # Libraries the runtime imports lazily are code, not data: load them before the baseline is measured (else the
    # first one loaded under a tight cap fails to map its segments, an ImportError that hides the real cause).
    import safetensors.numpy  # noqa: F401

    from ditskip_edge.runtime import executorch, forward, loop, ort, run, subject  # noqa: F401
    if subject_stage:
        ri.executorch_inference()         # the subject stage's forward programs (ExecuTorch inference bindings)
    return run.train_bundle, loop.RunConfig, ri


def main(request_path: str) -> int:
    req = json.loads(Path(request_path).read_text())
    result_path = Path(req["result"])
    doc: dict = {"status": "error", "runtime": req["runtime"], "pid": os.getpid()}
    t0 = time.perf_counter()
    try:
        train, Config, ri = import_runtime(req["runtime"], bool(req.get("photos") or req.get("computes_residuals")))
        from ditskip_edge.runtime.footprint import read_footprint
        doc["runtime_version"] = ri.runtime_version(req["runtime"])
        base = read_footprint()
        doc["baseline"] = {**base.to_json(),
                           "what": "interpreter + runtime libraries + runtime package imported, no bundle loaded"}
        write_json_atomic(Path(req["baseline"]), doc["baseline"])
        cap = req.get("data_budget_bytes")
        if cap is not None:
            limit = base.data_bytes + int(cap)
            resource.setrlimit(resource.RLIMIT_DATA, (limit, resource.getrlimit(resource.RLIMIT_DATA)[1]))
            doc["rlimit_data_bytes"] = limit
        doc["import_seconds"] = round(time.perf_counter() - t0, 3)
        cfg = Config(run_dir=Path(req["run_dir"]), steps=req.get("steps"),
                     checkpoint_every=int(req.get("checkpoint_every", 1)), resume=bool(req.get("resume", True)),
                     progress=False)
        bundle = req["bundle"]
        if req.get("photos"):
            from ditskip_edge.runtime.subject import SubjectConfig, personalize
            stage = personalize(bundle, req["photos"], req["subject_out"], SubjectConfig(
                cache_mode=req.get("cache_mode", "stored"), prompt=req.get("prompt"),
                resume=bool(req.get("resume", True)), overwrite=bool(req.get("overwrite", False)),
                keep_blocks=bool(req.get("keep_blocks", False)), progress=False))
            doc["subject_stage"] = stage
            bundle = req["subject_out"]
        if not req.get("no_train"):
            summary = train(bundle, req["runtime"], cfg, req.get("precision"),
                            keep_blocks=True if req.get("keep_blocks") else None)
            doc["summary"] = summary
        doc.update(status="ok")
        code = EXIT_OK
    except BaseException as e:  # noqa: BLE001 - the child reports every failure in RESULT.json
        if isinstance(e, KeyboardInterrupt):
            raise
        oom = _looks_like_oom(e, req.get("data_budget_bytes") is not None)
        from device_tests.runtime_imports import ForbiddenImport
        forbidden = isinstance(e, ForbiddenImport) or isinstance(e.__cause__, ForbiddenImport)
        doc["status"] = "out_of_memory" if oom else ("forbidden_import" if forbidden else "error")
        tb = traceback.extract_tb(e.__traceback__)
        where = f" (in {tb[-1].name}, {Path(tb[-1].filename).name}:{tb[-1].lineno})" if tb else ""
        doc["message"] = f"{type(e).__name__}: {e}{where}"
        doc["traceback"] = traceback.format_exc(limit=8)
        code = EXIT_OOM if oom else (EXIT_FORBIDDEN if forbidden else EXIT_ERROR)
    # Lift the cap so that reporting itself cannot fail for lack of memory.
    resource.setrlimit(resource.RLIMIT_DATA, (resource.getrlimit(resource.RLIMIT_DATA)[1],) * 2)
    from device_tests.runtime_imports import host_modules_loaded
    from ditskip_edge.runtime.footprint import read_footprint
    doc["host_modules_loaded"] = host_modules_loaded()
    doc["torch_loaded"] = "torch" in sys.modules
    doc["modules_loaded"] = len(sys.modules)
    end = read_footprint()
    doc["end"] = end.to_json() if end is not None else None
    doc["seconds"] = round(time.perf_counter() - t0, 3)
    if doc["host_modules_loaded"] and code == EXIT_OK:
        doc["status"], code = "forbidden_import", EXIT_FORBIDDEN
    doc["exit_code"] = code
    write_json_atomic(result_path, doc)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
