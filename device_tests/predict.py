"""The memory prediction a device run is capped by: what the bundle says training will need, in bytes.

Sources, first that works wins (Prediction.source names it; Prediction.alternatives keeps the others' totals):
1. "planner": `ditskip-edge plan` (ditskip_edge/planner, issue 7) for the bundle's model, skip plan, LoRA rank,
   train resolution, text length and the program's frozen-weight bits, with runtime_overhead 0 (the child measures
   the runtime's own overhead as its baseline). It traces the step on fake tensors in this (host) process;
2. "memory_report": the exported program's own memory report (issue 5 / 6 exporters), counting
       program bytes (file loaded into memory: frozen int8/int4 constants and code)
     + planned arena (activations kept for backward, gradients, LoRA weights, temporaries; ExecuTorch)
     + gradient copies handed to the optimizer + AdamW's two moments + one step's inputs (encoded cache entry,
       text conditioning, latents, noise);
3. "artifact_sizes" (ORT without a report): the artifacts' file bytes + optimizer state + one step's inputs, plus
   the ExecuTorch arena of the same bundle's program when there is one (same graph) for the activations.
None of these counts the interpreter and the runtime library itself: the child measures that as its baseline.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from ditskip_edge.errors import BundleError


@dataclass
class Prediction:
    bytes: int
    source: str
    parts: dict[str, int] = field(default_factory=dict)
    alternatives: dict[str, int] = field(default_factory=dict)     # other sources' totals, for comparison
    note: str = ""


def _program_bits(manifest: dict, runtime: str) -> int:
    progs = manifest.get("programs", {})
    if isinstance(progs, list):
        for p in progs:
            if p.get("runtime") == runtime and p.get("name") == "train_step":
                return int(p.get("quant_bits", 16))
    elif isinstance(progs, dict) and runtime in progs:
        return int(progs[runtime].get("quant", {}).get("bits", 16))
    return 16


def planner_prediction(root: Path, manifest: dict, runtime: str) -> Prediction:
    """The planner's predicted step peak for this bundle, without its assumed runtime overhead."""
    from ditskip_edge.planner.request import PlanRequest, make_plan
    sched = manifest["schedule"]
    doc = make_plan(PlanRequest(model=manifest["model"]["name"], skip_front=int(manifest["plan"]["n_front"]),
                                skip_back=int(manifest["plan"]["n_back"]), bits=_program_bits(manifest, runtime),
                                resolution_px=int(sched["s_min_px"]), rank=int(manifest["lora"]["rank"]),
                                text_tokens=int(manifest["model"]["text"]["seq_len"]), runtime_overhead_mib=0,
                                steps=max(int(sched["steps"]), 1), grad_accum=int(sched["grad_accum"])))
    mem = doc["memory"]
    parts = {k: int(v) for k, v in mem.items() if k.endswith("_bytes") and k != "peak_bytes"}
    return Prediction(int(mem["peak_bytes"]), "planner", parts)


def _programs(manifest: dict) -> dict[str, dict]:
    """manifest `programs` as {runtime: section}; accepts a dict keyed by runtime or a list of entries."""
    progs = manifest.get("programs", {})
    if isinstance(progs, list):
        out: dict[str, dict] = {}
        for p in progs:
            if p.get("name", "train_step") == "train_step":
                out.setdefault(p.get("runtime", ""), p)
        return out
    return dict(progs)


def _find_memory(section: dict, root: Path) -> dict | None:
    mem = section.get("memory")
    if isinstance(mem, dict):
        return mem
    if isinstance(mem, str) and (root / mem).is_file():
        return json.loads((root / mem).read_text())
    for prog in section.get("programs", []) if isinstance(section.get("programs"), list) else []:
        if prog.get("name") == "train_step" and isinstance(prog.get("memory"), dict):
            return prog["memory"]
    return None


def _report_parts(mem: dict, trainable_bytes: int) -> dict[str, int]:
    g = lambda k: int(mem.get(k) or 0)  # noqa: E731
    program = max(g("pte_bytes"), g("program_bytes"), g("constant_bytes"), g("checkpoint_bytes") + g("model_bytes"))
    trainable = g("trainable_bytes") or trainable_bytes
    return {"program_bytes": program, "planned_arena_bytes": g("planned_arena_bytes"),
            "gradient_bytes": g("gradient_bytes") or trainable,
            "optimizer_state_bytes": g("optimizer_state_bytes") or 2 * trainable}


