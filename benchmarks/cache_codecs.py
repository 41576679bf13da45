"""Residual-cache codecs measured on the tiny models and on a bigger FLUX-layout transformer.

    python benchmarks/cache_codecs.py [--quick]

For each model: compile a bundle with an fp32 cache (the reference), then run the cache-report measurement
(ditskip_edge/cache/quality.py) for every codec: bytes per sample, ratio to fp32, relative error ||d_hat - d|| / ||d||
(mean and max over samples and residuals), and the per-step change of training loss over a fixed short run against
the fp32 cache (same LoRA init, same schedule, decode inside the TrainingStep).

"flux-bench" is built here: the FLUX layout (double- then single-stream blocks, joint attention, rotary) at width 384
(6 heads x 64), 4 + 8 blocks, FLUX.1-dev's token counts at 256 px (256 image tokens) and text length 512, random
weights, the tiny FLUX autoencoder and the built-in hash text encoder. "sana-bench" likewise: SANA layout at width
384, 12 blocks, 512 px (256 image tokens).

Writes benchmarks/results/cache_codecs.json, .md and .png.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ditskip_edge.bundle_model import open_bundle  # noqa: E402
from ditskip_edge.cache import DEFAULT_CODEC  # noqa: E402
from ditskip_edge.cache.quality import REPORT_CODECS, cache_report  # noqa: E402
from compiler.compile import CompileRequest, compile_bundle  # noqa: E402
from ditskip_edge.runtime.bundle import OptimizerSpec  # noqa: E402
from ditskip_edge.lora import LoraSpec  # noqa: E402
from ditskip_edge.models.loading import build_transformer, build_vae, resolve_spec, save_pipeline_folder  # noqa: E402
from ditskip_edge.models.specs import TextSpec, builtin_spec  # noqa: E402
from ditskip_edge.runtime.schedule import ScheduleConfig  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
PHOTOS = ROOT / "examples" / "photos"
TARGETS = {"default": {"min_ratio": 8.0, "max_rel_error_mean": 0.02}, "int8": {"min_ratio": 4.0,
           "max_rel_error_mean": 0.005}, "max_loss_rel_change": 0.01}


def bench_model_folder(kind: str, out: Path) -> Path:
    """A random-weight model a few hundred wide, saved as a local diffusers pipeline folder."""
    if kind == "flux-bench":
        base = builtin_spec("flux-tiny")
        cfg = dict(base.transformer_config, num_layers=4, num_single_layers=8, attention_head_dim=64,
                   num_attention_heads=6, joint_attention_dim=256, pooled_projection_dim=128,
                   axes_dims_rope=[16, 24, 24])
        spec = dataclasses.replace(base, name=kind, transformer_config=cfg, data_px=512, train_px=256,
                                   text=TextSpec("hash", seq_len=512, dim=256, pooled_dim=128))
    else:
        base = builtin_spec("sana-tiny")
        cfg = dict(base.transformer_config, num_attention_heads=12, attention_head_dim=32, num_layers=12,
                   num_cross_attention_heads=12, cross_attention_head_dim=32, cross_attention_dim=384,
                   caption_channels=256, sample_size=16)
        spec = dataclasses.replace(base, name=kind, transformer_config=cfg, data_px=1024, train_px=512,
                                   text=TextSpec("hash", seq_len=300, dim=256))
    return save_pipeline_folder(spec, build_transformer(spec), build_vae(spec), out / kind)


def compile_fp32(model: str, out: Path, n_front: int, n_back: int, steps: int, grad_accum: int) -> Path:
    spec = resolve_spec(model)
    sched = ScheduleConfig(steps=steps, grad_accum=grad_accum, s_min_px=spec.train_px, s_max_px=spec.data_px,
                           multiple_px=spec.pixel_multiple, seed=0)
    compile_bundle(CompileRequest(model=model, images=str(PHOTOS), prompt="a photo of sks toy", out=str(out),
                                  n_front=n_front, n_back=n_back, schedule=sched, lora=LoraSpec(rank=4, alpha=4.0),
                                  optimizer=OptimizerSpec(lr=1e-3), cache_codec="fp32", overwrite=True))
    return out


def pick_default(rows: list[dict]) -> dict | None:
    ok = [r for r in rows if r["rel_error_mean"] <= TARGETS["default"]["max_rel_error_mean"]
          and r.get("loss_rel_change_mean", 0.0) <= TARGETS["max_loss_rel_change"] and r["codec"] != "fp32"]
    return min(ok, key=lambda r: r["entry_bytes_per_sample"]) if ok else None


def target_lines(rows: list[dict]) -> list[str]:
    """The issue's targets, checked on one model's rows: the default codec, every int8 variant, the loss change."""
    def verdict(r, t):
        ok = r["ratio_to_fp32"] >= t["min_ratio"] and r["rel_error_mean"] <= t["max_rel_error_mean"]
        return (f"`{r['codec']}` {r['ratio_to_fp32']:.2f}x (residuals {r['residual_ratio_to_fp32']:.2f}x), "
                f"{100 * r['rel_error_mean']:.2f}% -> {'meets' if ok else 'misses'} >= {t['min_ratio']:.0f}x and "
                f"<= {100 * t['max_rel_error_mean']:.1f}%")
    out = [("default " + verdict(r, TARGETS["default"])) for r in rows if r["codec"] == DEFAULT_CODEC]
    out += [verdict(r, TARGETS["int8"]) for r in rows if r["codec"].startswith("int8") and "," not in r["codec"]]
    worst = max((r.get("loss_rel_change_max", 0.0) for r in rows), default=0.0)
    out.append(f"largest per-step loss change of any codec {100 * worst:.3f}% "
               f"({'within' if worst <= TARGETS['max_loss_rel_change'] else 'beyond'} 1%)")
    return out


NOTES = """## Reading (by the author of the script, from the tables above)
- Loss: every codec, int4 and low rank included, keeps the fixed run's per-step loss within 1% of the fp32 cache
  (at most about 0.3% on the bigger configs): on these models the training loss is not what limits a codec.
