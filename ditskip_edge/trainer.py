"""The eager trainer: the reference every device runtime is compared against.

    for step in steps:                       # one optimizer step = grad_accum scheduled samples
        for sample in schedule.samples_for_step(step):
            loss = step(x0, noise, t, text, encoded cache entry) / grad_accum ; loss.backward()
                                             # TrainingStep: the cache decoder runs inside the step
        adamw.step(); zero_grad()
        checkpoint every N steps (atomic); log loss

Resumes from the run folder's checkpoint when there is one. Writes the LoRA with diffusers' save_lora_weights.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import torch
from tqdm import tqdm

from .bundle_model import OpenBundle, build_skip_model, open_bundle
from .errors import UserError
from .lora import lora_state_dict, save_lora
from .run_config import RunConfig
from .sample_inputs import sample_noise
from .training_step import TrainingStep

log = logging.getLogger(__name__)
CHECKPOINT = "checkpoint.pt"


TrainConfig = RunConfig


def sample_batch(b: OpenBundle, sample) -> tuple:
    """One scheduled sample's inputs: x0 [1, C, h, w] fp32, noise, t [1], and the *encoded* cache entry (the
    residual parts as stored, decoded by the TrainingStep's decoder)."""
    entry = b.cache.read_encoded(sample.index)
    x0 = entry.pop("x0")
    noise = sample_noise(sample, tuple(x0.shape))
    return x0, noise, torch.tensor([sample.t], dtype=torch.float32), entry


def _atomic_save(obj, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def train_eager(bundle_dir: str | Path, cfg: TrainConfig) -> dict:
    b = open_bundle(bundle_dir)
    model, transformer, names = build_skip_model(b)
    step_fn = TrainingStep(model, b.cache.decoder())
    total = b.schedule.config.steps if cfg.steps is None else cfg.steps
    if total > b.schedule.config.steps or total < 0:
        raise UserError(f"--steps {total}: the bundle's schedule has {b.schedule.config.steps} steps")
    params = [p for n, p in transformer.named_parameters() if p.requires_grad]
    o = b.optimizer
    opt = torch.optim.AdamW(params, lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay)
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt_path = run_dir / CHECKPOINT
    start, losses = 0, []
    if cfg.resume and ckpt_path.is_file():
        ck = torch.load(ckpt_path, weights_only=True)
        if ck["schedule_sha256"] != b.manifest["files"]["subject/schedule.json"]["sha256"]:
            raise UserError(f"{ckpt_path}: checkpoint was made for another schedule; delete it or use another run dir")
        transformer.load_state_dict(ck["lora"], strict=False)
        opt.load_state_dict(ck["optimizer"])
        start, losses = int(ck["step"]), list(ck["losses"])
        log.info("resumed from %s at step %d", ckpt_path, start)

    def checkpoint(step: int) -> None:
        _atomic_save({"step": step, "losses": losses, "optimizer": opt.state_dict(),
                      "lora": {n: p.detach().clone() for n, p in transformer.named_parameters() if p.requires_grad},
                      "schedule_sha256": b.manifest["files"]["subject/schedule.json"]["sha256"]}, ckpt_path)

    accum = b.schedule.config.grad_accum
    t0 = time.perf_counter()
    done_now = 0
    bar = tqdm(range(start, total), desc="train (eager)", unit="step", initial=start, total=total, leave=False)
    for step in bar:
        step_loss = 0.0
        for s in b.schedule.samples_for_step(step):
            x0, noise, t, entry = sample_batch(b, s)
            loss = step_fn(x0, noise, t, b.cond, entry) / accum
            loss.backward()
            step_loss += loss.item()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(step_loss)
        bar.set_postfix(loss=f"{step_loss:.4f}")
        done_now += 1
        if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == total:
            checkpoint(step + 1)
        if cfg.stop_after is not None and done_now >= cfg.stop_after:
            checkpoint(step + 1)
            return {"interrupted_at_step": step + 1, "run_dir": str(run_dir), "losses": losses}
    bar.close()
    seconds = time.perf_counter() - t0
    lora_path = save_lora(b.spec.arch, lora_state_dict(transformer), run_dir / "lora", b.lora, b.kept_block_names)
    summary = {"runtime": "eager", "bundle": str(Path(bundle_dir).resolve()), "run_dir": str(run_dir.resolve()),
               "steps": total, "resumed_from_step": start, "losses": losses,
               "final_loss": losses[-1] if losses else None, "lora": str(lora_path.resolve()),
               "trainable_params": sum(p.numel() for p in params),
               "cache_codec": b.cache.codec.spec,
               "seconds_per_step": round(seconds / max(done_now, 1), 4)}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary
