"""An ORT training model's footprint as phones count it (export/footprint.py), in a fresh process without torch.

    measure_training_model(training_model, checkpoint, inputs_npz, session_config={...}, steps=3) -> dict

The child makes torch unimportable (as export/ort_memory.py does: `import onnxruntime` would load it), reads the
baseline, builds `onnxruntime.training.api.Module` (session options: the given session config entries, e.g.
ort_graph.RECOMPUTE_SESSION_CONFIG; keys "so:NAME" set SessionOptions attributes instead, e.g. "so:execution_order":
"PRIORITY_BASED", "so:enable_cpu_mem_arena": False; and the optimized graph written next to the model so node
counts can be read),
then runs `train_step` `steps` times (forward + backward, gradients accumulated; no optimizer) under a PeakSampler.
Reported over the baseline: load_rss_anon_bytes, footprint_rss_anon_bytes / footprint_rss_file_bytes (largest step
peak), seconds per step (median after the first), the loss, and the optimized graph's op counts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _child(model: str, checkpoint: str, inputs: str, config: dict, steps: int, threads: int) -> dict:
    sys.modules["torch"] = None
    from collections import Counter

    from export.footprint import Footprint, PeakSampler
    import numpy as np
    import onnx
    import onnxruntime as ort
    import types
    ort.set_default_logger_severity(3)
    if "onnxruntime.training" not in sys.modules:     # its __init__ imports torch (export/ort_trainer.py, same trick)
        package = types.ModuleType("onnxruntime.training")
        package.__path__ = [os.path.join(os.path.dirname(ort.__file__), "training")]
        sys.modules["onnxruntime.training"] = package
    from onnxruntime.training.api import CheckpointState, Module
    data = np.load(inputs)
    feeds = [data[k] for k in data.files]
    so = ort.SessionOptions()
    if threads:
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
    for k, v in config.items():
        if k.startswith("so:"):                  # a SessionOptions attribute, e.g. so:enable_cpu_mem_arena
            attr = k[3:]
            setattr(so, attr, getattr(ort.ExecutionOrder, v) if attr == "execution_order" else v)
        else:
            so.add_session_config_entry(k, v)
    optimized = str(Path(model).with_suffix(".optimized.onnx"))
    so.optimized_model_filepath = optimized
    base = Footprint.read()
    state = CheckpointState.load_checkpoint(checkpoint)
    module = Module(model, state, None, session_options=so)
    module.train()
    loaded = Footprint.read()
    peaks, times, loss = [], [], None
    for _ in range(steps):
        with PeakSampler() as s:
            t0 = time.perf_counter()
            loss = float(np.asarray(module(*feeds)))
            times.append(time.perf_counter() - t0)
        peaks.append(s.peak)
    later = times[1:] or times
    ops = Counter(n.op_type for n in onnx.load(optimized, load_external_data=False).graph.node)
    grads = {}
    for name, p in state.parameters:
        if p.requires_grad:
            grads[name] = float(np.linalg.norm(p.grad))
    return {"load_rss_anon_bytes": loaded.rss_anon_bytes - base.rss_anon_bytes,
            "footprint_rss_anon_bytes": max(p["rss_anon_bytes"] for p in peaks) - base.rss_anon_bytes,
            "footprint_rss_file_bytes": max(p["rss_file_bytes"] for p in peaks) - base.rss_file_bytes,
            "seconds_per_step": sorted(later)[len(later) // 2], "step_seconds": times, "loss": loss,
            "optimized_ops": dict(ops), "optimized_nodes": sum(ops.values()), "grad_norms": grads,
            "session_config": config}


def measure_training_model(model, checkpoint, inputs_npz, session_config: dict | None = None, steps: int = 3,
                           threads: int = 1) -> dict:
    cmd = [sys.executable, "-m", "export.ort_footprint", str(model), str(checkpoint), str(inputs_npz),
           json.dumps(session_config or {}), str(steps), str(threads)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(ROOT), check=False)
    if out.returncode != 0:
        raise RuntimeError(f"ORT footprint child failed ({out.returncode}): {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    a = sys.argv[1:]
    print(json.dumps(_child(a[0], a[1], a[2], json.loads(a[3]), int(a[4]), int(a[5]))))
