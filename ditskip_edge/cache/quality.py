"""What a cache codec costs and loses on one bundle: bytes per sample, coding error, and the change of training loss.

    reference = fp32 residuals per sample   (the bundle's own cache when it is fp32, else recomputed with the
                                              full frozen model from the cache's fp32 x0 and the schedule's noise)
    for codec in codecs:
        bytes per sample (stored, 64-byte aligned), ratio to fp32
        relative error ||d_hat - d|| / ||d||, mean and max over samples and residuals (and per residual)
        a fixed short training run (same LoRA init, same schedule) on the decoded-in-step codec, against fp32:
            per-step |loss - loss_fp32| / loss_fp32, mean and max

Used by `ditskip-edge cache-report` and benchmarks/cache_codecs.py.
"""

from __future__ import annotations

import logging

import torch

from ..runtime.cache_format import X0, CacheCodec, entry_layout
from .codecs import decoder_for, encode_entry
from .store import decoded_entry, torch_entry

log = logging.getLogger(__name__)

REPORT_CODECS = ["fp32", "fp16", "int8-token", "int8-channel", "int8-t32", "int4-g32", "int4-g64", "int4-t32",
                 "lowrank-r16", "int8-channel,front.txt=lowrank-r16", "int4-t32,front.txt=lowrank-r16"]


def reference_entries(b, samples: list[int]) -> list[dict[str, torch.Tensor]]:
    """fp32 entries {"x0", residuals...} for the given sample indices of an open bundle."""
    if b.cache.codec.spec == "fp32":
        return [decoded_entry(b.cache, k) for k in samples]
    from ..runtime.errors import UserError
    from ..models.loading import build_transformer
    from ..models.views import make_view
    from ..sample_inputs import sample_noise
    from ..skip_model import compute_residuals
    if not b.spec.has_weights:
        raise UserError(f"{b.root}: cache codec is {b.cache.codec.spec} and model '{b.spec.name}' has no weights "
                        f"here to recompute the fp32 reference")
    log.info("recomputing fp32 residuals with the full model for %d samples", len(samples))
    view = make_view(b.spec.arch, build_transformer(b.spec))
    out = []
    for k in samples:
        s = b.schedule.samples[k]
        x0 = torch_entry(b.cache, k)[X0].clone()
        res = compute_residuals(view, b.plan, x0, sample_noise(s, tuple(x0.shape)), torch.tensor([s.t]),
                                b.cond_for(s.photo))
        out.append({X0: x0, **res})
    return out


def codec_cost(codec: CacheCodec, shapes: dict[str, tuple[int, ...]]) -> dict:
    """Stored bytes of one sample (64-byte aligned entry; residual parts alone) and the ratios to fp32."""
    layout, entry = entry_layout(codec, shapes)
    ref_layout, ref_entry = entry_layout(CacheCodec.parse("fp32"), shapes)
    res = sum(v["bytes"] for k, v in layout.items() if k != X0)
    ref_res = sum(v["bytes"] for k, v in ref_layout.items() if k != X0)
    return {"entry_bytes_per_sample": entry, "residual_bytes_per_sample": res,
            "ratio_to_fp32": round(ref_entry / entry, 3), "residual_ratio_to_fp32": round(ref_res / res, 3)}


def codec_error(codec: CacheCodec, refs: list[dict[str, torch.Tensor]]) -> dict:
    """Relative error of every residual of every sample after encode -> in-graph decode."""
    shapes = {k: tuple(v.shape) for k, v in refs[0].items()}
    dec = decoder_for(codec, shapes)
    per: dict[str, list[float]] = {}
    with torch.no_grad():
        for e in refs:
            out = dec(encode_entry(codec, e))
            for k, d_hat in out.items():
                per.setdefault(k, []).append(float((d_hat - e[k]).norm() / e[k].norm().clamp_min(1e-30)))
    allv = [x for v in per.values() for x in v]
    return {"rel_error_mean": sum(allv) / len(allv), "rel_error_max": max(allv),
            "rel_error_by_residual": {k: {"mean": sum(v) / len(v), "max": max(v)} for k, v in per.items()}}


class LossRunner:
    """The runtime's training loop with the eager step (in memory: no checkpoint, no files) over the first steps of
    the schedule, rerun for each codec from the same initial LoRA (the skip model is built once: building it is the
    slow part). Each codec's entries are the fp32 references encoded with it, decoded inside the step."""

    def __init__(self, b, refs: dict[int, dict[str, torch.Tensor]]):
        from ..eager import EagerStep
        self.b, self.refs = b, refs
        self.shapes = {k: tuple(v.shape) for k, v in next(iter(refs.values())).items()}
        self.adapter = EagerStep(b.bundle, decoder_for("fp32", self.shapes))
        self.init = {n: a.copy() for n, a in self.adapter.parameters().items()}

    def run(self, codec: CacheCodec, steps: int) -> list[float]:
        from ..runtime.inputs import StepInputs
        from ..runtime.loop import RunConfig, train
        self.adapter.reset_lora(self.init)
        self.adapter.step_fn.decoder = decoder_for(codec, self.shapes)
        encoded = StepInputs(self.b.bundle, entry_from=lambda s: {
            k: v.numpy() for k, v in encode_entry(codec, self.refs[s.index]).items()})
        summary = train(self.b.bundle, self.adapter, RunConfig(run_dir=None, steps=steps, progress=False), encoded)
        return summary["losses"]


def cache_report(b, codecs: list[str] | None = None, max_samples: int = 32, train_steps: int = 10) -> dict:
    """The cache-report table for an open bundle (see module docstring)."""
    if b.cache is None:
        from ..runtime.errors import UserError
        raise UserError(f"{b.root}: no residual cache to report on (a model bundle or a cache-free bundle)")
    codecs = list(dict.fromkeys((codecs or REPORT_CODECS) + [b.cache.codec.spec]))
    n = min(len(b.cache), max_samples)
    train_steps = min(train_steps, b.schedule.config.steps)
    need = sorted(set(range(n)) | {s.index for st in range(train_steps) for s in b.schedule.samples_for_step(st)})
    refs = dict(zip(need, reference_entries(b, need)))
    shapes = {k: tuple(v.shape) for k, v in refs[need[0]].items()}
    runner = LossRunner(b, refs) if train_steps else None
    ref_losses = runner.run(CacheCodec.parse("fp32"), train_steps) if train_steps else []
    rows = []
    for spec in codecs:
        codec = CacheCodec.parse(spec)
        row = {"codec": codec.spec, **codec_cost(codec, shapes), **codec_error(codec, [refs[k] for k in range(n)])}
        if train_steps:
            losses = ref_losses if codec.spec == "fp32" else runner.run(codec, train_steps)
            rel = [abs(a - r) / abs(r) for a, r in zip(losses, ref_losses)]
            row.update(loss_rel_change_mean=sum(rel) / len(rel), loss_rel_change_max=max(rel), losses=losses)
        rows.append(row)
    return {"bundle": str(b.root), "model": b.spec.name, "plan": b.plan.to_json(), "bundle_codec": b.cache.codec.spec,
            "entry_shapes": {k: list(v) for k, v in shapes.items()}, "samples_measured": n,
            "train_steps": train_steps, "grad_accum": b.schedule.config.grad_accum,
            "reference": "bundle cache (fp32)" if b.cache.codec.spec == "fp32" else "recomputed with the full model",
            "fp32_losses": ref_losses, "codecs": rows}
