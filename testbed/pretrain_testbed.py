"""Pretrain `flux-testbed`: a small FluxTransformer2DModel (ModelSpec in ditskip_edge/models/specs.py) on generated
captioned scenes (testbed/scenes.py), rectified flow in pixel space, MiniLM text conditioning.

    caption pool (fixed seed, MiniLM-encoded once) -> per sample: render the scene at 64 px with fresh jitter and
    pixel noise, cut a crop (75% the whole image, 25% a random square of 32..64 px, as dynamic patches do) and
    resize it to 32 px with the same PatchSampler the compiler uses -> space-to-depth -> FLUX, t ~ U(0, 1) mixed
    with logit-normal, 10% of captions dropped to "" (for classifier-free guidance), AdamW, cosine lr over a
    wall-clock budget; the saved weights are an exponential moving average (decay 0.999) of the trained ones.

Writes ditskip_edge/assets/flux-testbed/transformer.safetensors (+ pretrain_log.json with the command, seed,
machine, steps, losses); with several --object-weight values, one file pair per value (variant_paths).

The committed weights were pretrained on one lent NVIDIA H200 (2026-12-04, two sessions; the chain in the asset's
pretrain_log.json, logs in testbed/results/pretrain/gpu_run*), with testbed/gpu_payload.py's payload unpacked
there first (the GPU image has no diffusers and no MiniLM weights):

    python3 testbed/pretrain_testbed.py --device cuda --workers 15 --batch 256 --captions 65536 --minutes 7 \
        --object-weight 0 4                     # 2685 steps, both models on the same batches; the w 4 one kept
    python3 testbed/pretrain_testbed.py --device cuda --workers 15 --batch 1024 --lr 5e-4 --captions 65536 \
        --minutes 2.75 --object-weight 4 --init <stage 1's w 4 weights>        # 724 steps
    python3 testbed/pretrain_testbed.py --device cuda --workers 15 --batch 1024 --lr 5e-4 --captions 65536 \
        --minutes 7.6 --echo 3 --object-weight 4 --init <stage 2's weights>    # 5002 steps, 1.71M scenes
    python3 testbed/pretrain_testbed.py --device cuda --workers 15 --batch 1024 --lr 2e-4 --captions 65536 \
        --minutes 3.2 --echo 3 --object-weight 4 --init <stage 3's weights>    # 2152 steps, 0.74M scenes

3.87M scenes rendered (8.75M samples trained on) in 20.6 min of training, against 0.36M in the CPU stages
(276928 + 2717 x 32). At batch 256 the GPU step was the limit (6.4 steps/s for the two models, the data wait 1.5 s
of 420 s; not profiled: presumably the launches of a 4.6M-parameter model's many small kernels); at batch 1024 the 15
rendering workers were (4.5k scenes/s, the data wait 99 s of 165 s), so stages 3 and 4 train three steps on each
rendered batch with fresh timesteps and noise (--echo 3): 11 steps/s, the data wait 4 s of 456 s.
`python testbed/experiments/testbed_samples.py --seeds 8` scores the object's shape as prompted 0.25 after stage 2, 0.69
after stage 3 and 0.75 after stage 4 (testbed/results/testbed_samples*.md). On the 2-core machine (the earlier
CPU stages):

    python testbed/pretrain_testbed.py --threads 2          # defaults: --minutes 65 --lr 1e-3 --captions 8192

On a machine shared with other jobs use --threads 1: two threads spin in OpenMP barriers there.

--marking-share 0.5 (scenes.SceneDomain: textures in a colour of their own, named, "with white dots") continued the
committed weights for 65 CPU minutes beside a control without it (164k samples each, 2026-12-05): the model then
draws a named marking 0.97 of the time against 0.78, and `make demo`'s path on the held-out subjects is unmoved
(testbed/results/marking_domain.md); those weights were not kept. --instance-share 0.5 (scenes.INSTANCES: 32
made-up words, each one object on any background) with the control's flags, 2026-12-06: the words then draw their
object's marking 0.80 of the time against 0.05 (testbed/experiments/instance_samples.py), the demo's path unmoved
(testbed/results/instance_domain.md); not kept either.

--grow-single / --grow-double (with --init) insert zero-gated copies of blocks into the init weights first
(testbed/grow.py: the grown model draws what the init draws until the new gates open), --grow-lr trains the
new blocks at their own rate. 65 CPU minutes of --grow-single 8 (79k samples, 2026-12-06) opened the new gates to
5-11% of an old block's and left shape as prompted and the demo's path where the control was
(testbed/results/grown_testbed.md); those weights were not kept. On a GPU, through gpu_payload.py run:

    ... -- --device cuda --workers 15 --batch 1024 --minutes 7 --echo 3 --lr 2e-4 --grow-lr 1e-3 --grow-single 8 \
        --object-weight 4 --init ditskip_edge/assets/flux-testbed/transformer.safetensors

Any weights this script writes are a model name of their own (`--model W.safetensors` for compile, the demo and the
benchmarks: ditskip_edge/models/loading.py testbed_weights_spec), so new weights are measured beside the committed
ones before they replace them; --init with grown weights continues them.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import platform
import random
import sys
import time
import warnings
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ditskip_edge.models.latents import LatentEncoder                     # noqa: E402
from ditskip_edge.models.loading import (build_vae, builtin_weights_path, testbed_weights_spec,  # noqa: E402
                                         transformer_class)
from ditskip_edge.models.specs import builtin_spec                        # noqa: E402
from ditskip_edge.models.text import (MiniLMTextEncoder, _minilm, _minilm_tokenizer,  # noqa: E402
                                      dropped_words)
from ditskip_edge.models.views import make_view                           # noqa: E402
from ditskip_edge.patch_sampling import PatchSampler                      # noqa: E402
from testbed.grow import STACKS, grow_depth                  # noqa: E402
from testbed.scenes import (SCENE_PX, SceneDomain, object_region, random_scenes,  # noqa: E402
                                      render)


def truncated_captions(captions: list[str], spec) -> dict:
    """How many captions are longer than the testbed's text encoder reads (spec.text.seq_len - 2 word pieces: CLS,
    SEP), and of those how many lose more than the closing word "background" (the background's colour word, in
    full or in part, or more): the pool's one-line account, instead of a warning per caption."""
    tokenizer = _minilm_tokenizer()
    keep = spec.text.seq_len - 2
    dropped = [dropped_words(tokenizer.tokenize(c), keep) for c in captions]
    cut = [d for d in dropped if d]
    more = [d for d in cut if d != "background"]
    return {"captions": len(captions), "word_pieces_read": keep, "truncated": len(cut),
            "losing_more_than_background": len(more), "examples_dropped": sorted(set(more))[:3]}


