"""One training step as a program: the model (only the modules the step runs), its inputs, its LoRA parameters.

`build_step_program(cfg, device)` builds it from the architecture alone: the diffusers transformer is created on the
meta device, LoRA is injected there, and only the modules the step needs are materialised with `to_empty` on the
target device. Under `FakeTensorMode` that target is a fake CPU device (shapes and dtypes, no data: the planner);
on a real device the weights are random (the benchmark). Skipped blocks are never materialised, so building a
BlockSkip program never holds the full model.

Two kinds of step:
- "skip": the SkipModel over the kept blocks (front residual added after the embedding, back residual before the
  head), reading one residual-cache entry. With n_front = n_back = 0 it is LoRA on every block.
- "diffusers": the diffusers transformer's own forward on all blocks (what diffusers' DreamBooth LoRA script
  trains), optionally with its gradient checkpointing (`enable_gradient_checkpointing`).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..lora import LoraSpec, add_lora
from ..models.loading import build_transformer
from ..models.specs import FLUX_ARCH, ModelSpec
from ..models.views import block_names_of, full_model_forward, make_view
from ..plan import SkipPlan
from ..quantize import QuantSpec, quantize_frozen_layers
from ..remat import RematSpec
from ..runtime.contract import PRECISIONS
from ..runtime.errors import UserError
from ..skip_model import SkipModel, noisy_latents_and_target, residual_names



@dataclass(frozen=True)
class StepConfig:
    spec: ModelSpec
    resolution_px: int                  # side of the square crop the transformer sees
    text_tokens: int                    # L
    n_front: int = 0
    n_back: int = 0
    rank: int = 16
    precision: str = "fp32"             # frozen weights: fp32 | bf16 (weights and compute) | int8 | int4
    kind: str = "skip"                  # "skip" | "diffusers"
    gradient_checkpointing: bool = False  # diffusers kind: diffusers' enable_gradient_checkpointing (the GPU baseline)
    remat: str = "none"                 # skip kind: block rematerialization as the device program runs it: "none",
                                        # "blocks" (each kept block's internals recomputed in backward), "every:K"
    lora_targets: tuple[str, ...] = ()  # () = the architecture's default (lora.DEFAULT_TARGETS)
    recompute_dequant: bool = True      # int8/int4: dequantize again in backward (QuantSpec.recompute_in_backward)

    @property
    def dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.precision == "bf16" else torch.float32

    @property
    def num_blocks(self) -> int:
        c = self.spec.transformer_config
        return int(c["num_layers"]) + int(c.get("num_single_layers", 0))

    @property
    def plan(self) -> SkipPlan:
        return SkipPlan(self.num_blocks, self.n_front, self.n_back)

    def latent_shape(self) -> tuple[int, int, int, int]:
        c = self.spec.transformer_config
        f = self.spec.vae_scale_factor
        if self.resolution_px % self.spec.pixel_multiple:
            raise UserError(f"resolution {self.resolution_px} px: expected a multiple of "
                            f"{self.spec.pixel_multiple} for {self.spec.name}")
        side = self.resolution_px // f
        channels = int(c["in_channels"]) // 4 if self.spec.arch == FLUX_ARCH else int(c["in_channels"])
        return (1, channels, side, side)

    @property
    def hidden_dim(self) -> int:
        c = self.spec.transformer_config
        return int(c["num_attention_heads"]) * int(c["attention_head_dim"])

    @property
    def image_tokens(self) -> int:
        return (self.resolution_px // self.spec.pixel_multiple) ** 2

    @property
    def remat_every(self) -> int:
        """0: no remat; K: the kept blocks recomputed in backward in segments of K."""
        return remat_every(self.remat)

    def validate(self) -> None:
        self.remat_every
        if self.remat != "none" and self.kind != "skip":
            raise UserError("remat is the skip step's (the device program's); the diffusers step has "
                            "gradient_checkpointing")
        if self.gradient_checkpointing and self.kind != "diffusers":
            raise UserError("gradient_checkpointing is the diffusers step's; the skip step has remat")
        if self.precision not in PRECISIONS:
            raise UserError(f"precision {self.precision!r}: expected one of {', '.join(PRECISIONS)}")
        if self.kind not in ("skip", "diffusers"):
            raise UserError(f"kind {self.kind!r}: expected 'skip' or 'diffusers'")
        if self.kind == "diffusers" and (self.n_front or self.n_back):
            raise UserError("the diffusers forward runs every block: n_front and n_back must be 0")
        if self.rank < 1:
            raise UserError(f"rank {self.rank}: expected >= 1")
        if self.text_tokens < 1:
            raise UserError(f"text tokens {self.text_tokens}: expected >= 1")
        if self.resolution_px < self.spec.pixel_multiple:
            raise UserError(f"resolution {self.resolution_px} px: expected >= {self.spec.pixel_multiple}")
        self.latent_shape()
        self.plan   # raises on a plan without kept blocks


class DiffusersStep(nn.Module):
    """Rectified-flow loss through the diffusers transformer's own forward (all blocks)."""

    def __init__(self, arch: str, transformer: nn.Module, view):
        super().__init__()
        self.arch = arch
        self.transformer = transformer
        self.pack = view.pack

    def forward(self, x0, noise, t, cond, residuals):
        x_t, target = noisy_latents_and_target(x0, noise, t)
        pred = full_model_forward(self.arch, self.transformer, self.pack(x_t), t, cond)
        return F.mse_loss(pred, self.pack(target))


