"""The ONNX Runtime trainer: runs a bundle's whole schedule with onnxruntime.training.api only.

    state = CheckpointState.load_checkpoint(programs/ort/checkpoint   or   RUN/ort_checkpoint to resume)
    module, optimizer = Module(training_model.onnx, state), Optimizer(optimizer_model.onnx, module)
    for step in steps:                                 # one optimizer step = grad_accum scheduled samples
        for sample in schedule[step]:
            module(x0, noise, t, cond.*, entry.*, 1 / grad_accum)   # loss; gradients accumulate in the module
        optimizer.step(); module.lazy_reset_grad()
        checkpoint every N steps (atomic, optimizer moments and step count included)
    LoRA -> RUN/lora/pytorch_lora_weights.safetensors (the diffusers file: keys and metadata from the bundle)

Imports: onnxruntime, numpy, safetensors and the torch-free parts of ditskip_edge (rng, bundle, errors) only, so a
process that has just the runtime installed runs it (no torch, diffusers or peft). Note: the onnxruntime-training
1.19.2 wheel's `onnxruntime/training/__init__.py` imports torch (its amp/optim helpers), so a plain
`import onnxruntime.training.api` fails without torch and drags torch in with it; `_training_api` loads the `api`
subpackage alone.
"""

from __future__ import annotations

import json
import os
import sys
import time
import types
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from ditskip_edge import rng
from ditskip_edge.bundle import read_manifest
from ditskip_edge.errors import BundleError, UserError
from ditskip_edge.run_config import RunConfig



def _training_api():
    """onnxruntime.training.api without executing onnxruntime/training/__init__.py (which imports torch)."""
    if "onnxruntime.training" not in sys.modules:
        import onnxruntime
        onnxruntime.set_default_logger_severity(3)      # no per-initializer warnings on stderr
        package = types.ModuleType("onnxruntime.training")
        package.__path__ = [os.path.join(os.path.dirname(onnxruntime.__file__), "training")]
        sys.modules["onnxruntime.training"] = package
    from onnxruntime.training import api
    return api


_api = _training_api()
CheckpointState, Module, Optimizer = _api.CheckpointState, _api.Module, _api.Optimizer

PROGRAM_DIR = "programs/ort"
RUN_CHECKPOINT = "ort_checkpoint"
RUNTIME = "ort"


OrtTrainConfig = RunConfig


_NP_DTYPES = {"float32": np.float32, "float16": np.float16, "int8": np.int8, "uint8": np.uint8}


class CacheEntries:
    """Reads one sample's stored (encoded) cache entry as numpy arrays, for both cache layouts:
    one safetensors file per sample (`entries` = file names), or binary shards with a fixed per-entry `layout`
    (`entries` = {shard, offset, bytes, sha256}; only that sample's bytes are read, and their SHA-256 checked)."""

    def __init__(self, cache_dir: Path):
        self.dir = Path(cache_dir)
        ipath = self.dir / "cache_index.json"
        if not ipath.is_file():
            raise BundleError(f"{ipath}: residual cache index missing")
        self.index = json.loads(ipath.read_text())
        self.entries = self.index["entries"]
        self.layout = self.index.get("layout")

    def __len__(self) -> int:
        return len(self.entries)

    def read_encoded(self, i: int) -> dict[str, np.ndarray]:
        if self.layout is None:
            return load_file(str(self.dir / self.entries[i]))
        import hashlib
        e = self.entries[i]
        with open(self.dir / e["shard"], "rb") as f:
            f.seek(int(e["offset"]))
            raw = f.read(int(e["bytes"]))
        if len(raw) != e["bytes"] or hashlib.sha256(raw).hexdigest() != e["sha256"]:
            raise BundleError(f"{self.dir / e['shard']}: entry {i} does not match its SHA-256 (corrupt)")
        out = {}
        for name, info in self.layout.items():
            count = int(np.prod(info["shape"], dtype=np.int64))
            out[name] = np.frombuffer(raw, dtype=_NP_DTYPES[info["dtype"]], count=count,
                                      offset=int(info["offset"])).reshape(info["shape"])
        return out


