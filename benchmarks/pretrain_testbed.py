"""Pretrain `flux-testbed`: a small FluxTransformer2DModel (ModelSpec in ditskip_edge/models/specs.py) on generated
captioned scenes (benchmarks/testbed/scenes.py), rectified flow in pixel space, MiniLM text conditioning.

    caption pool (fixed seed, MiniLM-encoded once) -> per sample: render the scene at 64 px with fresh jitter and
    pixel noise, cut a crop (75% the whole image, 25% a random square of 32..64 px, as dynamic patches do) and
    resize it to 32 px with the same PatchSampler the compiler uses -> space-to-depth -> FLUX, t ~ U(0, 1) mixed
    with logit-normal, 10% of captions dropped to "" (for classifier-free guidance), AdamW, cosine lr over a
    wall-clock budget; the saved weights are an exponential moving average (decay 0.999) of the trained ones.

Writes ditskip_edge/assets/flux-testbed/transformer.safetensors (+ pretrain_log.json with the command, seed,
machine, steps, losses). The committed weights: 65 min, 2 threads on the 2-core machine (shared with short tuning
runs and tests for about 25 of the 65 min), 8654 steps x 32 scenes, mean loss 0.52 (first 200 steps) -> 0.069 (last
500), from the losses in pretrain_log.json:

    python benchmarks/pretrain_testbed.py --threads 2          # defaults: --minutes 65 --lr 1e-3 --captions 8192

(that run passed --num-heads 4 --out /tmp/... because the spec still had width 64 then; the spec now has 4 heads).
On a machine shared with other jobs use --threads 1: two threads spin in OpenMP barriers there.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ditskip_edge.models.latents import LatentEncoder                     # noqa: E402
from ditskip_edge.models.loading import build_vae, builtin_weights_path, transformer_class  # noqa: E402
from ditskip_edge.models.specs import builtin_spec                        # noqa: E402
from ditskip_edge.models.text import MiniLMTextEncoder                    # noqa: E402
from ditskip_edge.models.views import make_view                           # noqa: E402
from ditskip_edge.patch_sampling import PatchSampler                      # noqa: E402
from benchmarks.testbed.scenes import SCENE_PX, object_region, random_scene, render    # noqa: E402


def caption_pool(n: int, seed: int, spec, batch: int = 256):
    rnd = random.Random(seed)
    scenes, captions = [], []
    for _ in range(n):
        s, c = random_scene(rnd)
        scenes.append(s)
        captions.append(c)
    enc = MiniLMTextEncoder(spec)
    txt, pooled = [], []
    for i in range(0, n + 1, batch):
        chunk = (captions + [""])[i:i + batch]
        if chunk:
            c = enc.encode_batch(chunk)
            txt.append(c["txt"])
            pooled.append(c["pooled"])
    return scenes, captions, torch.cat(txt), torch.cat(pooled)    # last row: the empty prompt


def jittered(scene, rnd: random.Random):
    from dataclasses import replace
    cx, cy = scene.centre
    return replace(scene, centre=(cx + rnd.uniform(-0.03, 0.03), cy + rnd.uniform(-0.03, 0.03)),
                   half_extent_px=scene.half_extent_px * rnd.uniform(0.95, 1.05))


def object_weighted_mse(pred: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    """Velocity MSE with per-element weights (normalised by their mean, so the loss keeps its scale); `None`:
    the plain MSE of earlier stages."""
    if weight is None:
        return F.mse_loss(pred, target)
    return ((pred - target) ** 2 * weight).sum() / weight.sum()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=65.0, help="wall-clock budget for the training loop")
    ap.add_argument("--threads", type=int, default=1)   # 2 threads on a shared 2-core machine spin in OpenMP barriers: 10x slower
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--captions", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="weights file (default: the spec's asset path)")
    ap.add_argument("--ema", type=float, default=0.999, help="EMA decay of the saved weights (0: no EMA)")
    ap.add_argument("--num-heads", type=int, default=None,
                    help="override the spec's attention heads (width = heads x 32), to try a size before the spec")
    ap.add_argument("--init", default=None,
                    help="start from these weights (a safetensors file of the same config), e.g. the committed ones")
    ap.add_argument("--object-weight", type=float, default=0.0,
                    help="extra loss weight on the object region (scenes.object_region: where shapes differ); "
                    "0 (default): the plain MSE. Per element, weight = 1 + this x the region's coverage")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda: the model, its inputs and the optimizer "
                    "on that device; scenes are still rendered on the CPU")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    spec = builtin_spec("flux-testbed")
    out = Path(args.out) if args.out else builtin_weights_path(spec)
    out.parent.mkdir(parents=True, exist_ok=True)

    t_start = time.time()
    scenes, captions, txt_pool, pooled_pool = caption_pool(args.captions, args.seed, spec)
    print(f"encoded {len(captions)} captions in {time.time() - t_start:.0f} s", flush=True)

    config = dict(spec.transformer_config)
    if args.num_heads:
        config["num_attention_heads"] = args.num_heads
    model = transformer_class(spec.arch).from_config(config)
    init_sha = None
    if args.init:
        from safetensors.torch import load_file
        from ditskip_edge.runtime.bundle import sha256_file
        model.load_state_dict(load_file(args.init), strict=True)
        init_sha = sha256_file(Path(args.init))
    model = model.to(device).train()
    txt_pool, pooled_pool = txt_pool.to(device), pooled_pool.to(device)
    view = make_view(spec.arch, model)
    encoder = LatentEncoder(spec.arch, build_vae(spec))
    sampler = PatchSampler(spec.train_px)
    params = [p for p in model.parameters()]
    ema_params = [p.detach().clone() for p in params]          # the weights that are saved (EMA of the trained ones)
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.99), weight_decay=0.01)
    rnd = random.Random(args.seed + 1)
    np_rng = np.random.default_rng(args.seed + 2)
    budget_s = args.minutes * 60
    warmup = 100
    log = {"command": " ".join(["python"] + sys.argv), "seed": args.seed, "machine": platform.platform(),
           "processor": platform.processor() or platform.machine(), "threads": args.threads,
           "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"), "batch": args.batch,
           "lr": args.lr, "captions": len(captions), "params": sum(p.numel() for p in params), "ema": args.ema,
           "config": config, "device": str(device), "init": args.init, "init_sha256": init_sha, "object_weight": args.object_weight, "losses": []}
    t0 = time.time()
    step, last_save, ema = 0, t0, None

    def save(final: bool) -> None:
        by_id = {id(p): e for p, e in zip(params, ema_params)}
        sd = {k: (by_id.get(id(v), v) if args.ema else v).detach().cpu().contiguous()
              for k, v in model.state_dict(keep_vars=True).items()}
        save_file(sd, str(out))
        log.update(steps=step, samples=step * args.batch, train_seconds=round(time.time() - t0, 1), final=final,
                   finished_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        out.with_name("pretrain_log.json").write_text(json.dumps(log, indent=1))

    while time.time() - t0 < budget_s:
        frac = (time.time() - t0) / budget_s
        lr = args.lr * min(1.0, (step + 1) / warmup) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        idx = [rnd.randrange(len(scenes)) for _ in range(args.batch)]
        imgs, regions = [], []
        for i in idx:
            scene = jittered(scenes[i], rnd)
            big = render(scene, SCENE_PX, np_rng)[None]
            if rnd.random() < 0.25:
                side = rnd.randint(spec.train_px, SCENE_PX)
                box = torch.tensor([rnd.randint(0, SCENE_PX - side), rnd.randint(0, SCENE_PX - side), side],
                                   dtype=torch.float32)
            else:
                box = torch.tensor([0.0, 0.0, float(SCENE_PX)])
            imgs.append(sampler(big, box))
            if args.object_weight:
                regions.append(sampler(object_region(scene, SCENE_PX).expand(3, -1, -1)[None], box))
        with torch.no_grad():
            x0 = view.pack(encoder(torch.cat(imgs).to(device)))               # [B, 64, 48]
            weight = (1 + args.object_weight * view.pack(encoder(torch.cat(regions).to(device)))
                      if args.object_weight else None)                         # same layout as x0
        drop = torch.tensor([rnd.random() < 0.1 for _ in idx])
        rows = torch.tensor(idx).masked_fill(drop, len(scenes)).to(device)   # dropped -> the empty prompt
        cond = {"txt": txt_pool[rows], "pooled": pooled_pool[rows]}
        u = torch.rand(args.batch)
        t = torch.where(torch.rand(args.batch) < 0.5, u, torch.sigmoid(torch.randn(args.batch))).to(device)
        noise = torch.randn_like(x0)
        x_t = (1 - t[:, None, None]) * x0 + t[:, None, None] * noise
        with device:                     # tensors the view makes itself (position ids) on the model's device
            loss = object_weighted_mse(view(x_t, t, cond), noise - x0, weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if args.ema:
            with torch.no_grad():
                torch._foreach_lerp_(ema_params, [p.detach() for p in params],
                                     1.0 - min(args.ema, (1 + step) / (10 + step)))
        step += 1
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        log["losses"].append(round(loss.item(), 5))
        if step % 20 == 0:
            print(f"step {step} loss {ema:.4f} lr {lr:.2e} {time.time() - t0:.0f}s", flush=True)
        if time.time() - last_save > 300:
            save(False)
            last_save = time.time()
    save(True)
    print(f"done: {step} steps, {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