def caption_pool(n: int, seed: int, spec, batch: int = 256, device: torch.device | str = "cpu",
                 domain: SceneDomain = SceneDomain()):
    """n random scenes of `domain` and their captions (fixed seed), the captions MiniLM-encoded once on `device`
    (the GPU when pretraining there: 65k captions in seconds), plus the empty prompt as the last row. The text
    encoder's warning for each caption it cuts is left out here (thousands in a 65k pool): `truncated_captions`
    counts them."""
    pool = random_scenes(n, seed, domain)
    scenes, captions = [s for s, _ in pool], [c for _, c in pool]
    enc = MiniLMTextEncoder(spec)
    minilm = _minilm()[1]
    minilm.to(device)
    txt, pooled = [], []
    try:
        for i in range(0, n + 1, batch):
            chunk = (captions + [""])[i:i + batch]
            if chunk:
                c = enc.encode_batch(chunk, warn_truncated=False)
                txt.append(c["txt"].to(device))
                pooled.append(c["pooled"].to(device))
    finally:
        minilm.to("cpu")               # the cached encoder stays where every other caller expects it
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


class SceneBatches(torch.utils.data.IterableDataset):
    """Endless training batches rendered on the CPU, each (images_bchw [B, 3, train_px, train_px] in [-1, 1],
    object regions [B, 3, train_px, train_px] in [0, 1] or None, caption rows [B] with the dropped ones (10%, for
    classifier-free guidance) pointing at the empty prompt, row len(scenes)).

    Per sample: the scene with fresh jitter and pixel noise at 64 px, a crop (75% the whole image, 25% a random
    square of train_px..64 px, as dynamic patches do) resized to train_px by the compiler's PatchSampler. In the
    training process (no workers) it draws from the seeds the script always used (seed + 1, seed + 2), so a CPU run
    is the one it was; DataLoader worker w draws from its own seeds (w + 1) x 1000 further on."""

    def __init__(self, scenes, batch: int, train_px: int, with_regions: bool, seed: int):
        super().__init__()
        self.scenes, self.batch, self.with_regions, self.seed = scenes, batch, with_regions, seed
        self.train_px = train_px

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        offset = 0 if info is None else 1000 * (info.id + 1)
        rnd = random.Random(self.seed + 1 + offset)
        np_rng = np.random.default_rng(self.seed + 2 + offset)
        sampler = PatchSampler(self.train_px)
        while True:
            yield self.render_batch(rnd, np_rng, sampler)

    def render_batch(self, rnd: random.Random, np_rng: np.random.Generator, sampler: PatchSampler):
        idx = [rnd.randrange(len(self.scenes)) for _ in range(self.batch)]
        imgs, regions = [], []
        for i in idx:
            scene = jittered(self.scenes[i], rnd)
            big = render(scene, SCENE_PX, np_rng)[None]
            if rnd.random() < 0.25:
                side = rnd.randint(self.train_px, SCENE_PX)
                box = torch.tensor([rnd.randint(0, SCENE_PX - side), rnd.randint(0, SCENE_PX - side), side],
                                   dtype=torch.float32)
            else:
                box = torch.tensor([0.0, 0.0, float(SCENE_PX)])
            imgs.append(sampler(big, box))
            if self.with_regions:
                regions.append(sampler(object_region(scene, SCENE_PX).expand(3, -1, -1)[None], box))
        drop = torch.tensor([rnd.random() < 0.1 for _ in idx])
        rows = torch.tensor(idx).masked_fill(drop, len(self.scenes))     # dropped -> the empty prompt
        return torch.cat(imgs), (torch.cat(regions) if self.with_regions else None), rows


