"""ORT programs: bytes on disk and peak resident memory of one training step in a fresh runtime-only process,
per model and frozen-weight precision. Writes benchmarks/results/ort_programs.{json,md}.

    nice python benchmarks/ort_programs.py [--models flux-tiny,sana-tiny,flux-small,sana-small] [--precisions fp32,int8,int4]

`flux-small` / `sana-small` are wider random-weight configs registered here only (D = 256), so that weights and
not graph structure dominate the files. Figures:
  kept_fp32_bytes   the bundle's kept weights (model/kept_weights.safetensors payload, fp32)
  checkpoint_bytes  programs/ort/<precision>/checkpoint (LoRA fp32 + frozen weights as int8 / packed int4 codes + scales)
  model_bytes       the training model (forward + gradient graph, no weights)
  baseline_rss_mib  resident memory of the device process (device_tests: runtime package + onnxruntime only, no torch)
                    after its imports, before the bundle
  peak_rss_growth_mib  its resident peak above that baseline over the whole run (VmHWM)
  step_ms           mean wall time of a training step (ORT forward + gradients, numpy AdamW; this machine)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from device_tests.runner import run_device  # noqa: E402
from compiler.compile import CompileRequest, compile_bundle  # noqa: E402
from ditskip_edge.lora import LoraSpec  # noqa: E402
from ditskip_edge.models import specs  # noqa: E402
from ditskip_edge.models.specs import TextSpec  # noqa: E402
from ditskip_edge.runtime.bundle import OptimizerSpec  # noqa: E402
from ditskip_edge.runtime.schedule import ScheduleConfig  # noqa: E402
from export.ort_stage import OrtPrograms  # noqa: E402

PLANS = {"flux-tiny": (1, 2), "sana-tiny": (1, 2), "flux-small": (2, 4), "sana-small": (2, 2)}


def register_small_specs() -> None:
    flux = specs.BUILTIN_SPECS["flux-tiny"]
    specs.BUILTIN_SPECS["flux-small"] = dataclasses.replace(
        flux, name="flux-small", text=TextSpec("hash", seq_len=16, dim=64, pooled_dim=64),
        transformer_config=dict(flux.transformer_config, num_layers=4, num_single_layers=8, attention_head_dim=64,
                                num_attention_heads=4, joint_attention_dim=64, pooled_projection_dim=64,
                                axes_dims_rope=[16, 24, 24]))
    sana = specs.BUILTIN_SPECS["sana-tiny"]
    specs.BUILTIN_SPECS["sana-small"] = dataclasses.replace(
        sana, name="sana-small", text=TextSpec("hash", seq_len=16, dim=64),
        transformer_config=dict(sana.transformer_config, num_layers=8, num_attention_heads=4, attention_head_dim=64,
                                num_cross_attention_heads=4, cross_attention_head_dim=64, cross_attention_dim=256,
                                caption_channels=64))


def run_one(model: str, precision: str, work: Path, steps: int) -> dict:
    spec = specs.BUILTIN_SPECS[model]
    out = work / f"{model}_{precision}"
    n_front, n_back = PLANS[model]
    sched = ScheduleConfig(steps=steps, s_min_px=spec.train_px, s_max_px=spec.data_px,
                           multiple_px=spec.pixel_multiple, seed=0)
    summary = compile_bundle(CompileRequest(model=model, images=str(ROOT / "examples" / "photos"),
                                            prompt="a photo of sks toy", out=str(out), n_front=n_front,
                                            n_back=n_back, schedule=sched, lora=LoraSpec(rank=4, alpha=4.0),
                                            optimizer=OptimizerSpec(lr=1e-3), programs=[OrtPrograms((precision,))]))
    run = run_device(out, "ort", work / f"run_{model}_{precision}", uncapped=True, use_estimate=False)
    if run.status != "ok":
        raise RuntimeError(f"{model} {precision}: {run.message}")
    prog = json.loads((out / "manifest.json").read_text())["programs"][0]["memory"]
    row = {"model": model, "precision": precision, "kept_blocks": summary["kept_blocks"],
           "kept_fp32_bytes": summary["kept_weight_bytes"], "checkpoint_bytes": prog["checkpoint_bytes"],
           "model_bytes": prog["program_bytes"], "baseline_rss_mib": round(run.baseline_rss_bytes / 2**20, 1),
           "peak_rss_growth_mib": round((run.peak_rss_bytes - run.baseline_rss_bytes) / 2**20, 1),
           "step_ms": round(run.summary["seconds_per_step"] * 1e3, 2),
           "trainable_params": run.summary["trainable_params"]}
    shutil.rmtree(out, ignore_errors=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="flux-tiny,sana-tiny,flux-small,sana-small")
    ap.add_argument("--precisions", default="fp32,int8,int4")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "ort_programs"))
    args = ap.parse_args()
    register_small_specs()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            for precision in args.precisions.split(","):
                rows.append(run_one(model, precision, Path(tmp), args.steps))
                print(json.dumps(rows[-1]), file=sys.stderr)
    Path(args.out + ".json").write_text(json.dumps(rows, indent=1))
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