class OrtBundle:
    """What the runtime reads from a bundle: the ORT program section, schedule, text conditioning, cache entries."""

    def __init__(self, bundle_dir: str | Path, verify: bool = True):
        self.root = Path(bundle_dir)
        self.manifest = read_manifest(self.root, verify=verify)
        programs = self.manifest.get("programs")
        if not isinstance(programs, dict) or "ort" not in programs:
            raise BundleError(f"{self.root / 'manifest.json'}: no ORT programs in this bundle; compile with --runtime ort")
        try:
            self.program = programs["ort"]
            self.schedule = json.loads((self.root / self.manifest["subject_stage"]["schedule"]).read_text())
            text = self.manifest["subject_stage"]["text_conditioning"]
            cache_dir = self.root / self.manifest["subject_stage"]["cache"]
        except KeyError as e:
            raise BundleError(f"{self.root / 'manifest.json'}: missing field {e} (compile with --runtime ort)") from e
        self.program_dir = self.root / PROGRAM_DIR
        self.cond = load_file(str(self.root / text))
        self.cache = CacheEntries(cache_dir)
        fields = self.schedule["sample_fields"]
        self.samples = [dict(zip(fields, s)) for s in self.schedule["samples"]]
        self.grad_accum = int(self.schedule["config"]["grad_accum"])
        self.total_steps = int(self.schedule["config"]["steps"])
        self.input_names = list(self.program["inputs"]["inputs"])
        self.input_dtypes = dict(self.program["input_dtypes"])

    def artifact(self, key: str) -> Path:
        return self.program_dir / self.program["artifacts"][key]

    def samples_for_step(self, step: int) -> list[dict]:
        a = self.grad_accum
        return self.samples[step * a:(step + 1) * a]

    def step_inputs(self, sample: dict) -> list[np.ndarray]:
        """The training graph's inputs for one scheduled sample, in graph order."""
        entry = self.cache.read_encoded(int(sample["index"]))
        x0 = entry["x0"]
        values = {"x0": x0, "noise": rng.normal(int(sample["noise_seed"]), tuple(x0.shape)),
                  "t": np.array([sample["t"]], dtype=np.float32), "loss_weight": np.array([1.0 / self.grad_accum],
                                                                                          dtype=np.float32)}
        values.update({f"cond.{k}": v for k, v in self.cond.items()})
        values.update({f"entry.{k}": v for k, v in entry.items() if k != "x0"})
        missing = [n for n in self.input_names if n not in values]
        if missing:
            raise BundleError(f"{self.cache.dir}: sample {sample['index']} lacks graph inputs {missing}")
        return [np.ascontiguousarray(values[n], dtype=self.input_dtypes.get(n, "float32")) for n in self.input_names]


def open_training(b: OrtBundle, checkpoint: Path | None = None) -> tuple[CheckpointState, Module, Optimizer]:
    """Load a checkpoint (the bundle's initial one by default) and build the training module and optimizer.
    Parameters must be set through the state only after Module() is built (before, ORT 1.19.2 crashes)."""
    state = CheckpointState.load_checkpoint(str(checkpoint or b.artifact("checkpoint")))
    module = Module(str(b.artifact("training_model")), state, str(b.artifact("eval_model")))
    optimizer = Optimizer(str(b.artifact("optimizer_model")), module)
    optimizer.set_learning_rate(float(b.program["optimizer"]["lr"]))
    module.train()
    return state, module, optimizer


def lora_arrays(b: OrtBundle, state: CheckpointState) -> dict[str, np.ndarray]:
    """Trainable parameters under their diffusers LoRA file keys."""
    fmt = json.loads((b.program_dir / b.program["lora_format"]).read_text())
    return {key: np.ascontiguousarray(state.parameters[name].data) for name, key in fmt["keys"].items()}


