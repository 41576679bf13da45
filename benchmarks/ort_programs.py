"""ORT programs: bytes on disk and peak resident memory of one training step in a fresh runtime-only process,
per model and frozen-weight precision. Writes benchmarks/results/ort_programs.{json,md}.

    nice python benchmarks/ort_programs.py [--models flux-tiny,sana-tiny,flux-small,sana-small] [--bits 16,8,4]

`flux-small` / `sana-small` are wider random-weight configs registered here only (D = 256), so that weights and
not graph structure dominate the files. Figures:
  kept_fp32_bytes   the bundle's kept weights (model/kept_weights.safetensors payload, fp32)
  checkpoint_bytes  programs/ort/checkpoint (LoRA fp32 + frozen weights as int8 / packed int4 codes + scales)
  model_bytes       training + eval + optimizer ONNX graphs (no weights)
  peak_rss_mib      ru_maxrss of a fresh process (torch made unimportable) after loading and one step + update
  load_rss_mib      that process's RSS after loading the artifacts and the first sample, before the step
  step_ms           mean wall time of a training step + optimizer step over the schedule (ORT, this machine)
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

from ditskip_edge.compile import CompileRequest, OptimizerSpec, compile_bundle  # noqa: E402
from ditskip_edge.lora import LoraSpec  # noqa: E402
from ditskip_edge.models import specs  # noqa: E402
from ditskip_edge.models.specs import TextSpec  # noqa: E402
from ditskip_edge.quantize import QuantSpec  # noqa: E402
from ditskip_edge.runtime.schedule import ScheduleConfig  # noqa: E402
from export.ort_memory import measure_step_memory  # noqa: E402
from export.ort_trainer import OrtTrainConfig, train_ort  # noqa: E402

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


def run_one(model: str, bits: int, work: Path, steps: int) -> dict:
    spec = specs.BUILTIN_SPECS[model]
    out = work / f"{model}_{bits}"
    n_front, n_back = PLANS[model]
    sched = ScheduleConfig(steps=steps, s_min_px=spec.train_px, s_max_px=spec.data_px,
                           multiple_px=spec.pixel_multiple, seed=0)
    summary = compile_bundle(CompileRequest(model=model, images=str(ROOT / "examples" / "photos"),
                                            prompt="a photo of sks toy", out=str(out), n_front=n_front,
                                            n_back=n_back, schedule=sched, lora=LoraSpec(rank=4, alpha=4.0),
                                            optimizer=OptimizerSpec(lr=1e-3), runtimes=["ort"],
                                            quant=QuantSpec(bits=bits)))
    mem = measure_step_memory(out)
    run = train_ort(out, OrtTrainConfig(run_dir=work / f"run_{model}_{bits}"))
    row = {"model": model, "bits": bits, "kept_blocks": summary["kept_blocks"],
           "kept_fp32_bytes": summary["kept_weight_bytes"], "checkpoint_bytes": mem["checkpoint_bytes"],
           "model_bytes": mem["model_bytes"], "peak_rss_mib": round(mem["peak_rss_bytes"] / 2**20, 1),
           "load_rss_mib": round(mem["rss_after_load_bytes"] / 2**20, 1),
           "import_rss_mib": round(mem["rss_after_import_bytes"] / 2**20, 1),
           "step_ms": round(run["seconds_per_step"] * 1e3, 2), "trainable_params": run["trainable_params"]}
    shutil.rmtree(out, ignore_errors=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="flux-tiny,sana-tiny,flux-small,sana-small")
    ap.add_argument("--bits", default="16,8,4")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "ort_programs"))
    args = ap.parse_args()
    register_small_specs()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            for bits in (int(b) for b in args.bits.split(",")):
                rows.append(run_one(model, bits, Path(tmp), args.steps))
                print(json.dumps(rows[-1]), file=sys.stderr)
    Path(args.out + ".json").write_text(json.dumps(rows, indent=1))
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
