"""ditskip-edge select: choose the skip split (n front, m back) per ratio by cross-attention masking."""

from __future__ import annotations

import json
import time
from pathlib import Path

from ditskip_edge.runtime.errors import UserError
from ditskip_edge.selection.embedders import DEFAULT_EMBEDDER
from ditskip_edge.selection.scorer import METHODS, PROBES, SelectionConfig


def register(sub, add_json_flag) -> None:
    p = sub.add_parser("select", help="choose which blocks to skip, by cross-attention masking (PAPER.md sec. 3)")
    p.add_argument("--model", default="flux-tiny", help="flux-tiny | sana-tiny | flux-testbed | a local diffusers "
                   "pipeline folder | a .safetensors file of flux-testbed weights")
    p.add_argument("--images", default=None,
                   help="folder of the subject's photos (needed by --probe tuned and --method proxy)")
    p.add_argument("--prompt", required=True, help="the subject prompt, e.g. 'a photo of sks dog'")
    p.add_argument("--skip-ratio", type=float, nargs="+", default=[], help="fractions of blocks to skip, in (0, 1)")
    p.add_argument("--budget", type=int, nargs="+", default=[], help="numbers of blocks to skip (instead of ratios)")
    p.add_argument("--method", default="generation", choices=list(METHODS),
                   help="generation: Euler sampling (the paper's); proxy: x0_hat at a few t, one forward each")
    p.add_argument("--steps", type=int, default=4, help="Euler steps of the generation")
    p.add_argument("--seeds", type=int, default=2,
                   help="number of noise seeds averaged (seed, seed + 1, ...); each result's stability says how firmly "
                        "they back the pick (a pick share from 2 seeds only flags disagreement)")
    p.add_argument("--proxy-times", type=float, nargs="+", default=[0.8, 0.5, 0.2], help="proxy: times t in (0, 1]")
    p.add_argument("--embedder", default=DEFAULT_EMBEDDER,
                   help=f"{DEFAULT_EMBEDDER} (offline default) or a local transformers CLIP / DINO folder")
    p.add_argument("--probe", default=SelectionConfig.probe, choices=list(PROBES),
                   help="tuned: a short LoRA on the photos first, then mask (the paper's); base: mask the model as is")
    p.add_argument("--tune-steps", type=int, default=SelectionConfig.tune_steps, help="tuned probe: LoRA steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="also write the JSON report to this file")
    p.add_argument("--plot", default=None, help="also draw score vs split into this PNG")
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args) -> dict:
    from ditskip_edge.images import load_photos
    from ditskip_edge.models.loading import build_transformer, build_vae, resolve_spec
    from ditskip_edge.models.views import block_names_of
    from ditskip_edge.plan import skip_budget
    from ditskip_edge.selection import check_budget, make_probe, scored_on, select_splits
    from ditskip_edge.selection.plot import plot_scores

    if not args.skip_ratio and not args.budget:
        raise UserError("give --skip-ratio R [R ...] or --budget K [K ...]")
    if not args.prompt.strip():
        raise UserError("prompt is empty: describe the subject, e.g. 'a photo of sks cat'")
    spec = resolve_spec(args.model)
    if not spec.has_weights:
        raise UserError(f"model '{spec.name}' has no weights here: select needs a built-in tiny model or a local "
                        f"diffusers folder")
    config = SelectionConfig(method=args.method, steps=args.steps, num_seeds=args.seeds,
                             proxy_times=tuple(args.proxy_times), embedder=args.embedder, probe=args.probe,
                             tune_steps=args.tune_steps)
    config.validate()
    # caption files beside the photos (compile --photo-captions' folder) are not photos; selection uses --prompt
    photos = load_photos(args.images, spec.data_px, captions=True) if args.images else None
    transformer = build_transformer(spec)
    num_blocks = len(block_names_of(transformer))
    budgets = [skip_budget(num_blocks, r) for r in args.skip_ratio] + [check_budget(num_blocks, k)
                                                                       for k in args.budget]
    ratios = list(args.skip_ratio) + [None] * len(args.budget)
    t0 = time.perf_counter()
    probe = make_probe(spec, transformer, build_vae(spec), photos, args.prompt, args.seed, config)
    results = select_splits(probe, budgets, ratios)
    if args.plot:
        plot_scores(results, Path(args.plot), f"{spec.name}: {config.method}, {probe.embedder.name}, "
                                              f"seeds {probe.seeds}")
    report = {
        "model": spec.name, "num_blocks": num_blocks, "block_names": block_names_of(transformer),
        "method": config.method, "config": config.to_json(), "embedder": probe.embedder.name,
        "embedder_description": probe.embedder.description, "seeds": probe.seeds, "prompt": args.prompt,
        "scored_on": scored_on(config), "chosen": {str(r["skip_ratio"] if r["skip_ratio"] is not None else f"k={r['budget']}"):
                                           r["chosen"] for r in results},
        "results": results, "plot": str(Path(args.plot).resolve()) if args.plot else None,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return report
