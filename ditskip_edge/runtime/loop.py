"""The training loop: one for every runtime, in Python here and line for line in the demo apps.

    adapter = ExecutorchStep(bundle) | OrtStep(bundle) | EagerStep(bundle)      # what computes loss and gradients
    for step in steps:                                 # one optimizer step = grad_accum scheduled samples
        adapter.zero_grad()
        for sample in schedule.samples_for_step(step):
            loss += adapter.accumulate(inputs(sample), grad_accum)   # adds d(loss / grad_accum) / d(params)
        optimizer.set_lr(optimizer_spec.lr_at(step, steps))   # the bundle's rate schedule (constant or linear)
        optimizer.step(params, gradients)              # AdamW (runtime/adamw.py; torch.optim.AdamW for eager)
        checkpoint every N steps (runtime/checkpoint.py, atomic); progress on stderr
    LoRA -> RUN/lora/pytorch_lora_weights.safetensors (runtime/lora_file.py), summary -> RUN/summary.json

A step adapter (`StepAdapter`) is small: `accumulate`, `gradients`, `zero_grad`, `parameters`, `set_parameters`,
`lora_keys`, and what identifies the program it runs. With `run_dir=None` the loop runs in memory (no checkpoint,
no files): cache-report's fixed run uses that.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .adamw import AdamW
from .bundle import Bundle, OptimizerSpec
from .checkpoint import CHECKPOINT, Checkpoint, run_identity
from .errors import UserError
from .footprint import read_footprint
from .inputs import NamedInputs, StepInputs
from .safetensors_io import write_lora
from .progress import Progress
from .schedule import Sample

LORA_DIR = "lora"
SUMMARY = "summary.json"


@dataclass
class RunConfig:
    run_dir: Path | None              # where checkpoint, LoRA and summary go; None: in memory, nothing written
    steps: int | None = None          # None: the whole schedule
    checkpoint_every: int = 50
    resume: bool = True
    stop_after: int | None = None     # stop (as if interrupted) after this many steps in this call: for tests
    progress: bool = True


class StepAdapter:
    """What the loop needs from a runtime. Subclasses set `runtime` and `program_sha256` and implement
    `accumulate`, `gradients`, `zero_grad`, `parameters`, `lora_keys`."""

    runtime = "?"
    program_sha256 = ""

    def prepare(self, example: NamedInputs) -> None:
        """Called once before anything else, with the first sample's inputs (ExecuTorch's parameters exist only
        after one forward-backward)."""

    def accumulate(self, inputs: NamedInputs, grad_accum: int) -> float:
        """Forward + backward of one sample; adds the gradients of loss / grad_accum; returns loss / grad_accum."""
        raise NotImplementedError

    def gradients(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def zero_grad(self) -> None:
        raise NotImplementedError

    def parameters(self) -> dict[str, np.ndarray]:
        """The trainable parameters, fp32, by the program's names. Live views where the runtime allows it."""
        raise NotImplementedError

    def set_parameters(self, values: dict[str, np.ndarray]) -> None:
        live = self.parameters()
        for name, v in values.items():
            if not np.shares_memory(live[name], v):
                live[name][...] = v

    def lora_keys(self) -> dict[str, str]:
        """Program parameter name -> LoRA file key."""
        raise NotImplementedError

    def make_optimizer(self, spec: OptimizerSpec):
        params = self.parameters()
        return AdamW(list(params), [a.shape for a in params.values()], lr=spec.lr, betas=spec.betas, eps=spec.eps,
                     weight_decay=spec.weight_decay)

    def describe(self) -> dict:
        return {}


def steps_to_run(bundle: Bundle, steps: int | None) -> int:
    total = bundle.schedule.config.steps
    if steps is None:
        return total
    if not 1 <= steps <= total:
        raise UserError(f"--steps {steps}: expected 1 to {total} (the bundle's schedule has {total} steps)")
    return steps