def step_input_bytes(root: Path, manifest: dict) -> int:
    """One step's inputs as a device holds them: text conditioning + one cache entry (with x0) + the noise (x0's
    size again), from the bundle's files (their sizes as listed in the manifest)."""
    files = manifest.get("files", {})
    stage = manifest.get("subject_stage", {})
    text = files.get(stage.get("text_conditioning", ""), {}).get("bytes", 0)
    cache = stage.get("cache", "subject/cache")
    entries = [v["bytes"] for k, v in files.items() if k.startswith(cache + "/") and not k.endswith(".json")]
    n = max(int(stage.get("num_samples", 0)), 1)
    entry = (sum(entries) // n) if entries else 0
    x0 = 4
    for d in stage.get("entry_shapes", {}).get("x0", []):
        x0 *= int(d)
    return int(text + entry + x0)


_CACHE: dict[tuple, Prediction] = {}


def predict_memory(bundle: str | Path, runtime: str, use_planner: bool = True) -> Prediction:
    """The planner's prediction when it runs, else the exported memory report; the other figure is kept in
    `alternatives` so a run can be compared with both. Cached per (manifest content, runtime) in this process."""
    root = Path(bundle)
    text = (root / "manifest.json").read_text()
    key = (hashlib.sha256(text.encode()).hexdigest(), runtime, use_planner)
    if key not in _CACHE:
        _CACHE[key] = _predict(root, json.loads(text), runtime, use_planner)
    return dataclasses.replace(_CACHE[key])


def _predict(root: Path, manifest: dict, runtime: str, use_planner: bool) -> Prediction:
    report = report_prediction(root, manifest, runtime)
    if not use_planner:
        return report
    try:
        planned = planner_prediction(root, manifest, runtime)
    except Exception as e:  # noqa: BLE001 - a model the planner cannot trace: fall back, and say why
        report.note = f"planner unavailable for this bundle ({type(e).__name__}: {e}); memory report used"
        return report
    planned.alternatives = {report.source: report.bytes}
    return planned


def report_prediction(root: Path, manifest: dict, runtime: str) -> Prediction:
    progs = _programs(manifest)
    key = runtime if runtime in progs else {"ort": "onnxruntime-training"}.get(runtime, runtime)
    if key not in progs:
        raise BundleError(f"{root / 'manifest.json'}: no programs for runtime {runtime!r} (has {sorted(progs)}); "
                          f"compile the bundle with --runtime {runtime}")
    section = progs[key]
    mem = _find_memory(section, root)
    trainable_bytes = 4 * int(section.get("trainable_params", 0))
    if mem is not None:
        parts = _report_parts(mem, trainable_bytes)
        parts["input_bytes"] = step_input_bytes(root, manifest)
        if runtime != "executorch" and not parts["planned_arena_bytes"]:
            et_mem = _find_memory(progs["executorch"], root) if "executorch" in progs else None
            if et_mem is not None:     # ORT plans no arena up front: the same graph's ExecuTorch arena stands in
                parts["planned_arena_bytes"] = int(et_mem.get("planned_arena_bytes", 0))
        return Prediction(sum(parts.values()), "memory_report", parts)
    if runtime == "ort":
        pdir = root / "programs" / "ort"
        arts = {k: (pdir / v).stat().st_size for k, v in section.get("artifacts", {}).items() if (pdir / v).is_file()}
        trainable_bytes = 4 * int(section.get("trainable_params", 0))
        parts = {f"{k}_file_bytes": v for k, v in arts.items()}
        parts["optimizer_state_bytes"] = 2 * trainable_bytes
        parts["gradient_bytes"] = trainable_bytes
        parts["input_bytes"] = step_input_bytes(root, manifest)
        et = progs.get("executorch")
        et_mem = _find_memory(et, root) if et else None
        if et_mem is not None:
            parts["activation_bytes_from_executorch_arena"] = int(et_mem.get("planned_arena_bytes", 0))
        return Prediction(sum(parts.values()), "artifact_sizes", parts)
    raise BundleError(f"{root / 'manifest.json'}: programs.{key} has no memory report to predict a cap from")
