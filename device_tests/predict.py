"""The memory prediction a device run is capped by: what the bundle says training will need, in bytes.

Sources, first that exists wins (Prediction.source names it):
1. "planner": a `memory_plan` section in the manifest with `predicted_peak_bytes` per runtime (written by
   `ditskip-edge plan`, issue 7; not on this branch yet when this was written: then 2. or 3. is used);
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

import json
from dataclasses import dataclass, field
from pathlib import Path

from ditskip_edge.errors import BundleError


@dataclass
class Prediction:
    bytes: int
    source: str
    parts: dict[str, int] = field(default_factory=dict)


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


def predict_memory(bundle: str | Path, runtime: str) -> Prediction:
    root = Path(bundle)
    manifest = json.loads((root / "manifest.json").read_text())
    plan = manifest.get("memory_plan", {})
    if isinstance(plan, dict) and isinstance(plan.get(runtime), dict) and plan[runtime].get("predicted_peak_bytes"):
        b = int(plan[runtime]["predicted_peak_bytes"])
        return Prediction(b, "planner", {"predicted_peak_bytes": b})
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
