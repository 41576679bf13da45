"""Generation's footprint against training's, on the same bundle, each in a fresh runtime-only process.

    python benchmarks/generation_memory.py --models flux-tiny sana-tiny flux-testbed [--headline] [--precision int8]
    -> benchmarks/results/generation_memory.{json,md}
    (flux-pipeline / sana-pipeline: tiny pipeline folders with real text encoders, benchmarks/generation_check.py)

Per model: one bundle compiled with `--runtime executorch --generation` at the precision (front 1 / back 2 blocks
skipped for the tiny models, 50% for flux-testbed and the headline layout), then two children that import only the
runtime package under the device import guard (device_tests/runtime_imports.py):
  train     `python -m ditskip_edge.runtime train` for --train-steps steps (the ExecuTorch train_step program)
  generate  `python -m ditskip_edge.runtime generate` one picture, --gen-steps sampler steps, with the LoRA the train
            child wrote (merged at the bit width beside it)
A thread in each child reads /proc/self/status every 2 ms: the peak growth of RssAnon (dirty anonymous: what a phone
counts) and of RssFile (mapped programs and weights: clean, not counted) over the child's baseline after importing the
runtime, plus wall seconds. Both children run with glibc's mmap threshold fixed at 64 KiB (memory_speed.py's
MALLOC_ENV), so freed buffers go back to the system and RSS follows the bytes in use.

`--headline`: the FLUX layout of benchmarks/memory_speed.py (4 double + 8 single blocks, width 1024, 288M
parameters; random weights, hash text encoder with 128 tokens of width 4096, flux-tiny's autoencoder) saved as a
local pipeline folder and compiled the same way.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _meta import PEAK_WATCHER                                                  # noqa: E402
RESULTS = ROOT / "benchmarks" / "results"
MIB = 1024 ** 2
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "131072"}
PROMPT = "a photo of sks toy"

CHILD = r"""
import json, sys, time
from device_tests.runtime_imports import forbid_host_modules, host_modules_loaded
forbid_host_modules()
from ditskip_edge.runtime import bindings
bindings.executorch_training(); bindings.executorch_inference()
import torch
from ditskip_edge.runtime.__main__ import main
""" + PEAK_WATCHER + r"""
t0 = time.perf_counter()
code = main(sys.argv[1:])
wall = time.perf_counter() - t0
stop_watch()
print(json.dumps({"code": code, "wall_s": wall, "baseline_anon_bytes": base.anon_bytes,
                  "peak_anon_growth_bytes": peak["anon"], "peak_file_growth_bytes": peak["file"],
                  "host_modules": host_modules_loaded()}))