@dataclass
class StepProgram:
    cfg: StepConfig
    module: nn.Module                      # (x0, noise, t, cond, entry) -> loss
    inputs: tuple                          # (x0, noise, t, cond, entry)
    lora_params: list[nn.Parameter]
    frozen_modules: list[nn.Module] = field(default_factory=list)

    def loss(self) -> torch.Tensor:
        return self.module(*self.inputs)

    def frozen_bytes(self) -> int:
        return sum(self.frozen_bytes_per_module())

    def frozen_bytes_per_module(self) -> list[int]:
        """Frozen bytes of each module the step runs (the non-block modules first, then one entry per block)."""
        seen, out = set(), []
        for m in self.frozen_modules:
            total = 0
            for n, t in list(m.named_parameters()) + list(m.named_buffers()):
                if t is None or "lora_" in n or t.is_meta or id(t) in seen:
                    continue
                seen.add(id(t))
                total += t.numel() * t.element_size()
            out.append(total)
        return out

    def largest_block_frozen_bytes(self) -> int:
        """The largest single kept block's frozen bytes (what a block-at-a-time pass needs resident at once)."""
        blocks = set(map(id, getattr(getattr(self.module, "view", None), "blocks", [])))
        sizes = self.frozen_bytes_per_module()
        return max((b for m, b in zip(self.frozen_modules, sizes) if id(m) in blocks), default=0)

    def lora_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.lora_params)

    def input_bytes(self) -> dict[str, int]:
        x0, noise, t, cond, entry = self.inputs
        nb = lambda ts: sum(v.numel() * v.element_size() for v in ts)  # noqa: E731
        return {"cache_entry_bytes": nb([x0, *entry.values()]), "text_conditioning_bytes": nb(cond.values()),
                "noise_bytes": nb([noise, t])}


def remat_every(remat: str) -> int:
    """"none" -> 0, "blocks" -> 1, "every:K" -> K: ditskip_edge/remat.py's parse (the exporter's too)."""
    return RematSpec.parse(remat).every


def _remat_segments(view, every: int) -> None:
    """Recompute the kept blocks' activations in backward, K blocks a segment (non-reentrant torch.utils.checkpoint):
    what the device program's block rematerialization keeps alive is the segment boundaries' streams. The last
    segment runs plain: the device program keeps its activations (export/remat.py: its gradients come first)."""
    from torch.utils.checkpoint import checkpoint
    run_blocks = view.run_blocks

    def segmented(blocks, streams, ctx):
        blocks = list(blocks)
        starts = list(range(0, len(blocks), every))
        for i in starts[:-1]:
            streams = checkpoint(run_blocks, blocks[i:i + every], streams, ctx, use_reentrant=False)
        return run_blocks(blocks[starts[-1]:], streams, ctx) if starts else streams
    view.run_blocks = segmented


def _init_(module: nn.Module, gen: torch.Generator) -> None:
    """Random weights of sane scale (benchmark only: values do not change memory or time)."""
    with torch.no_grad():
        for name, p in list(module.named_parameters()) + list(module.named_buffers()):
            if p is None or not p.is_floating_point():
                continue
            if p.dim() >= 2:
                fan_in = p.shape[-1]
                std = 1e-3 if "lora_B" in name else 1.0 / math.sqrt(fan_in)
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32) * std)
            elif name.endswith("weight") and "norm" in name:
                p.fill_(1.0)
            else:
                p.zero_()


def _materialize(module: nn.Module, device: str, dtype: torch.dtype, quant: QuantSpec | None, seed: int) -> None:
    module.to_empty(device=device)
    if device != "meta":
        _init_(module, torch.Generator().manual_seed(seed))
    if dtype != torch.float32:
        for n, p in module.named_parameters():
            if "lora_" not in n:
                p.data = p.data.to(dtype)
    if quant is not None:
        quantize_frozen_layers(module, quant)      # frozen linears and convolutions (SANA's GLUMBConv)