class Variant:
    """One model trained on the shared batches: its object weight, optimizer, EMA weights, loss log and files."""

    def __init__(self, arch: str, model: torch.nn.Module, object_weight: float, lr: float, weights_path: Path,
                 log_path: Path, new_prefixes: tuple[str, ...] = (), new_lr_scale: float = 1.0):
        self.model, self.object_weight = model, object_weight
        self.view = make_view(arch, model)
        self.weights_path, self.log_path = weights_path, log_path
        self.params = list(model.parameters())
        self.ema_params = [p.detach().clone() for p in self.params]     # the saved weights: EMA of the trained ones
        named = list(model.named_parameters())          # str.startswith(()) is False: no prefixes, one group
        groups = [{"params": [p for n, p in named if not n.startswith(new_prefixes)], "lr_scale": 1.0}]
        new = [p for n, p in named if n.startswith(new_prefixes)]
        if new:                                   # grown blocks (--grow-*) at their own learning rate
            groups.append({"params": new, "lr_scale": new_lr_scale})
        self.opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.99), weight_decay=0.01)
        self.losses: list[float] = []
        self.loss_ema: float | None = None

    def state_dict(self, ema: bool) -> dict[str, torch.Tensor]:
        by_id = {id(p): e for p, e in zip(self.params, self.ema_params)}
        return {k: (by_id.get(id(v), v) if ema else v).detach().cpu().contiguous()
                for k, v in self.model.state_dict(keep_vars=True).items()}


