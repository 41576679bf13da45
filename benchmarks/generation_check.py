"""The device runtime's picture against diffusers', per model and precision of the merged weights.

    python benchmarks/generation_check.py [--models flux-tiny sana-tiny flux-testbed] [--steps 4] [--seeds 0 1 2]
    -> benchmarks/results/generation_check.{json,md}
    python benchmarks/generation_check.py --models flux-pipeline sana-pipeline --precisions fp32 int8 \
        --out benchmarks/results/generation_check_pipelines

flux-pipeline / sana-pipeline: tiny diffusers pipeline folders with real text encoders of toy size (CLIP + T5,
Gemma-2) and real kinds of tokenizers (tests/tiny_pipeline.py); the device encodes the prompt with the exported
encoder programs and runtime/text_tokens.py, the reference is the folder's own FluxPipeline / SanaPipeline given
the prompt as text.

Per model: a bundle with the generation part at fp32, int8 and int4 (tests/conftest.py compile_tiny), a LoRA of the
bundle's format with random A, B (std 0.3, tests/test_generation.py random_lora: a change far above the tolerance),
then for each precision and seed the runtime's picture (ditskip_edge/runtime/generation.py, in process) and the host
reference from the same portable-RNG noise (ditskip_edge/generate.py diffusers_reference: FluxPipeline / SanaPipeline
with load_lora_weights for the tiny models, the host sampler over the full diffusers transformer with
load_lora_adapter for flux-testbed). Reported: mean and max absolute pixel error (pixels in [0, 1]) with and without
the LoRA, the LoRA's own effect (mean |with - without| on the host), and seconds per picture.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
RESULTS = ROOT / "benchmarks" / "results"
PROMPT = "a photo of sks toy"
PIPELINE_MODELS = ("flux-pipeline", "sana-pipeline")        # tiny folders built by tests/tiny_pipeline.py


def model_source(model: str, work: Path) -> str:
    """The compile --model argument: a built-in name, or the tiny pipeline folder built for it."""
    if model not in PIPELINE_MODELS:
        return model
    from tiny_pipeline import save_tiny_flux_pipeline, save_tiny_sana_pipeline
    folder = work / f"{model}-folder"
    if not (folder / "model_index.json").is_file():
        (save_tiny_flux_pipeline if model == "flux-pipeline" else save_tiny_sana_pipeline)(folder)
    return str(folder)


def _doc_paragraph(start: str) -> str:
    return next(p for p in __doc__.split("\n\n") if p.startswith(start)).replace("\n", " ")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="*", default=["flux-tiny", "sana-tiny", "flux-testbed"])
    ap.add_argument("--precisions", nargs="*", default=["fp32", "int8", "int4"])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    ap.add_argument("--guidance", type=float, default=3.0)
    ap.add_argument("--text-precision", default="fp32", choices=["fp32", "int8", "int4"],
                    help="pipeline folders: the text encoder programs' weights (compile --text-precision)")
    ap.add_argument("--work", default=None)
    ap.add_argument("--out", default=str(RESULTS / "generation_check"))
    args = ap.parse_args()
    import torch
    torch.set_num_threads(1)
    from conftest import compile_tiny
    from test_generation import random_lora
    from export.generation_stage import GenerationPrograms
    from ditskip_edge.generate import diffusers_reference
    from ditskip_edge.models.specs import ModelSpec
    from ditskip_edge.runtime import rng
    from ditskip_edge.runtime.bundle import read_manifest
    from ditskip_edge.runtime.generation import GenerateRequest, generate
    work = Path(args.work or tempfile.mkdtemp(prefix="gencheck-"))
    rows = []
    for model in args.models:
        bundle = work / model
        if not (bundle / "manifest.json").is_file():
            compile_tiny(bundle, model_source(model, work), steps=2, programs=[GenerationPrograms(tuple(args.precisions), steps=args.steps,
                                                                    text_precision=args.text_precision)])
        lora = random_lora(bundle, work / f"{model}-lora")
        m = read_manifest(bundle, verify=False)
        spec = ModelSpec.from_json(m["model"])
        for seed in args.seeds:
            noise = torch.from_numpy(rng.normal(seed, tuple(m["generation"]["latent_shape"])))
            ref = {L: diffusers_reference(spec, L, PROMPT, noise, args.steps, args.guidance).numpy()
                   for L in (None, lora)}
            effect = float(np.abs(ref[lora] - ref[None]).mean())
            for precision in args.precisions:
                for L in (None, lora):
                    img, s = generate(bundle, GenerateRequest(PROMPT, seed, args.steps, args.guidance, lora=L,
                                                              precision=precision), progress=False)
                    err = np.abs(img - ref[L])
                    rows.append({"model": model, "precision": precision, "seed": seed, "lora": L is not None,
                                 "mean_abs_error": float(err.mean()), "max_abs_error": float(err.max()),
                                 "lora_effect": effect, "seconds": s["seconds"], "size_px": s["size_px"]})
                    print(json.dumps(rows[-1]), flush=True)
    summary = {}
    for r in rows:
        k = (r["model"], r["precision"], r["lora"])
        summary.setdefault(k, []).append(r)
    table = ["| model | precision | LoRA | mean abs pixel error (max over seeds) | max abs pixel error | LoRA's effect "
             "(mean) | s / picture |", "|---|---|---|---|---|---|---|"]
    for (model, precision, lora), rs in summary.items():
        table.append(f"| {model} | {precision} | {'yes' if lora else 'no'} | {max(r['mean_abs_error'] for r in rs):.2e} | "
                     f"{max(r['max_abs_error'] for r in rs):.2e} | {np.mean([r['lora_effect'] for r in rs]):.3f} | "
                     f"{np.median([r['seconds'] for r in rs]):.2f} |")
    doc = {"command": "python " + " ".join(sys.argv), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
           "machine": f"{os.cpu_count()} CPUs ({platform.machine()}), shared; load average {os.getloadavg()[0]:.1f}",
           "steps": args.steps, "seeds": args.seeds, "text_precision": args.text_precision, "guidance": args.guidance, "rows": rows}
    Path(args.out + ".json").write_text(json.dumps(doc, indent=1))
    md = (f"# Device generation against diffusers\n\n- command: `{doc['command']}` (date {doc['date']}); machine: "
          f"{doc['machine']}\n- {_doc_paragraph('Per model')}\n- {args.steps} steps, guidance "
          f"{args.guidance}, prompt {PROMPT!r}, seeds {args.seeds}; text encoder programs (pipeline folders) at "
          f"{args.text_precision}\n\n" + "\n".join(table) + "\n")
    Path(args.out + ".md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
