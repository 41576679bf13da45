"""The selection rule (PAPER.md section 3): for a skip budget k, score every split n + m = k and take the argmin.

    score(n, m) = mean over seeds j of  D(x_g, x_hat_n) + D(x_g, x_tilde_m),     D = 1 - cosine(embeddings)

x_g: the unmasked images; x_hat_n: with the text masked in the first n blocks; x_tilde_m: in the last m blocks.
n = 0 (or m = 0) masks nothing, so its distance is 0. Ties go to the split with the smaller n (listed first).
Each split also keeps its per-seed scores, and `pick_stability` says how firmly they back the choice: the
share of bootstrap resamples of the seeds that pick it (below WEAK_PICK_SHARE the choice is within the probe's
noise; the caller warns).

What the images are (`SelectionConfig.method`):
- "generation" (the paper's): the model's own Euler sampler from noise, one image per seed, for the prompt.
- "proxy": x0_hat = x_t - t v at `proxy_times`, one forward each, x_t from the subject's photo latents and the
  seed's noise (photo j mod P for seed j); D is averaged over the times too.
Which model is probed (`SelectionConfig.probe`):
- "tuned" (the paper's): a copy of the model with a short LoRA on the subject's photos (`tuning.py`,
  `tune_steps` steps), so the masking sees where this subject's text binding lives.
- "base" (the default): the model as it is (no subject LoRA); only the proxy method carries the photos in.

The probe caches the embeddings of each masked set, so all budgets of one run share the 2 k_max + 1 image sets.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F

from ..runtime.errors import UserError
from ..images import Photo
from ..models.latents import LatentEncoder
from ..models.views import Conditioning, DiTView
from .embedders import DEFAULT_EMBEDDER, cosine_distance
from .masking import text_masked
from .sampling import generate, predict_clean

METHODS = ("generation", "proxy")
PROBES = ("base", "tuned")


@dataclass(frozen=True)
class SelectionConfig:
    method: str = "generation"
    steps: int = 4                                          # Euler steps of the generation
    num_seeds: int = 2                                      # seeds seed, seed + 1, ...
    proxy_times: tuple[float, ...] = (0.8, 0.5, 0.2)        # proxy: rectified-flow times (1 = noise)
    embedder: str = DEFAULT_EMBEDDER
    probe: str = "base"                                     # "base" | "tuned" (short LoRA first, the paper's)
    tune_steps: int = 100                                   # tuned: LoRA steps on the photos
    tune_lr: float = 5e-3
    tune_rank: int = 8
    tune_batch: int = 4

    def validate(self) -> None:
        if self.method not in METHODS:
            raise UserError(f"selection method {self.method!r}: expected one of {', '.join(METHODS)}")
        if self.probe not in PROBES:
            raise UserError(f"selection probe {self.probe!r}: expected one of {', '.join(PROBES)}")
        if self.probe == "tuned" and (self.tune_steps < 1 or self.tune_batch < 1 or self.tune_rank < 1):
            raise UserError(f"tuned probe: tune_steps, tune_batch and tune_rank must be >= 1, got "
                            f"{self.tune_steps}, {self.tune_batch}, {self.tune_rank}")
        if self.steps < 1:
            raise UserError(f"selection steps must be >= 1, got {self.steps}")
        if self.num_seeds < 1:
            raise UserError(f"selection seeds must be >= 1, got {self.num_seeds}")
        if not self.proxy_times or not all(0.0 < t <= 1.0 for t in self.proxy_times):
            raise UserError(f"proxy times must be in (0, 1], got {list(self.proxy_times)}")

    def to_json(self) -> dict:
        d = asdict(self)
        d["proxy_times"] = list(self.proxy_times)
        if self.method == "generation":
            d.pop("proxy_times")
        else:
            d.pop("steps")
        if self.probe == "base":
            for k in ("tune_steps", "tune_lr", "tune_rank", "tune_batch"):
                d.pop(k)
        return d


def check_budget(num_blocks: int, k: int) -> int:
    if not 0 < k < num_blocks:
        raise UserError(f"skip budget {k}: need 0 < k < {num_blocks} (the model's number of blocks), "
                        f"so that at least one block is kept")
    return int(k)


def front_set(n: int) -> tuple[int, ...]:
    return tuple(range(n))


def back_set(num_blocks: int, m: int) -> tuple[int, ...]:
    return tuple(range(num_blocks - m, num_blocks))


def photo_latents(photo: Photo, train_px: int, encoder: LatentEncoder) -> torch.Tensor:
    """Centre square of the photo, resized to the train resolution, encoded: [1, C, h, w]."""
    _, h, w = photo.pixels.shape
    s = min(h, w)
    top, left = (h - s) // 2, (w - s) // 2
    square = photo.pixels[None, :, top:top + s, left:left + s]
    square = F.interpolate(square, size=(train_px, train_px), mode="bilinear", align_corners=False, antialias=True)
    with torch.no_grad():
        return encoder(square)


@dataclass
class Probe:
    """Masked images of one model, prompt and seed set, embedded; cached per masked block set."""
    view: DiTView                       # over all blocks
    decoder: LatentEncoder
    cond: Conditioning
    embedder: object
    config: SelectionConfig
    seeds: list[int]
    latent_shape: tuple[int, ...]       # generation: [1, C, h, w]
    photo_latents: list[torch.Tensor] = field(default_factory=list)   # proxy: one [1, C, h, w] per photo
    _cache: dict = field(default_factory=dict)

    @property
    def num_blocks(self) -> int:
        return len(self.view.blocks)

    def images(self, masked: tuple[int, ...]) -> torch.Tensor:
        """[S, 3, H, W]: one image per seed (generation) or per seed and proxy time (proxy)."""
        with text_masked(self.view, masked):
            if self.config.method == "generation":
                return torch.cat([generate(self.view, self.decoder, self.cond, self.latent_shape, s,
                                           self.config.steps) for s in self.seeds], 0)
            return torch.cat([predict_clean(self.view, self.decoder, self.cond,
                                            self.photo_latents[j % len(self.photo_latents)], s,
                                            self.config.proxy_times) for j, s in enumerate(self.seeds)], 0)

    def embeddings(self, masked: tuple[int, ...]) -> torch.Tensor:
        if masked not in self._cache:
            self._cache[masked] = self.embedder(self.images(masked))
        return self._cache[masked]

    def distances(self, masked: tuple[int, ...]) -> tuple[float, list[float]]:
        """D(x_g, x_masked): its mean over seeds (and proxy times), and per seed (the proxy: averaged over its times)
        in `seeds` order; 0 when nothing is masked."""
        if not masked:
            return 0.0, [0.0] * len(self.seeds)
        d = cosine_distance(self.embeddings(()), self.embeddings(masked))
        return float(d.mean()), d.reshape(len(self.seeds), -1).mean(1).tolist()


def score_splits(probe: Probe, k: int) -> list[dict]:
    """Every split n + m = k, n = 0 .. k, with its score."""
    b = probe.num_blocks
    check_budget(b, k)
    rows = []
    for n in range(k + 1):
        m = k - n
        front, back = front_set(n), back_set(b, m)
        (d_front, seeds_front), (d_back, seeds_back) = probe.distances(front), probe.distances(back)
        per_seed = [d_f + d_b for d_f, d_b in zip(seeds_front, seeds_back)]
        rows.append({"n_front": n, "n_back": m, "score": d_front + d_back,
                     "front_distance": d_front, "back_distance": d_back, "seed_scores": per_seed})
    return rows


def choose(rows: list[dict]) -> tuple[int, int]:
    best = min(rows, key=lambda r: (r["score"], r["n_front"]))
    return best["n_front"], best["n_back"]


STABILITY_RESAMPLES = 1000          # bootstrap resamples of the probe's seeds
WEAK_PICK_SHARE = 0.8               # a choice backed by fewer resamples than this is within the probe's noise


def pick_stability(rows: list[dict], resamples: int = STABILITY_RESAMPLES, seed: int = 0) -> dict:
    """How firmly the probe's noise seeds back the choice (`score_splits` rows, each with its `seed_scores`).

    pick_share: the share of bootstrap resamples of the seeds (S seeds drawn with replacement, a fixed generator)
    whose mean score is lowest at the chosen split (ties to the smaller n, as `choose`); None with one seed (no
    spread to resample). runner_up: the split that wins most of the other resamples (None if none).
    per_seed_picks: the split each seed alone would choose. A share below WEAK_PICK_SHARE means another noise
    draw would likely have chosen differently: the scores do not tell the splits apart."""
    scores = torch.tensor([r["seed_scores"] for r in rows], dtype=torch.float64)       # [splits, S]
    splits = [[r["n_front"], r["n_back"]] for r in rows]
    chosen = splits.index(list(choose(rows)))
    num_seeds = scores.shape[1]
    per_seed = [splits[i] for i in scores.argmin(0).tolist()]        # argmin takes the first minimum: smaller n
    if num_seeds < 2:
        return {"pick_share": None, "runner_up": None, "per_seed_picks": per_seed, "resamples": 0}
    draws = torch.randint(num_seeds, (resamples, num_seeds), generator=torch.Generator().manual_seed(seed))
    wins = torch.bincount(scores[:, draws].mean(-1).argmin(0), minlength=len(rows))   # [splits]
    others = wins.clone()
    others[chosen] = 0
    return {"pick_share": round(float(wins[chosen]) / resamples, 4),
            "runner_up": splits[int(others.argmax())] if int(others.max()) > 0 else None,
            "per_seed_picks": per_seed, "resamples": resamples}
