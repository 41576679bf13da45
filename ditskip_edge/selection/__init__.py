"""Block selection by cross-attention masking (PAPER.md section 3): which n front and m back blocks to skip.

    masking.py    text-attention masks in chosen blocks (wrapping diffusers' FLUX / SANA processors)
    sampling.py   the images compared: Euler generation, or the one-forward x0_hat proxy
    embedders.py  D = 1 - cosine of image embeddings: offline "pixel-stats" default, or CLIP / DINO from a folder
    scorer.py     score every split n + m = k, take the argmin; how firmly the seeds back it
    tuning.py     the tuned-model probe: a short LoRA on the photos before masking (the paper's probe)
    plot.py       score vs split, PNG

`select_splits(...)` scores several budgets at once (shared masked images); `select_plan(...)` is the one-ratio
verb `compile --skip-ratio` calls, returning a SkipPlan with chosen_by="selection" and the scores.
"""

from __future__ import annotations

import logging
import time
from typing import Sequence

import torch.nn as nn

from ..runtime.errors import UserError
from ..images import Photo
from ..models.latents import LatentEncoder
from ..models.specs import ModelSpec
from ..models.text import encode_prompt
from ..models.views import block_names_of, make_view
from ..plan import SkipPlan, skip_budget
from .embedders import load_embedder
from .scorer import (WEAK_PICK_SHARE, Probe, SelectionConfig, check_budget, choose, photo_latents,
                     pick_stability, score_splits)

__all__ = ["SCORED_ON", "SelectionConfig", "make_probe", "select_splits", "select_plan", "check_budget",
           "scored_on"]

log = logging.getLogger(__name__)
SCORED_ON = {"base": "base model (no subject LoRA); proxy: noised photo latents of the subject",
             "tuned": "a copy of the model with a short LoRA on the subject's photos (the paper's LoRA-tuned probe)"}


def scored_on(config: SelectionConfig) -> str:
    return SCORED_ON[config.probe]


def make_probe(spec: ModelSpec, transformer: nn.Module, vae: nn.Module, photos: Sequence[Photo] | None,
               prompt: str, seed: int, config: SelectionConfig, embedder=None) -> Probe:
    """The masked-generation probe. With config.probe "tuned", it probes a LoRA-tuned copy of `transformer`
    (trained here on `photos`); `transformer` itself is never changed."""
    config.validate()
    if config.method == "proxy" and not photos:
        raise UserError("selection method 'proxy' needs the subject's photos (--images)")
    if config.probe == "tuned":
        if not photos:
            raise UserError("selection probe 'tuned' needs the subject's photos (--images): it trains a short LoRA "
                            "on them first; or use probe 'base'")
        from .tuning import tuned_copy
        t0 = time.perf_counter()
        transformer = tuned_copy(spec, transformer, vae, photos, prompt, config.tune_steps, config.tune_lr,
                                 config.tune_rank, config.tune_batch, seed)
        log.info("tuned probe: %d LoRA steps in %.1f s", config.tune_steps, time.perf_counter() - t0)
    view = make_view(spec.arch, transformer)
    decoder = LatentEncoder(spec.arch, vae)
    side = spec.train_px // spec.vae_scale_factor
    latent_shape = (1, int(vae.config.latent_channels), side, side)
    latents = [photo_latents(p, spec.train_px, decoder) for p in photos] if config.method == "proxy" else []
    return Probe(view=view, decoder=decoder, cond=encode_prompt(spec, prompt),
                 embedder=embedder if embedder is not None else load_embedder(config.embedder), config=config,
                 seeds=[seed + j for j in range(config.num_seeds)], latent_shape=latent_shape,
                 photo_latents=latents)


def select_splits(probe: Probe, budgets: Sequence[int], ratios: Sequence[float | None] | None = None) -> list[dict]:
    """For each budget k: {"budget", "skip_ratio", "chosen": [n, m], "splits": [every split's score],
    "stability": `pick_stability`}. A choice the probe's seeds do not back firmly is logged as a warning."""
    ratios = list(ratios) if ratios is not None else [None] * len(budgets)
    for k in budgets:
        check_budget(probe.num_blocks, k)
    out = []
    for k, r in zip(budgets, ratios):
        t0 = time.perf_counter()
        rows = score_splits(probe, k)
        n, m = choose(rows)
        stability = pick_stability(rows)
        log.info("budget %d: chose front %d, back %d (%.1f s)", k, n, m, time.perf_counter() - t0)
        share = stability["pick_share"]
        if share is not None and share < WEAK_PICK_SHARE:
            runner = stability["runner_up"]
            log.warning("budget %d: the split %d front / %d back won %.0f%% of %d resamples of the probe's %d noise "
                        "seeds (runner-up %s): within the probe's noise. `ditskip-edge select --seeds N` probes more "
                        "noise; compile --skip-front / --skip-back take a split as given", k, n, m, 100 * share,
                        stability["resamples"], len(probe.seeds),
                        f"{runner[0]} / {runner[1]}" if runner else "none")
        out.append({"budget": k, "skip_ratio": r, "chosen": [n, m], "splits": rows, "stability": stability})
    return out


def selection_record(probe: Probe, result: dict, prompt: str) -> dict:
    """What a SkipPlan (and so the bundle manifest) records about how it was chosen."""
    emb = probe.embedder
    return {"method": probe.config.method, "config": probe.config.to_json(), "embedder": getattr(emb, "name", "?"),
            "embedder_description": getattr(emb, "description", ""), "seeds": probe.seeds, "prompt": prompt,
            "scored_on": scored_on(probe.config), "budget": result["budget"], "skip_ratio": result["skip_ratio"],
            "scores": result["splits"], "stability": result["stability"]}


def select_plan(spec: ModelSpec, transformer: nn.Module, vae: nn.Module, photos: Sequence[Photo] | None,
                prompt: str, skip_ratio: float, seed: int = 0, config: SelectionConfig | None = None) -> SkipPlan:
    """The skip plan for a ratio, chosen by cross-attention masking (what `compile --skip-ratio` uses)."""
    config = config or SelectionConfig()
    k = skip_budget(len(block_names_of(transformer)), skip_ratio)     # a bad ratio fails before any forward
    probe = make_probe(spec, transformer, vae, photos, prompt, seed, config)
    result = select_splits(probe, [k], [skip_ratio])[0]
    n, m = result["chosen"]
    return SkipPlan(probe.num_blocks, n, m, chosen_by="selection", selection=selection_record(probe, result, prompt))