def variant_paths(out: Path, object_weights: list[float]) -> list[tuple[Path, Path]]:
    """(weights, log) per object weight: one variant writes `out` and pretrain_log.json beside it, as ever;
    several write <stem>_ow<weight><suffix> and pretrain_log_ow<weight>.json."""
    if len(object_weights) == 1:
        return [(out, out.with_name("pretrain_log.json"))]
    return [(out.with_name(f"{out.stem}_ow{w:g}{out.suffix}"), out.with_name(f"pretrain_log_ow{w:g}.json"))
            for w in object_weights]


def share(text: str) -> float:
    """An argparse type: a share in [0, 1]."""
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r}: a share in [0, 1]")
    return value


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
                    help="start from these weights (a safetensors file of the spec's width), e.g. the committed ones; "
                    "the model takes the block counts they hold (grown weights continue)")
    ap.add_argument("--object-weight", type=float, nargs="+", default=[0.0],
                    help="extra loss weight on the object region (scenes.object_region: where shapes differ); "
                    "0 (default): the plain MSE. Per element, weight = 1 + this x the region's coverage. Several "
                    "values: one model per value, all from the same init on the same batches (files per --out's "
                    "stem + _ow<value>)")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda: the model, its inputs and the optimizer "
                    "on that device; scenes are still rendered on the CPU")
    ap.add_argument("--echo", type=int, default=1,
                    help="optimizer steps per rendered batch, each with fresh timesteps and noise (data echoing); "
                    "1 (default): every step a new batch. Where rendering is the limit (batch 1024 on 15 workers) "
                    "the GPU trains 2-3 steps per batch in the time one batch takes to render")
    ap.add_argument("--workers", type=int, default=0,
                    help="processes rendering scenes (DataLoader workers); 0 (default): the training process "
                    "renders them itself, as on the 2-core machine. On a GPU machine: its cores minus one")
    ap.add_argument("--marking-share", type=share, default=0.0,
                    help="share of textured objects with a texture colour of their own, named (\"a pink square with "
                    "white dots\"; scenes.SceneDomain); 0 (default): the committed weights' domain")
    ap.add_argument("--instance-share", type=share, default=0.0,
                    help="share of scenes that are one of scenes.INSTANCES, a fixed object named by a made-up word "
                    "on any background (\"a large pink vex square, on a blue background\"); 0 (default): the "
                    "committed weights' domain")
    ap.add_argument("--inner-share", type=share, default=SceneDomain().inner_share,
                    help="share of objects with a centre of another colour (\"with an orange centre\"; default "
                    "%(default)s, as the last stage of the committed weights)")
    ap.add_argument("--grow-double", type=int, default=0,
                    help="zero-gated copies of double-stream blocks to insert into the --init weights before training "
                    "(testbed/grow.py: the grown model starts drawing exactly what --init draws)")
    ap.add_argument("--grow-single", type=int, default=0, help="the same for single-stream blocks")
    ap.add_argument("--grow-lr", type=float, default=None,
                    help="learning rate of the grown blocks (default: --lr; the others keep --lr)")
    args = ap.parse_args()
    if (args.grow_double or args.grow_single) and not args.init:
        ap.error("--grow-double / --grow-single grow the --init weights: name them with --init")
    if args.grow_double < 0 or args.grow_single < 0:
        ap.error(f"--grow-double {args.grow_double} / --grow-single {args.grow_single}: blocks to add, 0 or more")
    if args.grow_lr is not None and not (args.grow_double or args.grow_single):
        ap.error("--grow-lr is the grown blocks' learning rate: add blocks with --grow-double / --grow-single")
    if args.grow_lr is not None and args.grow_lr <= 0:
        ap.error(f"--grow-lr {args.grow_lr}: a learning rate above 0")
    domain = SceneDomain(inner_share=args.inner_share, marking_share=args.marking_share,
                         instance_share=args.instance_share)
    if args.workers < 0:
        ap.error(f"--workers {args.workers}: 0 (render in this process) or more processes")
    if args.echo < 1:
        ap.error(f"--echo {args.echo}: 1 (a new batch every step) or more steps per batch")
    if len(set(args.object_weight)) != len(args.object_weight):
        ap.error(f"--object-weight {args.object_weight}: each value once (one model and file pair per value)")
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True          # the saved weights are fp32 all the same
        torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(args.seed)
    spec = builtin_spec("flux-testbed")
    out = Path(args.out) if args.out else builtin_weights_path(spec)
    out.parent.mkdir(parents=True, exist_ok=True)

    config = dict(spec.transformer_config)
    if args.num_heads:
        config["num_attention_heads"] = args.num_heads
    init_state, init_sha = None, None
    if args.init:            # checked before any work: a wrong file fails in seconds, in one line; the model takes
        from safetensors.torch import load_file          # the block counts the init holds (grown weights continue)
        from ditskip_edge.runtime.bundle import sha256_file
        from ditskip_edge.runtime.errors import UserError
        try:
            held = testbed_weights_spec(Path(args.init)).transformer_config
            config = {**config, "num_layers": held["num_layers"], "num_single_layers": held["num_single_layers"]}
            init_state = load_file(args.init)
            # shapes only: no weights allocated, no draws from the seeded RNG, and none of torch's warnings that
            # copying into a meta parameter is a no-op (one per tensor: the point of this check)
            with torch.device("meta"), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*to a meta parameter")
                transformer_class(spec.arch).from_config(config).load_state_dict(init_state, strict=True)
        except (UserError, RuntimeError) as e:     # missing, unreadable, not FLUX blocks, another width
            ap.error(f"--init {args.init}: {str(e).strip().splitlines()[-1].strip()}")
        init_sha = sha256_file(Path(args.init))

    t_start = time.time()
    scenes, captions, txt_pool, pooled_pool = caption_pool(args.captions, args.seed, spec, device=device,
                                                             domain=domain)
    print(f"encoded {len(captions)} captions in {time.time() - t_start:.0f} s on {device}", flush=True)
    truncation = truncated_captions(captions, spec)
    print(f"{truncation['truncated']} of {truncation['captions']} captions are longer than the "
          f"{truncation['word_pieces_read']} word pieces the text encoder reads; "
          f"{truncation['losing_more_than_background']} lose more than 'background' "
          f"(e.g. {', '.join(map(repr, truncation['examples_dropped'])) or 'none'})", flush=True)

    model = transformer_class(spec.arch).from_config(config)
    if init_state is not None:
        model.load_state_dict(init_state, strict=True)
    new_blocks: dict[str, list[int]] = {}
    if args.grow_double or args.grow_single:
        state, config, new_blocks = grow_depth(model.state_dict(), config, args.grow_double, args.grow_single)
        model = transformer_class(spec.arch).from_config(config)     # (its random init draws as the runs' did)
        model.load_state_dict(state, strict=True)
        print(f"grown to {config['num_layers']} double + {config['num_single_layers']} single blocks "
              f"(new, zero-gated: {new_blocks})", flush=True)
    new_prefixes = tuple(f"{STACKS[name][1]}.{j}." for name, blocks in new_blocks.items() for j in blocks)
    new_lr_scale = (args.grow_lr / args.lr) if args.grow_lr else 1.0
    weights = args.object_weight
    variants = []
    for k, (w, (weights_path, log_path)) in enumerate(zip(weights, variant_paths(out, weights))):
        m = (model if k == len(weights) - 1 else copy.deepcopy(model)).to(device).train()   # each its own copy
        variants.append(Variant(spec.arch, m, w, args.lr, weights_path, log_path, new_prefixes, new_lr_scale))
    view = variants[0].view
    encoder = LatentEncoder(spec.arch, build_vae(spec))
    batches = SceneBatches(scenes, args.batch, spec.train_px, any(weights), args.seed)
    if args.workers:
        stream = iter(torch.utils.data.DataLoader(batches, batch_size=None, num_workers=args.workers,
                                                  prefetch_factor=4, persistent_workers=True,
                                                  pin_memory=device.type == "cuda"))
    else:
        stream = iter(batches)
    budget_s = args.minutes * 60
    warmup = 100
    log = {"command": " ".join(["python"] + sys.argv), "seed": args.seed, "machine": platform.platform(),
           "processor": platform.processor() or platform.machine(), "threads": args.threads,
           "workers": args.workers, "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
           "torch": torch.__version__,
           "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"), "batch": args.batch,
           "lr": args.lr, "captions": len(captions), "params": sum(p.numel() for p in variants[0].params),
           "ema": args.ema, "domain": asdict(domain), "config": config, "device": str(device), "init": args.init,
           "init_sha256": init_sha, "grown_blocks": new_blocks, "grow_lr": args.grow_lr,
           "caption_truncation": truncation}
    t0 = time.time()
    step, last_save, wait_s = 0, t0, 0.0

    def save(final: bool) -> None:
        for v in variants:
            save_file(v.state_dict(ema=bool(args.ema)), str(v.weights_path))
            v.log_path.write_text(json.dumps(dict(
                log, object_weight=v.object_weight, losses=v.losses, steps=step, samples=step * args.batch,
                echo=args.echo, scenes=-(-step // args.echo) * args.batch,   # a new batch every echo-th step
                train_seconds=round(time.time() - t0, 1), data_wait_seconds=round(wait_s, 1), final=final,
                finished_utc=datetime.now(timezone.utc).isoformat(timespec="seconds")), indent=1))

    while time.time() - t0 < budget_s:
        frac = (time.time() - t0) / budget_s
        lr = args.lr * min(1.0, (step + 1) / warmup) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * frac)))
        if step % args.echo == 0:                   # a new batch; otherwise the last one again, fresh t and noise
            t_wait = time.time()
            imgs, regions, rows = next(stream)
            wait_s += time.time() - t_wait
            with torch.no_grad():
                x0 = view.pack(encoder(imgs.to(device, non_blocking=True)))            # [B, 64, 48]
                region = view.pack(encoder(regions.to(device))) if regions is not None else None   # x0's layout
            rows = rows.to(device)
            cond = {"txt": txt_pool[rows], "pooled": pooled_pool[rows]}
        u = torch.rand(args.batch)
        t = torch.where(torch.rand(args.batch) < 0.5, u, torch.sigmoid(torch.randn(args.batch))).to(device)
        noise = torch.randn_like(x0)
        x_t = (1 - t[:, None, None]) * x0 + t[:, None, None] * noise
        for v in variants:
            for g in v.opt.param_groups:
                g["lr"] = lr * g["lr_scale"]
            weight = 1 + v.object_weight * region if v.object_weight else None
            with device:                 # tensors the view makes itself (position ids) on the model's device
                loss = object_weighted_mse(v.view(x_t, t, cond), noise - x0, weight)
            v.opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(v.params, 1.0)
            v.opt.step()
            if args.ema:
                with torch.no_grad():
                    torch._foreach_lerp_(v.ema_params, [p.detach() for p in v.params],
                                         1.0 - min(args.ema, (1 + step) / (10 + step)))
            value = loss.item()
            v.loss_ema = value if v.loss_ema is None else 0.98 * v.loss_ema + 0.02 * value
            v.losses.append(round(value, 5))
        step += 1
        if step % 20 == 0:
            losses = " ".join(f"{v.loss_ema:.4f}" for v in variants)
            print(f"step {step} loss {losses} lr {lr:.2e} {time.time() - t0:.0f}s (data wait {wait_s:.0f}s)",
                  flush=True)
        if time.time() - last_save > 300:
            save(False)
            last_save = time.time()
    save(True)
    print(f"done: {step} steps, " + ", ".join(str(v.weights_path) for v in variants), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