"""


def child(args: list[str]) -> dict:
    env = {"PYTHONPATH": str(ROOT), "DITSKIP_PROGRESS": "0", "OMP_NUM_THREADS": "1", **MALLOC_ENV}
    out = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, cwd=str(ROOT), env=env)
    if out.returncode != 0:
        raise SystemExit(f"child failed: {args[:2]}\n{out.stderr[-3000:]}")
    lines = out.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    result["summary"] = json.loads("\n".join(lines[:-1])) if len(lines) > 1 else None
    return result


def headline_folder(work: Path) -> str:
    import torch
    from dataclasses import replace
    from memory_speed import headline_specs
    from ditskip_edge.models.loading import build_vae, save_pipeline_folder, transformer_class, _randomize_zero_params
    from ditskip_edge.models.specs import BUILTIN_SPECS, TextSpec
    spec = headline_specs()["flux-layout-300m"]
    spec = replace(spec, text=TextSpec("hash", seq_len=128, dim=4096, pooled_dim=768),
                   vae_config=BUILTIN_SPECS["flux-tiny"].vae_config)
    folder = work / "flux-layout-300m"
    if not (folder / "model_index.json").is_file():
        torch.manual_seed(0)
        transformer = transformer_class("flux").from_config(spec.transformer_config).eval()
        _randomize_zero_params(transformer, 0)
        save_pipeline_folder(spec, transformer, build_vae(replace(spec, name="flux-tiny")), folder)
    return str(folder)


def headline_text_folder(work: Path) -> str:
    """The headline layout as a FluxPipeline folder with real text encoders at FLUX.1-dev's widths: a CLIP text model
    of CLIP-L's width (768, 12 heads; 1 layer) and a T5 encoder of T5-XXL's (d_model 4096, 64 heads, d_ff 10240,
    gated-gelu; 2 of its 24 layers), random weights, the tiny tokenizers of tests/tiny_pipeline.py; 512 T5 tokens
    as FLUX.1-dev. The text programs' arenas do not grow with the layer count: this measures the planner's
    T5-XXL text phase (memory_estimate/text.py) in the runtime."""
    import json as _json

    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline
    from memory_speed import headline_specs
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel
    from ditskip_edge.models.loading import TINY_TEXT_FILE, build_vae, transformer_class, _randomize_zero_params
    from ditskip_edge.models.specs import BUILTIN_SPECS
    from ditskip_edge.models.tiny_tokenizers import clip_style_tokenizer, t5_style_tokenizer
    spec = headline_specs()["flux-layout-300m"]
    folder = work / "flux-layout-300m-t5xxl-width"
    if not (folder / "model_index.json").is_file():
        torch.manual_seed(0)
        transformer = transformer_class("flux").from_config(spec.transformer_config).eval()
        _randomize_zero_params(transformer, 0)
        clip_tok, t5_tok = clip_style_tokenizer(), t5_style_tokenizer()
        clip = CLIPTextModel(CLIPTextConfig(vocab_size=len(clip_tok), hidden_size=768, intermediate_size=3072,
                                            num_hidden_layers=1, num_attention_heads=12, projection_dim=768,
                                            max_position_embeddings=77, hidden_act="quick_gelu",
                                            eos_token_id=clip_tok.eos_token_id, pad_token_id=clip_tok.pad_token_id,
                                            bos_token_id=clip_tok.bos_token_id))
        t5 = T5EncoderModel(T5Config(vocab_size=len(t5_tok), d_model=4096, d_kv=64, d_ff=10240, num_layers=2,
                                     num_heads=64, feed_forward_proj="gated-gelu",
                                     pad_token_id=t5_tok.pad_token_id, eos_token_id=t5_tok.eos_token_id))
        vae = build_vae(BUILTIN_SPECS["flux-tiny"])
        FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=clip, tokenizer=clip_tok,
                     text_encoder_2=t5, tokenizer_2=t5_tok, transformer=transformer).save_pretrained(folder)
        (folder / TINY_TEXT_FILE).write_text(_json.dumps({"data_px": spec.data_px, "train_px": spec.train_px}))
    return str(folder)


def compile_bundle(model: str, work: Path, precision: str, decode_tile_px: int | None = None) -> tuple[Path, float]:
    from conftest import compile_tiny
    from export.executorch_stage import ExecutorchPrograms
    from export.generation_stage import GenerationPrograms
    out = work / (f"{Path(model).name}-{precision}" + (f"-tiles{decode_tile_px}" if decode_tile_px else ""))
    split = {"flux-testbed": (0, 6)}.get(model, (1, 2) if "tiny" in model or model.endswith("pipeline-folder")
                                         else (4, 2))
    t0 = time.perf_counter()
    if not (out / "manifest.json").is_file():
        compile_tiny(out, model, n_front=split[0], n_back=split[1], steps=4,
                     programs=[ExecutorchPrograms((precision,), preprocess=False),
                               GenerationPrograms((precision,), decode_tile_px=decode_tile_px)])
    return out, time.perf_counter() - t0


def measure(bundle: Path, precision: str, train_steps: int, gen_steps: int) -> dict:
    run = bundle / "runs" / "bench"
    train = child(["train", str(bundle), "--runtime", "executorch", "--precision", precision, "--steps",
                   str(train_steps), "--run-dir", str(run), "--no-resume", "--json"])
    gen = child(["generate", str(bundle), "--prompt", PROMPT, "--seed", "0", "--steps", str(gen_steps), "--precision",
                 precision, "--lora", str(run / "lora"), "--out", str(bundle / "bench.png"), "--json"])
    m = json.loads((bundle / "manifest.json").read_text())
    gen_bytes = sum(m["files"][p]["bytes"] for p in m["files"] if p.startswith("programs/executorch/generation/"))
    train_pte = next(p for p in m["programs"] if p["name"] == "train_step")
    return {"train": train, "generate": gen, "generation_part_bytes": gen_bytes,
            "train_step_arena_bytes": train_pte["memory"].get("planned_arena_bytes"),
            "generation_arenas_bytes": {p["name"]: p["memory"]["planned_arena_bytes"] for p in m["programs"]
                                        if p["name"].startswith(("gen_", "decode", "text_encoder"))
                                        and p["precision"] in (precision, "fp32")},
            "seconds_per_image": gen["summary"]["seconds"], "seconds_per_sampler_step": gen["summary"]["seconds_per_step"],
            "seconds_per_train_step": train["wall_s"] / train_steps}


def markdown(doc: dict) -> str:
    rows = ["| model | precision | train: RssAnon peak growth MiB | generate: RssAnon peak growth MiB | generate <= train | "
            "train RssFile MiB | generate RssFile MiB | s / image (steps) | s / sampler step | s / train step | "
            "generation part MiB |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["results"]:
        t, g = r["train"], r["generate"]
        rows.append(f"| {r['model']} | {r['precision']} | {t['peak_anon_growth_bytes'] / MIB:.1f} | "
                    f"{g['peak_anon_growth_bytes'] / MIB:.1f} | "
                    f"{'yes' if g['peak_anon_growth_bytes'] <= t['peak_anon_growth_bytes'] else 'NO'} | "
                    f"{t['peak_file_growth_bytes'] / MIB:.1f} | {g['peak_file_growth_bytes'] / MIB:.1f} | "
                    f"{r['seconds_per_image']:.2f} ({doc['gen_steps']}) | {r['seconds_per_sampler_step']:.3f} | "
                    f"{r['seconds_per_train_step']:.3f} | {r['generation_part_bytes'] / MIB:.1f} |")
    return (f"# Generation's footprint against training's\n\n- command: `{doc['command']}` (date {doc['date']}); "
            f"machine: {doc['machine']}\n\n" + "\n\n".join(__doc__.split(chr(10) + chr(10))[2:]).strip() + "\n\n" + "\n".join(rows) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="*", default=["flux-tiny", "sana-tiny", "flux-testbed"])
    ap.add_argument("--headline", action="store_true")
    ap.add_argument("--headline-text", action="store_true",
                    help="the headline layout with CLIP-L / T5-XXL-width text encoders (headline_text_folder)")
    ap.add_argument("--precision", default="int8")
    ap.add_argument("--train-steps", type=int, default=2)
    ap.add_argument("--gen-steps", type=int, default=4)
    ap.add_argument("--work", default=None)
    ap.add_argument("--out", default=str(RESULTS / "generation_memory"))
    ap.add_argument("--decode-tile-px", default="", help="MODEL=PX,...: compile that model with --decode-tile-px PX")
    args = ap.parse_args()
    tiles = {k: int(v) for k, v in (kv.split("=") for kv in args.decode_tile_px.split(",") if kv)}
    import torch
    torch.set_num_threads(1)
    work = Path(args.work or tempfile.mkdtemp(prefix="genmem-"))
    from benchmarks.generation_check import model_source      # flux-pipeline / sana-pipeline: tiny folders
    models = [model_source(m, work) for m in args.models] + ([headline_folder(work)] if args.headline else [])
    models += [headline_text_folder(work)] if args.headline_text else []
    results = []
    for model in models:
        bundle, compile_s = compile_bundle(model, work, args.precision, tiles.get(Path(model).name))
        r = measure(bundle, args.precision, args.train_steps, args.gen_steps)
        name = Path(model).name + (f" (decode tiles {tiles[Path(model).name]} px)" if Path(model).name in tiles else "")
        results.append({"model": name, "precision": args.precision, "compile_s": round(compile_s, 1), **r})
        print(json.dumps({k: v for k, v in results[-1].items() if k not in ("train", "generate")}), flush=True)
        doc = {"command": "python " + " ".join(sys.argv),
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
               "machine": f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), shared with other "
                          f"jobs; load average {os.getloadavg()[0]:.1f}", "gen_steps": args.gen_steps,
               "results": results}
        Path(args.out + ".json").write_text(json.dumps(doc, indent=1, default=str))   # after every model: partial
        Path(args.out + ".md").write_text(markdown(doc))                               # results survive a failure
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
