"""The kept blocks' training step as a joint forward-backward ExecuTorch program.

    bundle --build_step--> FlatTrainingStep (kept blocks + LoRA, frozen linears int8/int4, decoder, loss)
           --export_training_program--> torch.export -> _export_forward_backward -> graph passes
           -> to_edge (portable) | to_edge_transform_and_lower (XNNPACK) -> .pte bytes + memory report + op placement

Attention is exported under `sdpa_kernel([SDPBackend.MATH])`: the fused CPU SDPA backward has no ExecuTorch kernel,
the math path is plain matmul + softmax.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from ditskip_edge.quantize import QuantSpec

from . import graph_passes
from .step_module import StepModule, build_step, input_specs  # noqa: F401  (build_step: the exporters' entry)

log = logging.getLogger(__name__)
BACKENDS = ("portable", "xnnpack")


@dataclass(frozen=True)
class ExportConfig:
    quant: QuantSpec = field(default_factory=lambda: QuantSpec("fp32"))
    backend: str = "portable"                   # "portable" | "xnnpack"
    recompute_frozen: bool = True               # graph_passes.recompute_frozen_in_backward
    mm_rewrite: bool = True                     # graph_passes.addmm_to_mm_add
    mm_as_bmm: bool = True                      # XNNPACK only: graph_passes.mm_to_bmm

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")


@dataclass
class TrainingProgram:
    buffer: bytes
    backend: str
    precision: str
    inputs: list[dict]
    lora_keys: dict[str, str]
    memory: dict
    ops: dict
    passes: dict


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


def export_joint(step: StepModule, cfg: ExportConfig):
    """torch.export + joint forward-backward + graph passes. Returns (ExportedProgram, pass counts)."""
    from torch.export.experimental import _export_forward_backward
    with sdpa_kernel([SDPBackend.MATH]), torch.no_grad():
        ep = torch.export.export(step.module, tuple(step.example), strict=False)
    with sdpa_kernel([SDPBackend.MATH]):
        ep = _export_forward_backward(ep)
    passes = {"empty_permuted": graph_passes.replace_empty_permuted(ep),
              "negative_pad": graph_passes.negative_pad_to_slice(ep)}
    if cfg.mm_rewrite:
        passes["addmm_to_mm_add"] = graph_passes.addmm_to_mm_add(ep)
    if cfg.recompute_frozen:
        passes["recompute_frozen"] = graph_passes.recompute_frozen_in_backward(ep)
    passes["identity_views"] = graph_passes.drop_identity_views(ep)
    passes["unused_constants"] = graph_passes.remove_unused_constants(ep)
    if cfg.backend == "xnnpack" and cfg.mm_as_bmm:
        passes["mm_to_bmm"] = graph_passes.mm_to_bmm(ep)
    return ep, passes


def lower(ep, backend: str):
    from executorch.exir import EdgeCompileConfig, to_edge, to_edge_transform_and_lower
    cc = EdgeCompileConfig(_check_ir_validity=False)
    if backend == "xnnpack":
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        return to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()], compile_config=cc)
    return to_edge(ep, compile_config=cc)


def export_training_program(step: StepModule, cfg: ExportConfig) -> TrainingProgram:
    from .executorch_memory import memory_report
    ep, passes = export_joint(step, cfg)
    edge = lower(ep, cfg.backend)
    ops = _op_placement(edge.exported_program())
    et = edge.to_executorch()
    buf = et.buffer
    memory = memory_report(et, step, len(buf))
    return TrainingProgram(buffer=buf, backend=cfg.backend, precision=cfg.quant.precision,
                           inputs=input_specs(step.names, step.example),
                           lora_keys=step.lora_keys, memory=memory, ops=ops, passes=passes)
