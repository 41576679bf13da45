"""The device trainer: runs a bundle's schedule with the ExecuTorch runtime only.

Imports: the ExecuTorch training pybindings, numpy, safetensors (numpy API), the bundle manifest reader and the
portable RNG (both plain Python). No diffusers, peft or exporter: this is what a phone process runs (issue 8).

    program = manifest.programs[train_step, executorch]             # contract: export/contract.py
    for step in range(start, steps):
        for sample in schedule[step * accum : (step + 1) * accum]:
            x0    = cache x0            | preprocess program(photo, crop_box)     (--device-preprocess)
            noise = rng.normal(sample.noise_seed, x0.shape)
            loss  = program.forward_backward(x0, noise, t, cond..., entry...) ; grads += grad / accum
        adamw.step(program.named_parameters(), grads)                  # in place on the runtime's memory
        checkpoint (atomic) every N steps
    write the LoRA as diffusers' save_lora_weights does (same keys, same metadata)
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch   # only as the pybindings' tensor type

from ditskip_edge import rng
from ditskip_edge.bundle import read_manifest
from ditskip_edge.errors import BundleError, UserError
from ditskip_edge.run_config import RunConfig

from .executorch_adamw import AdamW

CHECKPOINT = "checkpoint_executorch.npz"
LORA_FILE = "pytorch_lora_weights.safetensors"


@dataclass
class RuntimeTrainConfig(RunConfig):
    device_preprocess: bool = False        # x0 from the preprocessing program instead of the cache
    quant_bits: int | None = None          # pick the train_step program with these bits (None: the first)
    progress: bool = True


def find_program(manifest: dict, name: str, runtime: str = "executorch", quant_bits: int | None = None,
                 extra: dict | None = None) -> dict:
    programs = manifest.get("programs", [])
    for p in programs if isinstance(programs, list) else []:     # a dict: another runtime's (ORT) programs
        if p["name"] == name and p["runtime"] == runtime and (quant_bits is None or p["quant_bits"] == quant_bits):
            if extra is None or all(p.get(k) == v for k, v in extra.items()):
                return p
    raise BundleError(f"manifest.json: no {runtime} program {name!r}"
                      f"{'' if quant_bits is None else f' with quant_bits {quant_bits}'}; compile with "
                      f"--runtime {runtime}")


class Progress:
    """A one-line progress bar on stderr (what tqdm does, without the dependency)."""

    def __init__(self, total: int, start: int, enabled: bool):
        self.total, self.done, self.enabled, self.t0 = total, start, enabled, time.perf_counter()
        self.first = start

    def update(self, loss: float) -> None:
        self.done += 1
        if not self.enabled:
            return
        rate = (self.done - self.first) / max(time.perf_counter() - self.t0, 1e-9)
        bar = "#" * int(30 * self.done / max(self.total, 1))
        sys.stderr.write(f"\rtrain (executorch) [{bar:<30}] {self.done}/{self.total} loss {loss:.4f} "
                         f"{rate:.2f} step/s")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


class BundleData:
    """The bundle's subject-level data as numpy: schedule, text conditioning, cache entries, photos."""

    def __init__(self, root: Path, manifest: dict):
        from safetensors.numpy import load_file
        self.root, self.manifest = root, manifest
        stage = manifest["subject_stage"]
        sched = json.loads((root / stage["schedule"]).read_text())
        self.config = sched["config"]
        self.samples = sched["samples"]                 # [index, photo, t, crop_box, noise_seed]
        self.cond = load_file(str(root / stage["text_conditioning"]))
        self.cache_dir = root / stage["cache"]
        self.cache_index = json.loads((self.cache_dir / "cache_index.json").read_text())
        self.photos = stage["photos"]
        self._load = load_file
        self._reader = None

    def samples_for_step(self, step: int) -> list:
        a = int(self.config["grad_accum"])
        return self.samples[step * a:(step + 1) * a]

    def entry(self, index: int) -> dict[str, np.ndarray]:
        """One sample's cache entry as stored: per-sample safetensors (contract v1) or, for the sharded cache
        (issue 4, `layout` in the index), that sample's bytes read from its shard and checked against its SHA-256."""
        if "layout" not in self.cache_index:
            return self._load(str(self.cache_dir / self.cache_index["entries"][index]))
        if self._reader is None:
            from ditskip_edge.cache.store import CacheReader
            self._reader = CacheReader(self.cache_dir)
        return {k: v.numpy() for k, v in self._reader.read_encoded(index).items()}

    def photo_pixels(self, photo: int) -> np.ndarray:
        """[1, 3, H, W] float32 in [-1, 1], decoded from the bundle's PNG as images.normalise does."""
        from PIL import Image
        with Image.open(self.root / self.photos[photo]) as im:
            arr = np.asarray(im.convert("RGB"), dtype=np.float32) / 127.5 - 1.0
        return np.ascontiguousarray(arr.transpose(2, 0, 1)[None])


