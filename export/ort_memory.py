"""Memory report for the ORT programs: what is on disk and what one training step holds in RAM.

    checkpoint_bytes   programs/ort/checkpoint (trainable + frozen parameters, integer codes as integers)
    model_bytes        training_model.onnx + eval_model.onnx + optimizer_model.onnx (graphs, no weights)
    peak_rss_bytes     peak resident set of a *fresh* process that imports onnxruntime, loads the bundle's
                       artifacts and runs one training step and one optimizer step (VmHWM of /proc/self/status:
                       whole process, Python and the onnxruntime library included; not ru_maxrss, which a child
                       inherits from its parent across fork + exec on Linux)
    rss_after_import_bytes / rss_after_load_bytes   the same process's resident set before loading and before the
                       step, so the step's own share is peak - after_load

`python -m export.ort_memory BUNDLE` is the child: it imports only the runtime side (export/ort_trainer.py), with
torch made unimportable as on a device (in this environment `import onnxruntime` would otherwise load torch:
onnxruntime/tools/__init__.py imports its torch helpers when torch is installed, about 240 MB of RSS).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ARTIFACT_MODELS = ("training_model", "eval_model", "optimizer_model")


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024          # kB
    raise RuntimeError(f"/proc/self/status has no {field}")


def _rss_bytes() -> int:
    return _status_bytes("VmRSS")


def disk_report(program_dir: Path, artifacts: dict[str, str]) -> dict:
    program_dir = Path(program_dir)
    return {"checkpoint_bytes": (program_dir / artifacts["checkpoint"]).stat().st_size,
            "model_bytes": sum((program_dir / artifacts[k]).stat().st_size for k in ARTIFACT_MODELS),
            "files_bytes": {v: (program_dir / v).stat().st_size for v in artifacts.values()}}


def _child(bundle_dir: str) -> dict:
    """One step as on a phone: torch is made unimportable first (`import onnxruntime` imports it when installed)."""
    sys.modules["torch"] = None
    rss_import = _rss_bytes()
    import numpy as np
    from export.ort_trainer import OrtBundle, open_training
    b = OrtBundle(bundle_dir, verify=False)
    _, module, optimizer = open_training(b)
    inputs = b.step_inputs(b.samples[0])
    rss_load = _rss_bytes()
    loss = float(np.asarray(module(*inputs)))
    optimizer.step()
    module.lazy_reset_grad()
    peak = _status_bytes("VmHWM")
    return {"peak_rss_bytes": peak, "rss_after_import_bytes": rss_import, "rss_after_load_bytes": rss_load,
            "step_loss": loss, "torch_available": sys.modules.get("torch") is not None}


def measure_step_memory(bundle_dir: str | Path) -> dict:
    """Run one step in a fresh Python process and return its memory figures plus the on-disk sizes."""
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-m", "export.ort_memory", str(bundle_dir)], capture_output=True,
                         text=True, env=env, cwd=str(root), check=False)
    if out.returncode != 0:
        raise RuntimeError(f"memory probe failed ({out.returncode}): {out.stderr[-2000:]}")
    report = json.loads(out.stdout.strip().splitlines()[-1])
    manifest = json.loads((Path(bundle_dir) / "manifest.json").read_text())
    report.update(disk_report(Path(bundle_dir) / "programs" / "ort", manifest["programs"]["ort"]["artifacts"]))
    return report


if __name__ == "__main__":
    print(json.dumps(_child(sys.argv[1])))