def train(bundle: Bundle, adapter: StepAdapter, cfg: RunConfig,
          inputs: Callable[[Sample], NamedInputs] | None = None) -> dict:
    schedule = bundle.schedule
    total = steps_to_run(bundle, cfg.steps)
    inputs = inputs or StepInputs(bundle)
    accum = schedule.config.grad_accum
    adapter.prepare(inputs(schedule.samples[0]))
    optimizer_spec = bundle.optimizer
    optimizer = adapter.make_optimizer(optimizer_spec)
    identity = run_identity(adapter.runtime, adapter.program_sha256, bundle.manifest_sha256)
    run_dir = Path(cfg.run_dir) if cfg.run_dir is not None else None
    start, losses = 0, []
    if run_dir is not None:
        run_dir.mkdir(parents=True, exist_ok=True)
        ckpt_path = run_dir / CHECKPOINT
        if cfg.resume and ckpt_path.is_file():
            ck = Checkpoint.load(ckpt_path, identity)
            if set(ck.params) != set(adapter.parameters()):
                raise UserError(f"{ckpt_path}: its parameters are not the program's; delete it or pass --no-resume")
            adapter.set_parameters(ck.params)
            optimizer.load_state(ck.optimizer)
            start, losses = ck.step, ck.losses

    def checkpoint(step: int) -> None:
        if run_dir is not None:
            Checkpoint(step, losses, identity, adapter.parameters(), optimizer.state()).save(run_dir / CHECKPOINT)

    bar = Progress(f"train ({adapter.runtime})", total, start, cfg.progress)
    t0 = time.perf_counter()
    done_now = 0
    at_start = read_footprint()             # the program loaded and run once (prepare): what each step adds is on top
    per_step = []
    for step in range(start, total):
        adapter.zero_grad()
        step_loss = 0.0
        for sample in schedule.samples_for_step(step):
            step_loss += adapter.accumulate(inputs(sample), accum)
        params = adapter.parameters()
        optimizer.set_lr(optimizer_spec.lr_at(step, schedule.config.steps))
        optimizer.step(params, adapter.gradients())
        adapter.set_parameters(params)
        losses.append(step_loss)
        bar.update(step_loss)
        done_now += 1
        now = read_footprint()
        if now is not None:
            per_step.append([now.anon_bytes, now.file_bytes])
        if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == total:
            checkpoint(step + 1)
        if cfg.stop_after is not None and done_now >= cfg.stop_after and step + 1 < total:
            checkpoint(step + 1)
            bar.close()
            return {"interrupted_at_step": step + 1, "run_dir": str(run_dir) if run_dir else None, "losses": losses}
    bar.close()
    seconds = time.perf_counter() - t0
    summary = {"runtime": adapter.runtime, "bundle": str(bundle.root.resolve()), "steps": total,
               "resumed_from_step": start, "losses": losses, "final_loss": losses[-1] if losses else None,
               "trainable_params": int(sum(a.size for a in adapter.parameters().values())),
               "cache_codec": bundle.field("subject_stage", "cache_codec"),
               "seconds_per_step": round(seconds / max(done_now, 1), 4), **adapter.describe()}
    if at_start is not None:
        summary["footprint"] = {"what": "RssAnon (dirty anonymous: what a phone counts) and RssFile (file-backed), "
                                        "bytes, of this process after the program's first run and after each step",
                                "at_start": at_start.to_json(), "per_step_fields": ["anon_bytes", "file_bytes"],
                                "per_step": per_step,
                                "peak_anon_above_start_bytes": max((a for a, _ in per_step), default=0)
                                - at_start.anon_bytes}
    if run_dir is not None:
        lora = write_lora(run_dir / LORA_DIR, adapter.parameters(), adapter.lora_keys(), bundle.field("lora_file"))
        summary.update(run_dir=str(run_dir.resolve()), lora=str(lora.resolve()))
        (run_dir / SUMMARY).write_text(json.dumps(summary, indent=1))
    return summary