def step_inputs(program: dict, data: BundleData, sample: list, x0: np.ndarray | None) -> list[torch.Tensor]:
    index, _, t, _, noise_seed = sample
    entry = data.entry(index)
    if x0 is None:
        x0 = entry["x0"]
    source = {"x0": x0, "noise": rng.normal(int(noise_seed), tuple(x0.shape)),
              "t": np.array([t], np.float32)}
    source.update({f"cond.{k}": v for k, v in data.cond.items()})
    source.update({f"entry.{k}": v for k, v in entry.items()})
    out = []
    for spec in program["inputs"]:
        a = source.get(spec["name"])
        if a is None:
            raise BundleError(f"program input {spec['name']!r} has no source in the bundle")
        if list(a.shape) != list(spec["shape"]):
            raise BundleError(f"program input {spec['name']}: shape {list(a.shape)}, program expects {spec['shape']}")
        # the program's input dtype: float32, or the cache codec's stored dtype (int8 / uint8 codes, fp16 scales)
        out.append(torch.from_numpy(np.ascontiguousarray(a, dtype=np.dtype(spec.get("dtype", "float32")))))
    return out


class Preprocessor:
    """x0 for a sample on the device: the preprocessing program for the photo's size (patch crop + encoder)."""

    def __init__(self, root: Path, manifest: dict, data: BundleData):
        from executorch.extension.pybindings.portable_lib import _load_for_executorch
        self.data, self.modules, self.root, self.manifest = data, {}, root, manifest
        self._load = _load_for_executorch

    def __call__(self, sample: list) -> np.ndarray:
        _, photo, _, box, _ = sample
        pixels = self.data.photo_pixels(photo)
        hw = list(pixels.shape[2:])
        key = tuple(hw)
        if key not in self.modules:
            prog = next((p for p in self.manifest.get("programs", []) if p["name"] == "preprocess"
                         and p["runtime"] == "executorch" and p["inputs"][0]["shape"][2:] == hw), None)
            if prog is None:
                raise BundleError(f"manifest.json: no executorch preprocess program for photos of {hw} px")
            self.modules[key] = self._load(str(self.root / prog["path"]))
        out = self.modules[key].forward((torch.from_numpy(pixels), torch.tensor(box, dtype=torch.float32)))
        return out[0].numpy()


def _atomic_savez(path: Path, arrays: dict) -> None:
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def write_lora(path: Path, params: dict[str, np.ndarray], program: dict, lora_file: dict) -> Path:
    """The diffusers LoRA file: keys and safetensors metadata exactly as the compiler recorded them from
    save_lora_weights (manifest "lora_file")."""
    from safetensors.numpy import save_file
    tensors = {program["trainable"][n]: np.ascontiguousarray(a) for n, a in params.items()}
    if set(tensors) != set(lora_file["keys"]):
        raise BundleError("manifest.json: the program's trainable parameters do not match lora_file.keys")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata=lora_file["metadata"])
    os.replace(tmp, path)
    return path


