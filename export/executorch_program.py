"""The kept blocks' training step as a joint forward-backward ExecuTorch program.

    bundle --build_step--> FlatTrainingStep (kept blocks + LoRA, frozen linears int8/int4, decoder, loss)
           --export_training_program--> torch.export (block marks when remat is on) -> _export_forward_backward
           -> graph passes (graph_passes.pointwise_conv_to_mm, remat.rematerialize_blocks, graph_passes.*)
           -> to_edge (portable) | lowering.to_edge_lowered (XNNPACK; the partition lowering without a
           whole-graph copy per partition) -> schedule.restore_order -> to_executorch (memory_plan planner,
           constants in an external .ptd file with external_weights) -> .pte bytes (+ .ptd bytes) + memory report
           + op placement + pass counts

Memory levers (benchmarks/results/device_footprint_causes.md measures each): `restore_order` undoes the reordering
XNNPACK lowering does (all dequantized weights were hoisted to the start), `memory_planner="best"` places tensors by
offset instead of ExecuTorch's greedy slots, `UnsqueezeAsView` stops copying operands around each bmm,
`xnnpack_ops="matmul"` gives XNNPACK one small delegate per matmul / transpose / activation, never merged
(xnnpack_partition.py: nothing held across a delegate call, no activations in XNNPACK's workspace),
`remat` recomputes each kept block's forward in backward (but the last one run), `external_weights` puts frozen weights in a .ptd file the
runtime memory-maps.

Attention is exported under `sdpa_kernel([SDPBackend.MATH])`: the fused CPU SDPA backward has no ExecuTorch kernel,
the math path is plain matmul + softmax.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from ditskip_edge.models.rotary import rotary_as_matmul
from ditskip_edge.quantize import QuantSpec

from . import graph_passes
from .memory_plan import PLANNERS
from .program_cache import PTE_FILE, ProgramCache
from .remat import RematSpec
from .step_module import StepModule, build_step, input_specs  # noqa: F401  (build_step: the exporters' entry)

log = logging.getLogger(__name__)
BACKENDS = ("portable", "xnnpack")
XNNPACK_OPS = ("matmul", "bmm", "all")
INTEGER_MATMULS = ("off", "qd8", "qd8_linears")
EXTERNAL_DATA = "_default_external_constant.ptd"     # the .ptd file name ExecuTorch gives external constants


@dataclass(frozen=True)
class ExportConfig:
    quant: QuantSpec = field(default_factory=lambda: QuantSpec("fp32"))
    backend: str = "portable"                   # "portable" | "xnnpack"
    recompute_frozen: bool = True               # graph_passes.recompute_frozen_in_backward
    mm_rewrite: bool = True                     # graph_passes.addmm_to_mm_add
    mm_as_bmm: bool = True                      # XNNPACK only: graph_passes.mm_to_bmm
    pointwise_conv_as_mm: bool = True           # graph_passes.pointwise_conv_to_mm (SANA's 1x1 convolutions)
    input_grad_conv: bool = True                # graph_passes.conv_input_grad_as_convolution (SANA's depthwise 3x3)
                                                # and silu_backward_in_order (its SiLU)
    views_per_use: bool = True                  # graph_passes.views_per_use (LoRA weights' transposes)
    transpose_before_cast: bool = True          # graph_passes.transpose_before_cast (int8 codes transposed as int8)
    pow_as_mul: bool = True                     # graph_passes.pow_as_mul (x * x for pow(x, 2): rounding only)
    plain_softmax: bool = True                  # graph_passes.safe_softmax_as_softmax (no all -inf row mask)
    xnnpack_elementwise: int = 0                # XNNPACK, "matmul": > 0: also cat / mul / add with at least this many
                                                # output elements, one delegate each (exact; runtime state per
                                                # delegate); 0: on the portable kernels
    transposed_codes: bool = False              # graph_passes.transposed_codes_as_constants: the int8 codes the
                                                # backward reads transposed are stored transposed too (no
                                                # transposes in the step; the weights file holds them twice)
    xnnpack_casts: bool = True                  # XNNPACK: graph_passes.casts_as_dequantize (the int8 codes' cast to
                                                # fp32 and their transposes run by XNNPACK; exact)
    constant_views_folded: bool = True          # graph_passes.constant_views_as_constants: a frozen constant read
                                                # only through views of one shape is stored in that shape (no
                                                # view, no clone of it per use with external weights; exact)
    remat: str = "none"                         # "none" | "blocks" | "every:K" (remat.py)
    rotary_matmul: bool = True                  # models/rotary.py: FLUX's rotary pair rotation as a matmul (exact)
    remat_last_group: bool = False              # remat: also recompute the last group run forward (whose gradients
                                                # come first; kept by default: same memory, less work)
    external_weights: bool = False              # frozen constants in a .ptd file beside the .pte
    memory_planner: str = "best"                # "greedy" (ExecuTorch's) | "best_fit" | "best" (memory_plan.py)
    restore_order: bool = True                  # schedule.restore_order after lowering
    unsqueeze_as_view: bool = True              # edge_passes.UnsqueezeAsView
    trace_need: bool = True                     # memory report: the traced need of the same step (one eager step)
    xnnpack_ops: str = "matmul"                 # XNNPACK: "matmul": one delegate per bmm (+ its operand
                                                # transposes) and per transpose / gelu / tanh / softmax
                                                # (xnnpack_partition.py) | "bmm": the matmuls and transposes only
                                                # (rounding only: the inference programs) | "all": XNNPACK's
                                                # partitioner, large
                                                # fused partitions
    integer_matmuls: str = "off"                # XNNPACK, "matmul": "qd8": the forward matmuls with frozen int8
                                                # weights run as XNNPACK's dynamically quantized linear (int8
                                                # activations rounded per row at run time; not exact; weights packed
                                                # into XNNPACK's memory at load; graph_passes.
                                                # dynamically_quantized_linears) | "qd8_linears": the same for the
                                                # linears only (1x1 convolutions stay fp32) | "off": fp32 matmuls of
                                                # the cast codes

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.memory_planner not in PLANNERS:
            raise ValueError(f"memory_planner must be one of {PLANNERS}, got {self.memory_planner!r}")
        if self.xnnpack_ops not in XNNPACK_OPS:
            raise ValueError(f"xnnpack_ops must be one of {XNNPACK_OPS}, got {self.xnnpack_ops!r}")
        RematSpec.parse(self.remat)             # raises on a malformed value
        if self.integer_matmuls not in INTEGER_MATMULS:
            raise ValueError(f"integer_matmuls must be one of {INTEGER_MATMULS}, got {self.integer_matmuls!r}")
        if self.integer_matmuls != "off" and (self.backend != "xnnpack" or self.xnnpack_ops != "matmul"):
            raise ValueError("integer_matmuls='qd8' needs backend='xnnpack' and xnnpack_ops='matmul'")


@dataclass
class TrainingProgram:
    buffer: bytes                               # the .pte
    backend: str
    precision: str
    inputs: list[dict]
    lora_keys: dict[str, str]
    memory: dict                                # executorch_memory.memory_report
    ops: dict
    passes: dict                                # pass name -> what it changed
    data: dict[str, bytes] = field(default_factory=dict)    # external data files (name -> bytes), e.g. the .ptd

    remat: str = "none"                         # ditskip_edge/remat.py setting the program was exported with

    def data_file_names(self, pte_name: str) -> dict[str, str]:
        """ExecuTorch's data file name -> the file name written beside `pte_name`: `<stem>.ptd` for the one data
        file (two programs in one folder then keep theirs apart; the .pte finds its constants by key, not by file
        name), `<stem>.<name>` when there are several."""
        from pathlib import PurePath
        stem = PurePath(pte_name).stem
        if len(self.data) == 1:
            return {next(iter(self.data)): f"{stem}.ptd"}
        return {name: f"{stem}.{name}" for name in self.data}

    def write(self, pte_path) -> list:
        """Write the .pte and its data files (same folder, names from data_file_names). Returns the paths
        written, the .pte first."""
        from pathlib import Path
        pte_path = Path(pte_path)
        pte_path.write_bytes(self.buffer)
        paths = [pte_path]
        for name, file_name in self.data_file_names(pte_path.name).items():
            p = pte_path.parent / file_name
            p.write_bytes(self.data[name])
            paths.append(p)
        return paths


def _op_name(target) -> str:
    name = getattr(target, "__name__", None) or str(target)
    return name.removeprefix("aten.").removesuffix(".default")


def _op_placement(edge_program) -> dict:
    gm = edge_program.graph_module
    delegated, portable = 0, Counter()
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        name = _op_name(n.target)
        if "executorch_call_delegate" in name:
            delegated += 1
        elif "getitem" not in name:
            portable[name] += 1
    delegated_ops = Counter()
    for _, sub in gm.named_children():   # lowered modules keep their original graphs
        orig = getattr(sub, "original_module", None)
        if orig is not None:
            for n in orig.graph.nodes:
                if n.op == "call_function":
                    delegated_ops[_op_name(n.target)] += 1
    return {"xnnpack_delegates": delegated, "xnnpack_ops": dict(sorted(delegated_ops.items())),
            "portable_ops": dict(sorted(portable.items()))}


def trace_step(step: StepModule, cfg: ExportConfig):
    """torch.export of the step's forward (with the block marks when remat is on): the graph the program cache keys
    on (program_cache.py), before any pass."""
    import contextlib

    from . import remat
    spec = RematSpec.parse(cfg.remat)
    marks = remat.block_marks(step.module) if spec.enabled else contextlib.nullcontext()
    rotary = rotary_as_matmul() if cfg.rotary_matmul else contextlib.nullcontext()
    with sdpa_kernel([SDPBackend.MATH]), torch.no_grad(), marks, rotary:
        return torch.export.export(step.module, tuple(step.example), strict=False)


def export_joint(step: StepModule, cfg: ExportConfig):
    """torch.export + joint forward-backward + graph passes. Returns (ExportedProgram, pass counts)."""
    return joint_with_passes(trace_step(step, cfg), cfg)


def joint_with_passes(ep, cfg: ExportConfig):
    """The traced forward (trace_step) -> joint forward-backward + graph passes: (ExportedProgram, pass counts)."""
    from torch.export.experimental import _export_forward_backward

    from . import remat
    spec = RematSpec.parse(cfg.remat)
    with sdpa_kernel([SDPBackend.MATH]):
        ep = _export_forward_backward(ep)
    passes = {"empty_permuted": graph_passes.replace_empty_permuted(ep),
              "negative_pad": graph_passes.negative_pad_to_slice(ep)}
    if cfg.mm_rewrite:
        passes["addmm_to_mm_add"] = graph_passes.addmm_to_mm_add(ep)
    if cfg.pow_as_mul:
        passes["pow_as_mul"] = graph_passes.pow_as_mul(ep)
    if cfg.plain_softmax:
        passes["safe_softmax"] = graph_passes.safe_softmax_as_softmax(ep)
    if cfg.pointwise_conv_as_mm:
        passes["pointwise_conv_to_mm"] = graph_passes.pointwise_conv_to_mm(ep)
    if cfg.input_grad_conv:
        passes["input_grad_conv"] = graph_passes.conv_input_grad_as_convolution(ep)
        passes["silu_backward"] = graph_passes.silu_backward_in_order(ep)
    if spec.enabled:
        passes["remat"] = remat.rematerialize_blocks(ep, spec, last_group=cfg.remat_last_group)
        passes["remat"]["marks_removed"] = remat.remove_marks(ep)
    if cfg.recompute_frozen:
        passes["recompute_frozen"] = graph_passes.recompute_frozen_in_backward(ep)
    passes["identity_views"] = graph_passes.drop_identity_views(ep)
    passes["unused_constants"] = graph_passes.remove_unused_constants(ep)
    if cfg.integer_matmuls != "off":
        tag = EXTERNAL_DATA.removesuffix(".ptd") if cfg.external_weights else None
        shapes = ("x_wt", "bx_wt") if cfg.integer_matmuls == "qd8_linears" else ("x_wt", "w_x", "bx_wt")
        passes["qd8_linears"] = graph_passes.dynamically_quantized_linears(ep, tag, shapes)
        passes["qd8_linears"]["unused_constants"] = graph_passes.remove_unused_constants(ep)
    if cfg.backend == "xnnpack" and cfg.mm_as_bmm:
        passes["mm_to_bmm"] = graph_passes.mm_to_bmm(ep)
    if cfg.transpose_before_cast:
        passes["transpose_before_cast"] = graph_passes.transpose_before_cast(ep)
    if cfg.transposed_codes:
        passes["transposed_codes"] = graph_passes.transposed_codes_as_constants(ep)
    if cfg.views_per_use:
        passes["views_per_use"] = graph_passes.views_per_use(ep)
    if cfg.backend == "xnnpack" and cfg.xnnpack_casts and cfg.xnnpack_ops != "all":
        passes["casts_as_dequantize"] = graph_passes.casts_as_dequantize(ep)
    return ep, passes


def lower(ep, backend: str | ExportConfig, passes: dict | None = None):
    """Edge program, XNNPACK-partitioned for backend "xnnpack", with the edge passes and the node order restored
    (ExportConfig fields; a backend name alone means the defaults). Counts go into `passes`."""
    from executorch.exir import EdgeCompileConfig, to_edge

    from .edge_passes import UnsqueezeAsView
    from .lowering import to_edge_lowered
    from .schedule import restore_order
    cfg = backend if isinstance(backend, ExportConfig) else ExportConfig(backend=backend)
    passes = {} if passes is None else passes
    cc = EdgeCompileConfig(_check_ir_validity=False)
    transforms = [UnsqueezeAsView()] if cfg.unsqueeze_as_view else []
    if cfg.backend == "xnnpack":
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        if cfg.xnnpack_ops in ("matmul", "bmm"):
            from .xnnpack_partition import MatmulChainPartitioner
            casts = ("dequantize_per_tensor.default",) if cfg.xnnpack_casts else ()
            part = (MatmulChainPartitioner(single_ops=MatmulChainPartitioner.ACTIVATIONS + casts,
                                           elementwise_min_numel=cfg.xnnpack_elementwise,
                                           dynamic_linears=cfg.integer_matmuls != "off")
                    if cfg.xnnpack_ops == "matmul" else MatmulChainPartitioner(single_ops=casts))
        else:
            part = XnnpackPartitioner()
        edge, legalize = to_edge_lowered(ep, [part], transforms, cc)
        passes["legalized_partitions"] = legalize["legalized"]
        _check_casts_delegated(edge.exported_program())
    else:
        edge = to_edge(ep, compile_config=cc)
        if transforms:
            edge = edge.transform(transforms)
    if transforms:
        passes["unsqueeze_as_view"] = transforms[0].replaced
    if cfg.constant_views_folded:
        passes["constant_views_as_constants"] = graph_passes.constant_views_as_constants(edge.exported_program())
    if cfg.external_weights:
        from .edge_passes import constant_views_as_copies
        passes["constant_views_as_copies"] = constant_views_as_copies(edge.exported_program())
    if cfg.restore_order:
        passes["restore_order"] = restore_order(edge.exported_program().graph_module)
    return edge


def _check_casts_delegated(edge_program) -> None:
    """Every dequantize_per_tensor / quantize_per_tensor (graph_passes.casts_as_dequantize) must run in XNNPACK: the
    runtimes register no portable kernel for them."""
    left = [n.name for n in edge_program.graph_module.graph.nodes
            if n.op == "call_function" and "quantize_per_tensor" in _op_name(n.target)]
    if left:
        raise RuntimeError(f"{len(left)} int8 casts / transposes (quantize ops) were not delegated to XNNPACK, e.g. "
                           f"{left[0]}: export with ExportConfig(xnnpack_casts=False)")


def backend_config(cfg: ExportConfig, planned_inputs: bool = True):
    """planned_inputs=False leaves the program's inputs out of its arena (the caller's buffers)."""
    from executorch.exir import ExecutorchBackendConfig

    from .memory_plan import planning_pass
    return ExecutorchBackendConfig(memory_planning_pass=planning_pass(cfg.memory_planner,
                                                                      alloc_graph_input=planned_inputs),
                                   external_constants=cfg.external_weights)


def _data_files(et) -> dict[str, bytes]:
    """The external data files of an ExecutorchProgramManager, as `write_tensor_data_to_file` names them (1.5.1 has
    no public getter on the manager: `_tensor_data` is what that method writes)."""
    files = {}
    for name, cord in (et._tensor_data or {}).items():
        files[name if name.endswith(".ptd") else name + ".ptd"] = bytes(cord)
    return files


def export_training_program(step: StepModule, cfg: ExportConfig) -> TrainingProgram:
    """The step's training program; the lowering read from the program cache when it holds this traced step."""
    ep = trace_step(step, cfg)
    files, meta = ProgramCache.from_env().program("train_step", ep, cfg, lambda: _lower_step(ep, step, cfg))
    return TrainingProgram(buffer=files[PTE_FILE], backend=cfg.backend, precision=cfg.quant.precision,
                           inputs=input_specs(step.names, step.example), remat=str(RematSpec.parse(cfg.remat)),
                           lora_keys=step.lora_keys, memory=meta["memory"], ops=meta["ops"], passes=meta["passes"],
                           data={name.removeprefix(DATA_PREFIX): b for name, b in files.items()
                                 if name.startswith(DATA_PREFIX)})


DATA_PREFIX = "data."                       # a data file in a training program's cache entry


def _lower_step(ep, step: StepModule, cfg: ExportConfig) -> tuple[dict[str, bytes], dict]:
    """joint + passes + lowering + memory report of the traced step: ({PTE_FILE, DATA_PREFIX + data file name: bytes},
    {"memory", "ops", "passes"})."""
    from .executorch_memory import memory_report
    ep, passes = joint_with_passes(ep, cfg)
    edge = lower(ep, cfg, passes)
    ops = _op_placement(edge.exported_program())
    et = edge.to_executorch(backend_config(cfg))
    buf = et.buffer
    data = _data_files(et) if cfg.external_weights else {}
    memory = memory_report(et, step, len(buf), data, cfg)
    if cfg.trace_need:
        from .executorch_memory import traced_need
        memory.update(traced_need(step, cfg))
        memory["arena_over_traced"] = round(memory["planned_arena_bytes"] / memory["traced_equivalent_bytes"], 3)
    files = {PTE_FILE: buf, **{DATA_PREFIX + name: b for name, b in data.items()}}
    return files, {"memory": memory, "ops": ops, "passes": passes}