def quantize_direct_layers(parent: nn.Module, quant: QuantSpec | None) -> None:
    """The frozen nn.Linear / nn.Conv2d that are `parent`'s own children (FLUX's context_embedder and x_embedder,
    a view's proj_out): quantize_frozen_layers replaces the children of the modules it walks, so a module given to
    it alone stays fp32; the exporters quantize the whole view (export/step_module.py, generation_stage.py)."""
    if quant is None or quant.bits is None:
        return
    from ..quantize import QuantConv2d, QuantLinear
    kinds = {nn.Linear: QuantLinear, nn.Conv2d: QuantConv2d}
    for name, child in list(parent.named_children()):
        cls = kinds.get(type(child))
        if cls is not None and not child.weight.requires_grad and not child.weight.is_meta:
            setattr(parent, name, cls(child, quant))


def _inputs(cfg: StepConfig, device: str, seed: int):
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *shape: torch.randn(shape, generator=g).to(device=device)  # noqa: E731
    spec, L, D = cfg.spec, cfg.text_tokens, cfg.hidden_dim
    c = spec.transformer_config
    x0, noise = rnd(*cfg.latent_shape()), rnd(*cfg.latent_shape())
    t = torch.full((1,), 0.5, device=device)
    if spec.arch == FLUX_ARCH:
        cond = {"txt": rnd(1, L, int(c["joint_attention_dim"])), "pooled": rnd(1, int(c["pooled_projection_dim"]))}
        if c.get("guidance_embeds"):
            cond["guidance"] = torch.full((1,), 3.5, device=device)
        streams = ("img", "txt")
    else:
        cond = {"txt": rnd(1, L, int(c["caption_channels"])), "txt_mask": torch.ones(1, L, device=device)}
        streams = ("img",)
    shapes = {"front.img": (1, cfg.image_tokens, D), "front.txt": (1, L, D), "back.img": (1, cfg.image_tokens, D)}
    entry = {n: rnd(*shapes[n]) * 0.1 for n in residual_names(streams, cfg.plan)} if cfg.kind == "skip" else {}
    dt = cfg.dtype
    return (x0.to(dt), noise.to(dt), t.to(dt), {k: v.to(dt) for k, v in cond.items()},
            {k: v.to(dt) for k, v in entry.items()})


def build_step_program(cfg: StepConfig, device: str = "cpu", seed: int = 0, fake_mode=None) -> StepProgram:
    """device "cpu": real random weights. With `fake_mode` (a FakeTensorMode) the weights and inputs are fake CPU
    tensors (shapes and dtypes, no data); the meta structure is built outside the mode."""
    cfg.validate()
    if fake_mode is not None:
        return _build(cfg, device, seed, fake_mode)
    return _build(cfg, device, seed, contextlib.nullcontext())


def _build(cfg: StepConfig, device: str, seed: int, mode) -> StepProgram:
    spec = cfg.spec
    transformer = build_transformer(spec, "meta")
    plan = cfg.plan
    names = block_names_of(transformer)
    kept_names = [names[i] for i in plan.kept]
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        add_lora(transformer, spec.arch, kept_names, LoraSpec(rank=cfg.rank, alpha=float(cfg.rank),
                                                                targets=list(cfg.lora_targets)))
    view = make_view(spec.arch, transformer, plan.kept)
    quant = QuantSpec(cfg.precision, recompute_in_backward=cfg.recompute_dequant) if cfg.precision in ("int8", "int4") else None
    if cfg.kind == "diffusers":
        modules = [m for _, m in transformer.named_children()]
        if cfg.gradient_checkpointing:
            transformer.enable_gradient_checkpointing()
        transformer.train()
        module: nn.Module = DiffusersStep(spec.arch, transformer, view)
    else:
        modules = [m for n, m in view.named_children() if n != "blocks"] + list(view.blocks)
        if cfg.remat_every:
            _remat_segments(view, cfg.remat_every)
        module = SkipModel(view, plan)
    owner = transformer if cfg.kind == "diffusers" else view
    with mode:
        for i, m in enumerate(modules):
            _materialize(m, device, cfg.dtype, quant, seed + 17 * (i + 1))
        if cfg.kind != "diffusers":
            quantize_direct_layers(view, quant)
            modules = [m for n, m in view.named_children() if n != "blocks"] + list(view.blocks)
        else:
            quantize_direct_layers(transformer, quant)
            modules = [m for _, m in transformer.named_children()]
        for name, p in list(owner.named_parameters(recurse=False)):      # e.g. SANA's scale_shift_table
            new = torch.randn(p.shape, generator=torch.Generator().manual_seed(seed)) / math.sqrt(p.shape[-1])
            setattr(owner, name, nn.Parameter(new.to(device=device, dtype=cfg.dtype), requires_grad=False))
        inputs = _inputs(cfg, device, seed + 1)
    lora = [p for n, p in transformer.named_parameters() if "lora_" in n]
    for p in lora:
        p.requires_grad_(True)
    direct = nn.ParameterList([p for _, p in owner.named_parameters(recurse=False)])
    return StepProgram(cfg, module, inputs, lora, frozen_modules=modules + [direct])