def train_executorch(bundle_dir: str | Path, cfg: RuntimeTrainConfig) -> dict:
    from executorch.extension.training import _load_for_executorch_for_training
    root = Path(bundle_dir)
    manifest = read_manifest(root, verify=True)          # refuses any file that does not match the manifest
    program = find_program(manifest, "train_step", quant_bits=cfg.quant_bits)
    data = BundleData(root, manifest)
    total_steps = int(data.config["steps"])
    total = total_steps if cfg.steps is None else cfg.steps
    if not 0 <= total <= total_steps:
        raise UserError(f"--steps {total}: the bundle's schedule has {total_steps} steps")
    accum = int(data.config["grad_accum"])
    module = _load_for_executorch_for_training(str(root / program["path"]))
    preprocess = Preprocessor(root, manifest, data) if cfg.device_preprocess else None
    o = manifest["optimizer"]
    names = list(program["trainable"])
    shapes = [tuple(program["trainable_shapes"][n]) for n in names]
    opt = AdamW(names, shapes, lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"], weight_decay=o["weight_decay"])

    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt = run_dir / CHECKPOINT
    identity = manifest["files"][program["path"]]["sha256"] + manifest["files"][data.manifest["subject_stage"][
        "schedule"]]["sha256"]
    start, losses, resume_state = 0, [], None
    if cfg.resume and ckpt.is_file():
        with np.load(ckpt) as z:
            resume_state = {k: z[k] for k in z.files}
        if str(resume_state["identity"]) != identity:
            raise UserError(f"{ckpt}: checkpoint belongs to another bundle or program; delete it or use another "
                            f"run dir")
        start, losses = int(resume_state["step"]), [float(x) for x in resume_state["losses"]]

    params: dict[str, np.ndarray] | None = None      # numpy views of the runtime's parameter memory

    def forward_backward(sample) -> tuple[float, dict]:
        nonlocal params
        x0 = preprocess(sample) if preprocess is not None else None
        loss = module.forward_backward("forward", step_inputs(program, data, sample, x0))[0]
        if params is None:
            params = {n: t.numpy() for n, t in module.named_parameters().items()}
            if set(params) != set(names):
                raise BundleError("manifest.json: trainable names do not match the program's parameters")
        return float(loss), {n: t.numpy() for n, t in module.named_gradients().items()}

    def checkpoint(step: int) -> None:
        arrays = {"step": np.array(step), "losses": np.array(losses, np.float64), "identity": np.array(identity)}
        arrays.update({f"p/{n}": np.array(a) for n, a in params.items()} if params is not None else {})
        arrays.update({f"opt/{k}": v for k, v in opt.state().items()})
        _atomic_savez(ckpt, arrays)

    bar = Progress(total, start, cfg.progress)
    t0 = time.perf_counter()
    done_now = 0
    for step in range(start, total):
        grads_sum = {n: np.zeros(s, np.float32) for n, s in zip(names, shapes)}
        step_loss = 0.0
        for sample in data.samples_for_step(step):
            loss, grads = forward_backward(sample)
            if resume_state is not None:      # parameters exist only after a first run: restore, then redo
                for n in names:
                    params[n][...] = resume_state[f"p/{n}"]
                opt.load_state({k[4:]: v for k, v in resume_state.items() if k.startswith("opt/")})
                resume_state = None
                loss, grads = forward_backward(sample)
            for n in names:
                grads_sum[n] += grads[n] / np.float32(accum)
            step_loss += loss / accum
        if params is not None:
            opt.step(params, grads_sum)
        losses.append(step_loss)
        bar.update(step_loss)
        done_now += 1
        if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == total:
            checkpoint(step + 1)
        if cfg.stop_after is not None and done_now >= cfg.stop_after:
            checkpoint(step + 1)
            bar.close()
            return {"interrupted_at_step": step + 1, "run_dir": str(run_dir), "losses": losses}
    bar.close()
    seconds = time.perf_counter() - t0
    if params is None:      # zero steps: run once to reach the parameters (the program's initial LoRA)
        forward_backward(data.samples[0])
    if resume_state is not None:
        for n in names:
            params[n][...] = resume_state[f"p/{n}"]
    lora_path = write_lora(run_dir / "lora" / LORA_FILE, params, program, manifest["lora_file"])
    summary = {"runtime": "executorch", "bundle": str(root.resolve()), "run_dir": str(run_dir.resolve()),
               "program": program["path"], "backend": program["backend"], "quant_bits": program["quant_bits"],
               "device_preprocess": cfg.device_preprocess, "steps": total, "resumed_from_step": start,
               "losses": losses, "final_loss": losses[-1] if losses else None, "lora": str(lora_path.resolve()),
               "trainable_params": int(sum(int(np.prod(s)) for s in shapes)),
               "seconds_per_step": round(seconds / max(done_now, 1), 4)}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary
