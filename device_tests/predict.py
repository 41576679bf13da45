"""The memory prediction a device run is capped by: what the bundle says training will need, in bytes.

Sources, first that works wins (Prediction.source names it; Prediction.alternatives keeps the others' totals):
1. "estimate": `ditskip-edge estimate` (ditskip_edge/memory_estimate) for the bundle's model, skip plan, LoRA rank,
   train resolution, text length and the program's precision: its footprint (dirty anonymous memory), with
   runtime_overhead 0 (the child measures the runtime's own overhead as its baseline). It traces the step on fake
   tensors in this (host) process;
2. "memory_report": the train_step program's own memory report (manifest `programs` entry), counting
       program bytes (frozen int8/int4 constants and code, or ORT's training model + checkpoint)
     + planned arena (activations kept for backward, gradients, LoRA weights, temporaries; ExecuTorch)
     + gradient copies handed to the optimizer + AdamW's two moments + one step's inputs (encoded cache entry,
       text conditioning, latents, noise).
None of these counts the interpreter and the runtime library itself: the child measures that as its baseline.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from ditskip_edge.runtime.bundle import PER_PHOTO_TEXT, STORED, Bundle
from ditskip_edge.runtime.contract import TRAIN_STEP, find_program


@dataclass
class Prediction:
    bytes: int
    source: str
    parts: dict[str, int] = field(default_factory=dict)
    alternatives: dict[str, int] = field(default_factory=dict)     # other sources' totals, for comparison
    note: str = ""


def estimate_prediction(bundle: Bundle, program: dict, subject_stage: bool = False,
                        cache_free: bool = False) -> Prediction:
    """The memory estimate's step peak for this bundle, without its assumed runtime overhead. `subject_stage`: the
    run begins with the subject stage (a model bundle): the larger of its footprint and the step's; `cache_free`:
    each step computes its residuals first (the estimate's cache_free footprint)."""
    from ditskip_edge.memory_estimate.request import EstimateRequest, estimate_memory
    m = bundle.manifest
    sched = m["schedule"]
    subject = [p for p in bundle.programs if p.get("name") == "block"]
    mapped = bool(subject) and all(p.get("data") for p in subject)
    doc = estimate_memory(EstimateRequest(
        model=m["model"]["name"], skip_front=int(m["plan"]["n_front"]), skip_back=int(m["plan"]["n_back"]),
        precision=program["precision"], resolution_px=int(sched["s_min_px"]), rank=int(m["lora"]["rank"]),
        text_tokens=int(m["model"]["text"]["seq_len"]), runtime_overhead_mib=0, steps=int(sched["steps"]),
        grad_accum=int(sched["grad_accum"]), subject_stage=subject_stage or cache_free,
        remat=program.get("remat", "none"),
        weights="mapped" if program.get("runtime") == "executorch" and program.get("data") else "resident",
        forward_precision=subject[0]["precision"] if subject else None))
    mem = doc["memory"]
    derived = ("footprint_bytes", "peak_bytes", "file_backed_bytes", "file_backed_working_set_bytes")
    parts = {k: int(v) for k, v in mem.items() if k.endswith("_bytes") and k not in derived}
    total = int(mem["footprint_bytes"])
    if cache_free:
        parts["cache_free_forward_bytes"] = int(doc["cache_free"]["footprint_over_training_bytes"])
        total = int(doc["cache_free"]["footprint_bytes"])
    if subject_stage:
        parts["subject_stage_bytes"] = int(doc["subject_stage"]["footprint_bytes"])
        total = max(total, parts["subject_stage_bytes"])
    note = "forward programs' weights mapped (.ptd)" if mapped else ""
    return Prediction(total, "estimate", parts, note=note)


def step_input_bytes(bundle: Bundle) -> int:
    """One step's inputs as a device holds them: text conditioning + one cache entry (with x0) + the noise."""
    if bundle.kind == "model":
        mb = bundle.field("model_bundle")
        text = bundle.field("files")[mb["prompts"][0]["text_conditioning"]]["bytes"]
        x0 = 4
        for d in mb["entry_shapes"]["x0"]:
            x0 *= int(d)
        return int(text + mb["cache_entry_bytes"] + x0)
    stage = bundle.field("subject_stage")
    text = bundle.field("files")[stage["text_conditioning"]]["bytes"]
    if bundle.text_rows == PER_PHOTO_TEXT:      # per-photo captions: a runtime holds one photo's row at a time
        text = text // len(stage["photos"])
    x0 = 4
    for d in stage["entry_shapes"]["x0"]:
        x0 *= int(d)
    return int(text + stage["cache_entry_bytes"] + x0)


def report_prediction(bundle: Bundle, program: dict) -> Prediction:
    mem = program.get("memory") or {}
    g = lambda k: int(mem.get(k) or 0)  # noqa: E731
    trainable = 4 * sum(int(_prod(s)) for s in program["trainable_shapes"].values())
    parts = {"program_bytes": max(g("pte_bytes"), g("constant_bytes"), g("program_bytes") + g("checkpoint_bytes")),
             "planned_arena_bytes": g("planned_arena_bytes"), "gradient_bytes": trainable,
             "optimizer_state_bytes": 2 * trainable, "input_bytes": step_input_bytes(bundle)}
    return Prediction(sum(parts.values()), "memory_report", parts)


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def predict_memory(bundle_dir: str | Path, runtime: str, use_estimate: bool = True,
                   precision: str | None = None, subject_stage: bool = False, cache_free: bool = False) -> Prediction:
    """The memory estimate when it runs, else the program's memory report; the other figure is kept in
    `alternatives` so a run can be compared with both."""
    bundle = Bundle.open(bundle_dir, verify=False)
    if bundle.kind != "model" and bundle.cache_mode != STORED:      # x0-only, cache-free: the forward each step
        cache_free = True
    program = find_program(bundle.programs, TRAIN_STEP, runtime, precision, str(bundle.root))
    report = report_prediction(bundle, program)
    if not use_estimate:
        return report
    try:
        estimated = estimate_prediction(bundle, program, subject_stage, cache_free)
    except Exception as e:  # noqa: BLE001 - a model the estimate cannot trace: fall back, and say why
        return dataclasses.replace(report, note=f"memory estimate unavailable for this bundle "
                                                f"({type(e).__name__}: {e}); memory report used")
    estimated.alternatives = {report.source: report.bytes}
    return estimated