- Image-stream residuals of the random-weight FLUX layout are close to full rank and gaussian-like (no
  massive-activation channels). For such data no codec reaches 2% at 4 bits a value (rate-distortion of a gaussian
  source: error >= 2^-R, 6.25% at R = 4), and scalar int4 measures 5-13%. So ">= 8x at <= 2%" is met only where the
  residuals are low-rank: the FLUX text stream (512 tokens, most of them padding) and, on sana-bench, every residual
  (`lowrank-r16`: 27x at 1.0%).
- int8: per-channel scales beat per-token scales on every model (0.27-0.50% vs 0.73-0.92%); groups of 32 tokens per
  channel (`int8-t32`) are lower still (0.25-0.35%) at 3.77x. fp16 scales cost 1/N of a byte a value, so int8 stores
  3.97-3.98x less than fp32 (the residuals; x0 stays fp32), just under 4x.
- Default (`int8-channel,front.txt=lowrank-r16`): flux-bench 5.9x (residuals 7.4x) at 0.71% mean error;
  sana-bench 3.85x at 0.27%. `lowrank-r16` alone is the choice for SANA-like residuals when cache-report confirms it
  on the real model; trained weights were not available here, so whether real residuals are low-rank is not measured.
"""


def markdown(doc: dict) -> str:
    lines = ["# Residual-cache codecs", "",
             f"Command: `{doc['command']}`  ", f"Machine: {doc['machine']}  ", f"Date: {doc['date']}  ",
             f"Wall time: {doc['seconds']} s", "",
             "Bytes are one stored sample (64-byte aligned parts; x0 stays fp32 in every codec). `ratio` is the whole "
             "entry's, `res. ratio` the residuals' alone. Error: ||d_hat - d|| / ||d|| over samples and residuals. "
             "Loss change: per-step |loss - loss_fp32| / loss_fp32 over the fixed run (same LoRA init and schedule, "
             "decode inside the TrainingStep).", ""]
    for m in doc["models"]:
        r0 = m["report"]
        lines += [f"## {m['model']}: plan front {r0['plan']['n_front']} / back {r0['plan']['n_back']} of "
                  f"{r0['plan']['num_blocks']} blocks, {r0['samples_measured']} samples, {r0['train_steps']} steps x "
                  f"{r0['grad_accum']} samples", "",
                  "entry shapes: " + ", ".join(f"{k} {v}" for k, v in r0["entry_shapes"].items()), "",
                  "| codec | bytes/sample | ratio | res. ratio | rel. error mean | rel. error max | per residual (mean) "
                  "| loss change mean | loss change max |", "|---|---|---|---|---|---|---|---|---|"]
        for r in r0["codecs"]:
            per = ", ".join(f"{k} {100 * v['mean']:.2f}%" for k, v in r["rel_error_by_residual"].items())
            lines.append(f"| `{r['codec']}` | {r['entry_bytes_per_sample']:,} | {r['ratio_to_fp32']:.2f}x | "
                         f"{r['residual_ratio_to_fp32']:.2f}x | {100 * r['rel_error_mean']:.3f}% | "
                         f"{100 * r['rel_error_max']:.3f}% | {per} | {100 * r.get('loss_rel_change_mean', 0):.4f}% | "
                         f"{100 * r.get('loss_rel_change_max', 0):.4f}% |")
        lines += ["", "Targets: " + "; ".join(target_lines(r0["codecs"]))]
        best = m["smallest_within_targets"]
        lines += ["", f"Smallest codec with mean error <= 2% and loss change <= 1%: "
                  f"`{best['codec'] if best else 'none'}`" + (f" ({best['ratio_to_fp32']:.2f}x)" if best else ""), ""]
    return "\n".join(lines) + "\n" + NOTES


def plot(doc: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(doc["models"]), figsize=(5 * len(doc["models"]), 4), squeeze=False)
    for ax, m in zip(axes[0], doc["models"]):
        for r in m["report"]["codecs"]:
            if r["codec"] == "fp32":
                continue
            ax.scatter(r["residual_ratio_to_fp32"], 100 * r["rel_error_mean"])
            ax.annotate(r["codec"].replace(",front.txt=", "+txt:"), (r["residual_ratio_to_fp32"],
                        100 * r["rel_error_mean"]), fontsize=6)
        ax.axhline(2.0, ls="--", lw=0.8)
        ax.axvline(8.0, ls="--", lw=0.8)
        ax.set_yscale("log")
        ax.set_xlabel("residual bytes: ratio to fp32")
        ax.set_ylabel("mean relative error (%)")
        ax.set_title(m["model"])
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny models only, fewer steps (a smoke run)")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--render", action="store_true", help="only rewrite the .md and .png from the existing .json")
    args = ap.parse_args()
    out = Path(args.out)
    if args.render:
        doc = json.loads((out / "cache_codecs.json").read_text())
        (out / "cache_codecs.md").write_text(markdown(doc))
        plot(doc, out / "cache_codecs.png")
        return 0
    torch.set_num_threads(2)
    t0 = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="cache_codecs_"))
    runs = [("flux-tiny", "flux-tiny", 1, 2, 8, 2), ("sana-tiny", "sana-tiny", 1, 2, 8, 2)]
    if not args.quick:
        runs += [("flux-bench", "flux-bench", 3, 3, 8, 2), ("sana-bench", "sana-bench", 3, 3, 8, 2)]
    models = []
    try:
        for name, model, nf, nb, steps, accum in runs:
            print(f"[cache_codecs] {name}: compiling", file=sys.stderr, flush=True)
            if name.endswith("-bench"):
                model = str(bench_model_folder(name, work))
            bundle = compile_fp32(model, work / f"{name}.bundle", nf, nb, steps, accum)
            print(f"[cache_codecs] {name}: measuring", file=sys.stderr, flush=True)
            report = cache_report(open_bundle(bundle), REPORT_CODECS, max_samples=steps * accum, train_steps=steps)
            report["bundle"] = f"(temporary) {name}.bundle"
            models.append({"model": name, "report": report, "smallest_within_targets": pick_default(report["codecs"])})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    doc = {"command": "python benchmarks/cache_codecs.py" + (" --quick" if args.quick else ""),
           "machine": f"{platform.machine()} {platform.processor() or ''} {torch.get_num_threads()} torch threads, "
                      f"{platform.system()} {platform.release()}, torch {torch.__version__}",
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "seconds": round(time.perf_counter() - t0, 1), "targets": TARGETS, "models": models}
    out.mkdir(parents=True, exist_ok=True)
    (out / "cache_codecs.json").write_text(json.dumps(doc, indent=1))
    (out / "cache_codecs.md").write_text(markdown(doc))
    plot(doc, out / "cache_codecs.png")
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
