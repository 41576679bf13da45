"""How many samples the host should push through the frozen full model at once while it computes the residual cache
(`compile.CACHE_BATCH_SAMPLES`).

    python benchmarks/cache_batch.py            -> benchmarks/results/cache_batch.{json,md}

For each model (the testbed the demo trains, and the tiny FLUX / SANA configs the tests compile), the skipped spans'
residuals (`skip_model.compute_residuals`; half the blocks skipped, split evenly front / back) of `--samples` random
training inputs at the model's training size, one torch thread, computed one at a time and in
batches: milliseconds per sample (best of `--repeats`), and the largest difference from the one-at-a-time residuals
relative to their largest magnitude (batching changes the order of sums inside the kernels, nothing else).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._meta import provenance, provenance_md, write_result   # noqa: E402


def time_model(name: str, batches: list[int], samples: int, repeats: int) -> dict:
    import torch
    from ditskip_edge.models.latents import LatentEncoder
    from ditskip_edge.models.loading import build_transformer, build_vae, resolve_spec
    from ditskip_edge.models.text import encode_prompt
    from ditskip_edge.models.views import block_names_of, make_view
    from ditskip_edge.plan import SkipPlan, skip_budget
    from ditskip_edge.skip_model import compute_residuals
    spec = resolve_spec(name)
    transformer = build_transformer(spec)
    view = make_view(spec.arch, transformer)
    num_blocks = len(block_names_of(transformer))
    n_skip = skip_budget(num_blocks, 0.5)
    plan = SkipPlan(num_blocks, n_skip // 2, n_skip - n_skip // 2, "explicit")
    with torch.no_grad():                # the latent shape of a training crop, from the model's own encoder
        shape = LatentEncoder(spec.arch, build_vae(spec))(torch.zeros(1, 3, spec.train_px, spec.train_px)).shape[1:]
    gen = torch.Generator().manual_seed(0)
    x0 = torch.randn(samples, *shape, generator=gen)
    noise = torch.randn(samples, *shape, generator=gen)
    t = torch.rand(samples, generator=gen)
    cond1 = encode_prompt(spec, "a photo of sks toy")

    def run(b: int) -> list[dict]:
        cond = {k: v.expand(b, *v.shape[1:]).contiguous() for k, v in cond1.items()}
        out = []
        for i in range(0, samples, b):
            r = compute_residuals(view, plan, x0[i:i + b], noise[i:i + b], t[i:i + b], cond)
            out += [{k: v[j:j + 1] for k, v in r.items()} for j in range(b)]
        return out

    rows, reference = [], None
    for b in batches:
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            res = run(b)
            best = min(best, time.perf_counter() - t0)
        if reference is None:
            reference = res
        scale = max(float(v.abs().max()) for e in reference for v in e.values())
        diff = max(float((e[k] - r[k]).abs().max()) for e, r in zip(reference, res) for k in e)
        rows.append({"batch": b, "ms_per_sample": round(1000 * best / samples, 2), "max_diff_rel": diff / scale})
    return {"model": name, "plan": f"{plan.n_front}/{plan.n_back} of {num_blocks}", "latent": list(shape),
            "rows": rows}


def to_markdown(doc: dict) -> str:
    lines = ["# Residual cache on the host: samples per forward of the frozen full model", "",
             provenance_md(doc["provenance"]), "",
             f"{doc['samples']} samples per model, one torch thread, best of {doc['repeats']} runs. max diff: the "
             "largest |batched - one at a time| over every residual, relative to the residuals' largest magnitude.",
             "", "| model | plan (front/back) | batch | ms per sample | speed-up | max diff |", "|---|---|---|---|---|---|"]
    for m in doc["models"]:
        one = m["rows"][0]["ms_per_sample"]
        for r in m["rows"]:
            lines.append(f"| {m['model']} | {m['plan']} | {r['batch']} | {r['ms_per_sample']:.2f} | "
                         f"{one / r['ms_per_sample']:.2f}x | {r['max_diff_rel']:.1e} |")
    lines += ["", doc["reading"], ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["flux-testbed", "flux-tiny", "sana-tiny"])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16, 32])
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "cache_batch"))
    args = ap.parse_args()
    if args.samples % max(args.batches) or args.batches[0] != 1:
        ap.error("--batches must start at 1 and divide --samples")
    import torch
    torch.set_num_threads(1)
    from compiler.compile import CACHE_BATCH_SAMPLES
    models = [time_model(m, args.batches, args.samples, args.repeats) for m in args.models]
    doc = {"provenance": provenance(), "samples": args.samples, "repeats": args.repeats, "models": models,
           "reading": f"compile uses {CACHE_BATCH_SAMPLES} samples per forward (`compile.CACHE_BATCH_SAMPLES`). The "
                      "models here spend most of a one-sample forward in per-op overhead, which a batch shares; the "
                      "results differ from one at a time by rounding only (the order of sums). A full-size model's "
                      "forward is compute-bound, so its gain should be small; not measured (no weights here)."}
    print(write_result(doc, args.out, to_markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
