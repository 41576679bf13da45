"""Generation's decode programs on XNNPACK, weights still program inputs: the graph pass that rewrites a traced
decode program's convolutions as im2col bands + bmm (the decomposition, its band rule and its eager twin:
ditskip_edge/models/conv_matmul.py), the partitioner that delegates those bmm alone, and the lowering."""

from __future__ import annotations

import torch

from ditskip_edge.models.conv_matmul import DEFAULT_BAND_BYTES, conv_as_matmuls, rewritable

aten = torch.ops.aten


def convs_to_matmuls(ep, band_bytes: int = DEFAULT_BAND_BYTES, dialect: str = "aten") -> int:
    """Rewrite the program's convolutions as conv_as_matmuls: dialect "aten" (a traced graph: conv2d, or
    convolution once decomposed) or "edge" (after to_edge: the rewritten graph, which grows with the bands, is
    never decomposed again). Returns the number of convolutions rewritten."""
    from .graph_passes import _fake, _insert, _rewrite_nodes
    targets = (aten.conv2d.default, aten.convolution.default)
    to_dialect = lambda t: t                                            # noqa: E731
    if dialect == "edge":
        from executorch.exir.dialects._ops import ops as exir_ops
        targets = (exir_ops.edge.aten.convolution.default,)

        def to_dialect(t):
            name = "view_copy" if t is aten.view.default else t._schema.name.split("::")[1]
            return getattr(getattr(exir_ops.edge.aten, name), t._overloadname)
    elif dialect != "aten":
        raise ValueError(f"convs_to_matmuls: dialect {dialect!r}, expected 'aten' or 'edge'")

    def rewrite(g, n):
        if n.target is aten.conv2d.default:          # the traced (not yet decomposed) graph's form
            x, w, bias, stride, padding, dilation, groups = (list(n.args) + [None, [1, 1], [0, 0], [1, 1], 1][
                len(n.args) - 2:])[:7]
            transposed = False
        else:
            x, w, bias, stride, padding, dilation, transposed, _, groups = n.args[:9]
        xs, ws = _fake(x).shape, _fake(w).shape
        if not rewritable(xs, ws, stride, padding, dilation, transposed):
            return None
        return conv_as_matmuls(lambda target, *args: _insert(g, to_dialect(target), args, like=n), x, w, bias,
                               xs, ws, padding, groups, band_bytes)

    n = _rewrite_nodes(ep, targets, rewrite)
    ep.graph_module.graph.eliminate_dead_code()
    outputs = ep.graph_module.graph.output_node().args[0]
    for spec, node in zip(ep.graph_signature.output_specs, outputs):   # an output that was a convolution
        if hasattr(spec.arg, "name"):
            spec.arg.name = node.name
    ep.graph_module.recompile()
    return n


def _weight_on_the_left(n) -> bool:
    """A bmm of convs_to_matmuls: its left operand a view of a program input (the weight; the lowering re-traces
    the graph, so no node meta survives to the partitioner)."""
    a = n.args[0] if n.op == "call_function" and "bmm" in str(n.target) and n.args else None
    return a is not None and "view" in str(getattr(a, "target", "")) and a.args[0].op == "placeholder"


def decode_partitioner():
    """XNNPACK for the convolutions' bmm only (_weight_on_the_left, convs_to_matmuls): one delegate each, its
    operands' views left to the program (views of the caller's weight buffer and of the planned cols)."""
    from executorch.backends.xnnpack.partition.config.generic_node_configs import BMMConfig
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from torch.fx.passes.infra.partitioner import Partition

    class ConvMatmulPartitioner(XnnpackPartitioner):
        def __init__(self):
            super().__init__(configs=[BMMConfig], per_op_mode=True)

        def generate_per_op_partitions(self, ep):
            matched = {m for match in self.get_matched_nodes_from_configs(ep) for m in match}
            nodes = [n for n in ep.graph_module.graph.nodes if n in matched and _weight_on_the_left(n)]
            return [Partition(id=i, nodes={n: None}) for i, n in enumerate(nodes)]

    return ConvMatmulPartitioner()


def lower_decode_program(ep, band_bytes: int = DEFAULT_BAND_BYTES, planned_inputs: bool = False):
    """The traced decode program with its convolutions as XNNPACK bmm (convs_to_matmuls, decode_partitioner), the
    rest as the portable program has it (addmm -> mm + add), ExecuTorch's greedy memory plan (what the estimate's
    xnnpack_program.greedy_arena_bytes replays). Returns the ExecutorchProgramManager."""
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge
    from executorch.exir.passes import MemoryPlanningPass

    from . import graph_passes
    from .lowering import checked_legalize, pruned_xnnpack_passes
    graph_passes.remove_unused_constants(ep)
    edge = to_edge(ep, compile_config=EdgeCompileConfig(_check_ir_validity=False))
    graph_passes.addmm_to_mm_add(edge.exported_program(), "edge")
    convs_to_matmuls(edge.exported_program(), band_bytes, "edge")     # after to_edge's decomposition (not again)
    with checked_legalize(), pruned_xnnpack_passes():
        edge = edge.to_backend(decode_partitioner())
    edge.exported_program().graph_module.recompile()
    return edge.to_executorch(ExecutorchBackendConfig(
        memory_planning_pass=MemoryPlanningPass(alloc_graph_input=planned_inputs)))