def save_lora_file(b: OrtBundle, state: CheckpointState, out_dir: Path) -> Path:
    fmt = json.loads((b.program_dir / b.program["lora_format"]).read_text())
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / fmt["file"]
    save_file(lora_arrays(b, state), str(path), metadata=fmt["metadata"])
    return path


def _save_checkpoint(state: CheckpointState, path: Path, step: int, losses: list[float], bundle_id: str) -> None:
    state.properties["step"] = int(step)
    state.properties["losses"] = json.dumps(losses)
    state.properties["bundle_schedule_sha256"] = bundle_id
    tmp = path.with_name(path.name + ".tmp")
    CheckpointState.save_checkpoint(state, str(tmp), include_optimizer_state=True)
    os.replace(tmp, path)


class _Progress:
    """One self-overwriting line on stderr (DITSKIP_PROGRESS=0 turns it off)."""

    def __init__(self, total: int, start: int):
        self.total, self.start, self.t0 = total, start, time.perf_counter()
        self.enabled = os.environ.get("DITSKIP_PROGRESS", "1") != "0"

    def update(self, step: int, loss: float) -> None:
        if not self.enabled:
            return
        rate = (step - self.start) / max(time.perf_counter() - self.t0, 1e-9)
        sys.stderr.write(f"\rtrain (ort) {step}/{self.total} loss={loss:.4f} {rate:.2f} step/s")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def train_ort(bundle_dir: str | Path, cfg: OrtTrainConfig) -> dict:
    b = OrtBundle(bundle_dir)
    total = b.total_steps if cfg.steps is None else cfg.steps
    if total > b.total_steps or total < 0:
        raise UserError(f"--steps {total}: the bundle's schedule has {b.total_steps} steps")
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt_path = run_dir / RUN_CHECKPOINT
    bundle_id = b.manifest["files"][b.manifest["subject_stage"]["schedule"]]["sha256"]
    resume = cfg.resume and ckpt_path.is_file()
    state, module, optimizer = open_training(b, ckpt_path if resume else None)
    start, losses = 0, []
    if resume:
        if state.properties["bundle_schedule_sha256"] != bundle_id:
            raise UserError(f"{ckpt_path}: checkpoint belongs to another bundle; delete it or use another run dir")
        start, losses = int(state.properties["step"]), json.loads(state.properties["losses"])

    t0 = time.perf_counter()
    done_now = 0
    bar = _Progress(total, start)
    for step in range(start, total):
        step_loss = 0.0
        for sample in b.samples_for_step(step):
            step_loss += float(np.asarray(module(*b.step_inputs(sample))))
        optimizer.step()
        module.lazy_reset_grad()
        losses.append(step_loss)
        done_now += 1
        bar.update(step + 1, step_loss)
        if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == total:
            _save_checkpoint(state, ckpt_path, step + 1, losses, bundle_id)
        if cfg.stop_after is not None and done_now >= cfg.stop_after:
            _save_checkpoint(state, ckpt_path, step + 1, losses, bundle_id)
            bar.close()
            return {"interrupted_at_step": step + 1, "run_dir": str(run_dir), "losses": losses}
    bar.close()
    seconds = time.perf_counter() - t0
    lora_path = save_lora_file(b, state, run_dir / "lora")
    summary = {"runtime": RUNTIME, "bundle": str(b.root.resolve()), "run_dir": str(run_dir.resolve()),
               "steps": total, "resumed_from_step": start, "losses": losses,
               "final_loss": losses[-1] if losses else None, "lora": str(lora_path.resolve()),
               "trainable_params": int(b.program["trainable_params"]),
               "optimizer": f"AdamW ({b.program['optimizer']['variant']})",
               "quant_bits": b.program["quant"]["bits"],
               "seconds_per_step": round(seconds / max(done_now, 1), 4)}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary
