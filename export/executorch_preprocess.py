"""What the device runs per sample before the training step, as its own ExecuTorch program (inference only):

    photo [1, 3, H, W] in [-1, 1], crop_box [3] (x0_px, y0_px, side_px)
        --PatchSampler (grid_sample crop + resize to s_min)--> patch [1, 3, s_min, s_min]
        --LatentEncoder (the model's autoencoder encoder, deterministic)--> x0 [1, C, h, w]

Noising (x_t = (1 - t) x0 + t noise) and the patch embedding are inside the training step program (they are the
first ops of TrainingStep), and the noise itself comes from the portable RNG, so x0 is all this program makes.
One program per distinct photo size (static shapes).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ditskip_edge.models.latents import LatentEncoder
from ditskip_edge.models.layout import contiguous_pixel_shuffles
from ditskip_edge.models.rotary import rotary_as_matmul
from ditskip_edge.patch_sampling import PatchSampler

from .program_cache import PTE_FILE, ProgramCache


class Preprocess(nn.Module):
    def __init__(self, sampler: PatchSampler, encoder: LatentEncoder):
        super().__init__()
        self.sampler, self.encoder = sampler, encoder

    def forward(self, photo: torch.Tensor, crop_box: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.sampler(photo, crop_box))


def export_module(module: nn.Module, example: tuple, backend: str = "portable", planned_inputs: bool = True,
                  mm_rewrite: bool = False, fold_constants: bool = False):
    """Inference export (no backward). Returns the ExecutorchProgramManager. planned_inputs=False leaves the graph
    inputs out of the memory plan: the runtime then uses the caller's memory (e.g. a memory-mapped weights file) in
    place instead of copying it into the program's arena. mm_rewrite: addmm -> mm + add (graph_passes; the portable
    addmm kernel is naive)."""
    return _lower_module(_trace(module, example), backend, planned_inputs, mm_rewrite, fold_constants)


def export_module_program(module: nn.Module, example: tuple, backend: str = "portable", planned_inputs: bool = True,
                          mm_rewrite: bool = False, fold_constants: bool = False,
                          matmuls: bool = False, conv_band_bytes: int | None = None) -> tuple[bytes, dict]:
    """export_module's program as (.pte bytes, memory: pte_bytes, planned_arena_bytes, non_const_buffer_sizes,
    constant_bytes), read from the program cache (program_cache.py) when it holds it. matmuls: lowered by
    lower_matmul_program (the generation transformer's programs) instead of _lower_module. conv_band_bytes (backend
    xnnpack): lowered by conv_matmul.lower_decode_program (generation's decode programs: every convolution an
    XNNPACK bmm with its weight an input, im2col bands of at most this many bytes)."""
    ep = _trace(module, example)
    options = {"backend": backend, "planned_inputs": planned_inputs, "mm_rewrite": mm_rewrite,
               "fold_constants": fold_constants, **({"matmuls": True} if matmuls else {}),
               **({"conv_band_bytes": int(conv_band_bytes)} if conv_band_bytes is not None else {})}
    if conv_band_bytes is not None and (backend != "xnnpack" or matmuls):
        raise ValueError("conv_band_bytes: the decode programs' XNNPACK lowering (backend xnnpack, not matmuls)")

    def build():
        if conv_band_bytes is not None:
            from .conv_matmul import lower_decode_program
            et = lower_decode_program(ep, conv_band_bytes, planned_inputs=planned_inputs)
        elif matmuls:
            et = lower_matmul_program(ep, backend, planned_inputs=planned_inputs)
        else:
            et = _lower_module(ep, backend, planned_inputs, mm_rewrite, fold_constants)
        return {PTE_FILE: et.buffer}, {"memory": program_memory(et)}
    files, meta = ProgramCache.from_env().program("inference", ep, options, build)
    return files[PTE_FILE], meta["memory"]


def program_memory(et) -> dict:
    """An ExecutorchProgramManager's sizes: the .pte, its planned arena (and the arena's buffers), its constants."""
    plan = et.executorch_program.execution_plan[0]
    fep = et.exported_program()
    const = sum(v.numel() * v.element_size() for v in list(fep.state_dict.values()) + list(fep.constants.values())
                if torch.is_tensor(v))
    return {"pte_bytes": len(et.buffer), "planned_arena_bytes": int(sum(plan.non_const_buffer_sizes)),
            "non_const_buffer_sizes": [int(x) for x in plan.non_const_buffer_sizes], "constant_bytes": const}


def _trace(module: nn.Module, example: tuple):
    with torch.no_grad(), contiguous_pixel_shuffles(), rotary_as_matmul():
        return torch.export.export(module.eval(), example, strict=False)


def lower_matmul_program(ep, backend: str, external_weights: bool = False, planned_inputs: bool = True):
    """The traced inference program `ep` lowered as the training program is (executorch_program.lower): each linear
    / 1x1 convolution a matmul with its weight on the left (XNNPACK: a bmm: its matmuls and transposes only, rounding
    only), a quantized weight's integer codes transposed before their cast to fp32 (graph_passes.transpose_before_cast:
    one fp32 copy per matmul, not two), dequantized just before its matmul (node order restored after lowering), the
    best-fit memory plan; on XNNPACK the codes' cast and int8 transposes run there too (graph_passes.
    casts_as_dequantize: the training program's step profile, benchmarks/results/step_profile.md, found them 46% of a
    step on the portable kernels); planned_inputs=False leaves the inputs out of the arena (the caller's buffers: generation's
    weights, mapped from their file). The subject stage's embed and block programs and generation's transformer
    programs. Returns the ExecutorchProgramManager."""
    from . import graph_passes
    from .executorch_program import ExportConfig, backend_config, lower
    graph_passes.remove_unused_constants(ep)    # e.g. a block program's module holds the whole model's buffers
    ep = ep.run_decompositions()
    graph_passes.addmm_to_mm_add(ep)
    graph_passes.pointwise_conv_to_mm(ep)
    # constant_views_folded off: these programs are lowered as before graph_passes.constant_views_as_constants
    # (measured on the training step only; generation's and the subject stage's tests not rerun with it)
    cfg = ExportConfig(backend=backend, xnnpack_ops="bmm", external_weights=external_weights,
                       constant_views_folded=False)
    if backend == "xnnpack":
        graph_passes.mm_to_bmm(ep)
    graph_passes.transpose_before_cast(ep)
    if backend == "xnnpack" and cfg.xnnpack_casts:
        graph_passes.casts_as_dequantize(ep)    # the int8 codes' casts and transposes run by XNNPACK (exact)
    for n in ep.graph_module.graph.nodes:
        # XNNPACK's ConvertToLinearPass rebuilds F.linear from the nodes whose source record (source_fn_stack, else
        # torch_fn, else the innermost nn_module_stack entry) names a linear: the rewritten matmuls keep that record
        # and are no longer a linear's transpose + addmm
        for key in ("source_fn_stack", "torch_fn", "nn_module_stack"):
            n.meta.pop(key, None)
    return lower(ep, cfg).to_executorch(backend_config(cfg, planned_inputs))


def _lower_module(ep, backend: str, planned_inputs: bool, mm_rewrite: bool, fold_constants: bool):
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge
    from executorch.exir.passes import MemoryPlanningPass
    from .graph_passes import addmm_to_mm_add, remove_unused_constants
    # decomposed here only where something before to_edge must see the linears' addmm / transposed weights: a
    # delegate (partitioning) or constant folding (a transposed frozen weight becomes a constant); otherwise the
    # rewrite runs on the edge program, and the graph is decomposed once (to_edge) instead of twice
    decompose_first = mm_rewrite and (backend != "portable" or fold_constants)
    if decompose_first:
        ep = ep.run_decompositions()
        addmm_to_mm_add(ep)
    if fold_constants:
        from executorch.exir.passes.constant_prop_pass import constant_prop_pass
        ep = constant_prop_pass(ep)
    remove_unused_constants(ep)        # buffers nothing reads (a block program's module holds the whole model's)
    cc = EdgeCompileConfig(_check_ir_validity=False)
    if backend == "xnnpack":
        from .lowering import to_edge_lowered
        from .xnnpack_partition import rounding_only_partitioner   # fp32 XNNPACK kernels that only reorder sums
        edge, _ = to_edge_lowered(ep, [rounding_only_partitioner()], compile_config=cc)
    else:
        edge = to_edge(ep, compile_config=cc)
        if mm_rewrite and not decompose_first:
            addmm_to_mm_add(edge.exported_program(), "edge")
    if planned_inputs:
        return edge.to_executorch()
    return edge.to_executorch(ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False)))


def export_preprocess(sampler: PatchSampler, encoder: LatentEncoder, photo_shape_hw: tuple[int, int],
                      backend: str = "portable") -> tuple[bytes, dict]:
    """(.pte bytes, memory dict) of the preprocess program for photos of photo_shape_hw."""
    h, w = photo_shape_hw
    example = (torch.zeros(1, 3, h, w), torch.tensor([0.0, 0.0, float(min(h, w))]))
    return export_module_program(Preprocess(sampler, encoder), example, backend)
