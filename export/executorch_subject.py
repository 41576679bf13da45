"""Compiler stage: the subject stage's forward-only ExecuTorch programs (issue 15), so a phone computes the residual
cache itself from the user's photos (runtime/subject.py) or each step's residuals (cache-free mode).

    add_subject_programs(writer, SubjectPrograms(precision="fp32"), transformer, vae)

writes under `programs/executorch/subject/`:
  encode.pte                   patch [1, 3, s_min, s_min] -> x0 (the autoencoder's encoder; flux-testbed's
                               space-to-depth); the crop itself is cut on the device (runtime/patches.py)
  encode_HxW.pte (+ encoder.ptd)  with encode_tile_px: one program per pixel tile shape of the crop (diffusers'
                               tiled_encode; the device blends the latent tiles, runtime/tiling.py), named encode.HxW;
                               with external_weights they share one data file (XNNPACK's weights included)
  encode[_HxW]_sK.pte (+ encoder.sK.ptd)  with encode_stages: each of those programs split into the encoder's stages
                               (models/latents.py encoder_stages), named <name>.sK, one data file per stage
  embed.pte                    x0, noise, t, cond.* -> stream.* entering block 0, ctx.* (FLUX temb + rotary cos/sin,
                               SANA timestep + projected caption (+ its mask bias))
  block_NN.pte (+ .ptd)        stream.*, ctx.* -> stream.*: the frozen base model's block NN, one program per block the
                               residuals need (the front span; with a back span every block: the back residual's
                               input is the kept span's output of the base model). With external_weights, blocks of
                               one structure share one export (program_reuse.py): identical .pte files, each block's
                               own .ptd
and adds one `runtime/contract.py` ProgramEntry each (names encode / embed / block, `block` = the index).

The programs are inference exports (torch.no_grad, math attention), frozen weights at `precision` (fp32, or int8 /
int4 through quantize.py), constants inside the .pte or, with `external_weights`, in a .ptd data file beside it (the
entry's `data`) that the runtime memory-maps: one flag, passed through to ExecuTorch's
`ExecutorchBackendConfig(external_constants=True)`.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from ditskip_edge.models.latents import LatentEncoder, encode_tiling, encoder_stages
from ditskip_edge.models.layout import contiguous_pixel_shuffles
from ditskip_edge.models.rotary import rotary_as_matmul
from ditskip_edge.models.specs import ModelSpec
from ditskip_edge.models.views import DiTView, make_view
from ditskip_edge.plan import SkipPlan
from ditskip_edge.quantize import QuantSpec, quantize_frozen_layers
from ditskip_edge.runtime.bundle import PROGRAMS_DIR, BundleWriter
from ditskip_edge.runtime.contract import (BLOCK, COND_PREFIX, CTX_PREFIX, EMBED, ENCODE, PROGRAM_PRECISIONS,
                                           STREAM_PREFIX, ProgramEntry, encode_name, encode_stage_names)
from ditskip_edge.runtime.errors import UserError
from ditskip_edge.runtime.tiling import tile_key, tile_shapes
from ditskip_edge.skip_model import noisy_latents_and_target

from .executorch_preprocess import lower_matmul_program, program_memory
from .program_cache import PTE_FILE, ProgramCache
from .program_reuse import ProgramReuse, structure_of

log = logging.getLogger(__name__)
PROGRAM_DIR = f"{PROGRAMS_DIR}/executorch/subject"
DELEGATE_WEIGHTS_TAG = "encoder"
BACKENDS = ("portable", "xnnpack")


@dataclass(frozen=True)
class SubjectPrograms:
    precision: str = "fp32"                 # frozen weights of the embed and block programs: fp32 | int8 | int4
    backend: str = "xnnpack"                # embed and block programs: "xnnpack" | "portable"
    encode_backend: str = "xnnpack"         # the encoder (convolutions: XNNPACK is ~80x the portable kernels here)
    encode_stages: bool = False             # the encoder as one program per stage (models/latents.py encoder_stages):
                                            # one stage's weights resident at a time (XNNPACK packs a program's
                                            # weights into anonymous memory when it loads it)
    external_weights: bool = False          # frozen constants in a .ptd file beside each .pte (mapped); XNNPACK keeps
                                            # the weights it takes in its delegate blob inside the .pte
    group_size: int = 32                    # int4: input features per scale

    def validate(self) -> None:
        if self.precision not in PROGRAM_PRECISIONS:
            raise UserError(f"subject programs' precision {self.precision!r}: expected one of "
                            f"{', '.join(PROGRAM_PRECISIONS)}")
        for b in (self.backend, self.encode_backend):
            if b not in BACKENDS:
                raise UserError(f"executorch backend {b!r}: expected one of {', '.join(BACKENDS)}")


def blocks_needed(plan: SkipPlan) -> list[int]:
    """Blocks whose base-model forward the residuals need: the front span; with a back span, every block."""
    return list(range(plan.num_blocks)) if plan.n_back else list(range(plan.n_front))


class EncodeModule(nn.Module):
    def __init__(self, encoder: LatentEncoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, patch: torch.Tensor) -> torch.Tensor:
        return self.encoder(patch)


class EmbedModule(nn.Module):
    """x0, noise, t, *cond (keys sorted) -> (*streams sorted, *ctx sorted)."""

    def __init__(self, view: DiTView, cond_keys: list[str]):
        super().__init__()
        self.view = view
        self.cond_keys = sorted(cond_keys)

    def run(self, x0, noise, t, cond):
        x_t, _ = noisy_latents_and_target(x0, noise, t)
        return self.view.embed(self.view.pack(x_t), t, cond)

    def forward(self, x0, noise, t, *cond):
        streams, ctx = self.run(x0, noise, t, dict(zip(self.cond_keys, cond)))
        c = self.view.ctx_tensors(ctx)
        return tuple(streams[k] for k in sorted(streams)) + tuple(c[k] for k in sorted(c))


class BlockModule(nn.Module):
    """(*streams sorted, *ctx sorted) -> (*streams sorted) through one block of the frozen base model."""

    def __init__(self, view: DiTView, block: nn.Module, stream_names: list[str], ctx_names: list[str], like_ctx):
        super().__init__()
        self.block = block                          # the only submodule: the program holds this block's weights alone
        self._run_block, self._ctx_from = view.run_block, view.ctx_from_tensors     # parameter-free view methods
        self.stream_names, self.ctx_names = sorted(stream_names), sorted(ctx_names)
        self.like_ctx = like_ctx

    def forward(self, *tensors):
        ns = len(self.stream_names)
        streams = dict(zip(self.stream_names, tensors[:ns]))
        ctx = self._ctx_from(dict(zip(self.ctx_names, tensors[ns:])), self.like_ctx)
        out = self._run_block(self.block, streams, ctx)
        return tuple(out[k] for k in self.stream_names)


def frozen_copy(module: nn.Module, view: DiTView) -> nn.Module:
    """A copy of `module` to quantize, sharing `view`: a BlockModule holds bound methods of the view (the whole
    model), which a plain deepcopy follows - a copy of every block per quantized program (issue 57). The module's
    own submodules (the block, or an embed module's embedders-only view) are copied."""
    return copy.deepcopy(module, {id(view): view})


def _specs(names: list[str], tensors) -> list[dict]:
    return [{"name": n, "shape": list(v.shape), "dtype": str(v.dtype).removeprefix("torch.")}
            for n, v in zip(names, tensors)]


def contiguous_inputs(example: tuple) -> tuple:
    """The example inputs row-major (contiguous dim order), as every runtime passes a program its inputs."""
    return tuple(t.contiguous() if torch.is_tensor(t) else t for t in example)


def export_forward(module: nn.Module, example: tuple, backend: str, external_weights: bool, matmuls: bool = False,
                   delegate_weights: bool = False):
    """Inference export (no backward) with math attention. Returns (.pte bytes, data file bytes or None, memory).

    delegate_weights (with external_weights and XNNPACK, the encoder's tile programs): the weights XNNPACK takes go
    to the data file too (ExecuTorch's delegate constant tag; keyed by their bytes' SHA-256), the few others stay in
    the .pte, so programs of one module at different input shapes share one data file byte for byte.

    matmuls (the embed and block programs): lowered as the training program is (executorch_program.lower): each
    linear / 1x1 convolution a matmul with its weight on the left, XNNPACK's bmm for the matmuls and transposes only
    (rounding only), every quantized weight dequantized just before its matmul (node order restored after
    lowering), the best-fit memory plan. Without it XNNPACK's linear cannot take a dequantized (runtime) weight: the
    matmuls ran as `addmm` on the CPU kernels and all of a block's dequantized weights were alive at once (the
    ~300M FLUX layout's double block: a 203 MB arena for 38 MB of int8 weights, 189 s per sample)."""
    from .graph_passes import remove_unused_constants, tag_delegate_constants
    # ExecuTorch gives each program input the dim order of its example's strides, and the runtimes hand programs
    # row-major buffers: a channels_last example (DC-AE's 1024-channel stages' eager outputs are) made a program
    # that read its contiguous input as channels_last - XNNPACK ~1.2 relative off, portable refusing its first
    # permute ("different dim orders"). Examples are made contiguous here, for every caller.
    example = contiguous_inputs(example)
    with sdpa_kernel([SDPBackend.MATH]), torch.no_grad(), contiguous_pixel_shuffles(), rotary_as_matmul():
        ep = torch.export.export(module.eval(), example, strict=False)
    tag_delegate = delegate_weights and external_weights and backend == "xnnpack" and not matmuls
    if tag_delegate:
        tag_delegate_constants(ep, DELEGATE_WEIGHTS_TAG)
    remove_unused_constants(ep)                     # e.g. the head's weights in the embed program's view
    options = {"backend": backend, "external_weights": external_weights, "matmuls": matmuls,
               "tag_delegate": tag_delegate}
    files, meta = ProgramCache.from_env().program("forward", ep, options,
                                                  lambda: _lower_forward(ep, backend, external_weights, matmuls,
                                                                         tag_delegate))
    return files[PTE_FILE], files.get(DATA_FILE), meta["memory"]


DATA_FILE = "weights.ptd"                  # the data file in a forward program's cache entry


def _lower_forward(ep, backend: str, external_weights: bool, matmuls: bool, tag_delegate: bool):
    """export_forward's lowering of the traced `ep`: ({PTE_FILE: .pte, DATA_FILE: .ptd if any}, {"memory": ...})."""
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge
    cc = EdgeCompileConfig(_check_ir_validity=False)
    if matmuls:
        et = lower_matmul_program(ep, backend, external_weights=external_weights)
    else:
        if backend == "xnnpack":
            from .lowering import to_edge_lowered
            from .xnnpack_partition import rounding_only_partitioner   # fp32 XNNPACK kernels that only reorder sums
            edge, _ = to_edge_lowered(ep, [rounding_only_partitioner()], compile_config=cc)
        else:
            edge = to_edge(ep, compile_config=cc)
        et = edge.to_executorch(ExecutorchBackendConfig(external_constants=external_weights and not tag_delegate))
    pte, data, memory = _forward_program(et, external_weights)
    return {PTE_FILE: pte, **({DATA_FILE: data} if data is not None else {})}, {"memory": memory}


def _forward_program(et, external_weights: bool):
    data = [bytes(cord) for cord in (getattr(et, "_tensor_data", None) or {}).values()] if external_weights else []
    if len(data) > 1:
        raise RuntimeError(f"expected one external data file, ExecuTorch wrote {len(data)}")
    sizes = program_memory(et)
    memory = {"pte_bytes": sizes["pte_bytes"], "data_bytes": sum(len(d) for d in data),
              "planned_arena_bytes": sizes["planned_arena_bytes"], "constant_bytes": sizes["constant_bytes"]}
    return et.buffer, (data[0] if data else None), memory


STAGE_CHECK_REL = 1e-3


def check_program_reproduces(writer: BundleWriter, entry: dict, module: nn.Module, like: torch.Tensor,
                             what: str) -> float:
    """Run the just-written program with ExecuTorch's runtime on a random input shaped like `like` and compare with
    the module's eager output; one line (UserError) when they differ by more than STAGE_CHECK_REL relative. A stage
    program is exported from another program's output, which a whole-encoder export never is: the real-config
    DC-AE's stages 4 and 5, exported from channels_last examples before export_forward made examples contiguous,
    came out ~1.2 relative off on XNNPACK and refused by the portable kernels; a program that does not reproduce its
    stage is refused rather than shipped wrong."""
    from ditskip_edge.runtime import bindings
    load = bindings.executorch_inference()._load_for_executorch
    args = [str(writer.path(entry["path"]))] + [str(writer.path(d)) for d in entry.get("data", [])]
    x = torch.randn(like.shape, generator=torch.Generator().manual_seed(0)) * like.std().clamp(min=1e-3) + like.mean()
    with torch.no_grad():
        want = module(x)
    try:
        got = load(*args).forward((x.contiguous(),))[0]
    except RuntimeError as e:
        raise UserError(f"{what}: ExecuTorch cannot run its {entry['backend']} program {entry['path']} "
                        f"({str(e).splitlines()[0]}); compile without --encode-stages") from e
    rel = float((got - want).norm() / want.norm().clamp(min=1e-12))
    if not rel <= STAGE_CHECK_REL:
        raise UserError(f"{what}: its {entry['backend']} program {entry['path']} does not reproduce the encoder "
                        f"({rel:.2g} relative, allowed {STAGE_CHECK_REL:g}; an ExecuTorch lowering problem, not your "
                        f"input); compile without --encode-stages")
    return rel


def forward_examples(view: DiTView, encoder: LatentEncoder, s_min_px: int, cond: dict[str, torch.Tensor]):
    """Example tensors of the right shapes: patch, x0, noise, t; the embedded streams and the context."""
    patch = torch.zeros(1, 3, s_min_px, s_min_px)
    with torch.no_grad():
        x0 = encoder(patch)
        noise = torch.zeros_like(x0)
        t = torch.tensor([0.5])
        streams, ctx = EmbedModule(view, list(cond)).run(x0, noise, t, cond)
    return patch, x0, noise, t, streams, ctx


def entry_shapes(view: DiTView, plan: SkipPlan, x0: torch.Tensor, streams: dict) -> dict[str, list[int]]:
    """A cache entry's decoded shapes for this model and plan: x0 and every residual."""
    out = {"x0": list(x0.shape)}
    if plan.n_front:
        out.update({f"front.{k}": list(v.shape) for k, v in streams.items()})
    if plan.n_back:
        out["back.img"] = list(streams["img"].shape)
    return out


def add_subject_programs(writer: BundleWriter, config: SubjectPrograms, transformer: nn.Module, vae: nn.Module,
                         cond: dict[str, torch.Tensor], encode_tile_px: int | None = None) -> list[str]:
    """Export the forward programs of the model in `writer.manifest` into the bundle; returns their paths. `cond` is
    any prompt's text conditioning (its shapes); encode_tile_px: the encoder on pixel tiles of this side (diffusers'
    tiled_encode; the manifest's encode_tiling), None: the whole s_min crop at once."""
    config.validate()
    m = writer.manifest
    arch = m["model"]["arch"]
    plan = SkipPlan.from_json(m["plan"])
    s_min = int(m["schedule"]["s_min_px"])
    view = make_view(arch, transformer)
    encoder = LatentEncoder(arch, vae).eval()
    patch, x0, noise, t, streams, ctx = forward_examples(view, encoder, s_min, cond)
    stream_names = sorted(streams)
    ctx_t = view.ctx_tensors(ctx)
    ctx_names = sorted(ctx_t)
    quant = QuantSpec(config.precision, group_size=config.group_size)
    entries: list[dict] = []

    reuse = ProgramReuse()            # the block programs: one export per structure (with external_weights)

    def write(name: str, rel_stem: str, module, example, in_names, out_names, outputs, block=None, quantize=False,
              backend=config.backend, shared_data: str | None = None):
        if quantize and quant.bits is not None:
            module = frozen_copy(module, view)
            for p in module.parameters():
                p.requires_grad_(False)
            quantize_frozen_layers(module, quant)
        structure = structure_of(module) if block is not None else None
        reused = reuse.program_for(structure, module) if block is not None else None
        if reused is not None:
            log.info("%s.pte: the program of an earlier block of the same structure, this block's own data file",
                     rel_stem)
            pte, data, memory = reused
        else:
            log.info("exporting %s.pte", rel_stem)
            pte, data, memory = export_forward(module, example, backend, config.external_weights, matmuls=quantize,
                                               delegate_weights=shared_data is not None)
            if block is not None:
                reuse.exported(structure, module, pte, data, memory)
        rel = f"{rel_stem}.pte"
        writer.path(rel).write_bytes(pte)
        data_files = []
        if data is not None and shared_data is not None and writer.path(shared_data).exists():
            if writer.path(shared_data).read_bytes() != data:      # one module, one set of weights: never expected
                raise RuntimeError(f"{rel}: its weights differ from {shared_data}'s (the encoder's other tiles)")
            data_files.append(shared_data)
        elif data is not None:
            data_rel = shared_data or f"{rel_stem}.ptd"
            writer.path(data_rel).write_bytes(data)
            data_files.append(data_rel)
        entries.append(ProgramEntry(name=name, runtime="executorch", path=rel, inputs=_specs(in_names, example),
                                    outputs=_specs(out_names, outputs), precision=config.precision if quantize
                                    else "fp32", backend=backend, data=data_files, memory=memory,
                                    block=block).to_json())

    tiling = encode_tiling(ModelSpec.from_json(m["model"]), s_min, encode_tile_px)
    shapes = tile_shapes((s_min, s_min), tiling["tile_px"], tiling["stride_px"]) if tiling["tiled"] \
        else [(s_min, s_min)]
    stages = encoder_stages(arch, vae) if config.encode_stages else [EncodeModule(encoder)]
    encode_programs = {}
    for th, tw in shapes:
        # tiled: one program (chain) per pixel tile shape, their weights in one data file (per stage) shared by the
        # shapes; staged: stage k of every shape is "<name>.s<k>" (contract.encode_stage_names)
        name = encode_name(th, tw) if tiling["tiled"] else ENCODE
        stem = f"{PROGRAM_DIR}/{ENCODE}_{tile_key(th, tw)}" if tiling["tiled"] else f"{PROGRAM_DIR}/{ENCODE}"
        x = torch.zeros(1, 3, th, tw)
        for k, (stage_name, stage) in enumerate(zip(encode_stage_names(name, len(stages)), stages)):
            with torch.no_grad():
                y = stage(x)
            last = k == len(stages) - 1
            shared = (f"{PROGRAM_DIR}/encoder.s{k}.ptd" if len(stages) > 1
                      else f"{PROGRAM_DIR}/encoder.ptd" if tiling["tiled"] else None)
            write(stage_name, stem + (f"_s{k}" if len(stages) > 1 else ""), stage, (x,),
                  ["patch" if k == 0 else "features"], ["x0" if last else "features"], [y],
                  backend=config.encode_backend, shared_data=shared)
            if len(stages) > 1:
                check_program_reproduces(writer, entries[-1], stage, x, f"--encode-stages: encoder stage {k}")
            x = y
        encode_programs[tile_key(th, tw)] = name
    writer.manifest["encode_tiling"] = {
        **tiling, "programs": encode_programs, "stages": len(stages),
        "rule": "runtime/tiling.py encode_tiled: pixel tiles of the s_min crop start every stride_px; each encoded "
                "tile is blended into its upper, then its left (already blended) neighbour over (tile_px - "
                "stride_px) / scale latent cells, and its first stride_px / scale rows and columns go to x0 "
                "(diffusers' tiled_encode); untiled: the one encode program on the whole crop. stages > 1: a "
                "tile shape's program <name> is the chain <name>.s0 .. <name>.s<stages-1> (the encoder's stages, "
                "models/latents.py encoder_stages), each stage run on every tile of the shape before the next loads"}
    cond_keys = sorted(cond)
    embed = EmbedModule(make_view(arch, transformer, []), cond_keys)          # embedders only, no block
    write(EMBED, f"{PROGRAM_DIR}/{EMBED}", embed, (x0, noise, t, *[cond[k] for k in cond_keys]),
          ["x0", "noise", "t"] + [COND_PREFIX + k for k in cond_keys],
          [STREAM_PREFIX + k for k in stream_names] + [CTX_PREFIX + k for k in ctx_names],
          [streams[k] for k in stream_names] + [ctx_t[k] for k in ctx_names], quantize=True)
    block_in = [streams[k] for k in stream_names] + [ctx_t[k] for k in ctx_names]
    in_names = [STREAM_PREFIX + k for k in stream_names] + [CTX_PREFIX + k for k in ctx_names]
    for i in blocks_needed(plan):
        module = BlockModule(view, view.blocks[i], stream_names, ctx_names, ctx)
        write(BLOCK, f"{PROGRAM_DIR}/{BLOCK}_{i:02d}", module, tuple(block_in), in_names,
              [STREAM_PREFIX + k for k in stream_names], [streams[k] for k in stream_names], block=i, quantize=True)
    writer.manifest["programs"] = [p for p in m.get("programs", []) if p["name"] not in (EMBED, BLOCK)
                                   and not p["name"].startswith(ENCODE)] + entries
    return [e["path"] for e in entries]
