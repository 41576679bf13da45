"""Passes on the edge-dialect program (between `to_edge` and partitioning / `to_executorch`).

- `UnsqueezeAsView`: `unsqueeze_copy` / `squeeze_copy` -> `view_copy` of the same shape. ExecuTorch turns a
  `view_copy` of a contiguous tensor into `memory.view` (no new storage: `ExecutorchBackendConfig.remove_view_copy`),
  but runs `unsqueeze_copy` / `squeeze_copy` as copies. `graph_passes.mm_to_bmm` wraps every 2-D matmul in
  unsqueeze / bmm / squeeze, and a weight that reaches a matmul outside an XNNPACK partition was copied in full
  once more for it (cause C in benchmarks/results/device_footprint_causes.md). Edge-dialect tensors are
  contiguous (every op writes a fresh, dense output), so the view is always legal.
- `constant_views_as_copies`: with external weights, a `view_copy` of a frozen constant (which ExecuTorch's
  `remove_view_copy` turns into `memory.view`) reads a clone of the constant instead: ExecuTorch 1.5.1's emitter gives
  such a view the constant's external-data spec without its `constant_tag` and fails (`assert constant_tag is not
  None`; seen on SANA's `scale_shift_table` squeeze, the int4 patch embedder's `w_packed.view(-1)` and the bias of a
  1x1 convolution written as a matmul, graph_passes.pointwise_conv_to_mm). Such constants are small (quantized
  weights are dequantized first).
"""

from __future__ import annotations

from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.pass_base import PassBase, PassResult

_SQUEEZES = (exir_ops.edge.aten.unsqueeze_copy.default, exir_ops.edge.aten.squeeze_copy.dims,
             exir_ops.edge.aten.squeeze_copy.dim, exir_ops.edge.aten.squeeze_copy.default)


class UnsqueezeAsView(PassBase):
    def __init__(self):
        super().__init__()
        self.replaced = 0

    def call(self, graph_module) -> PassResult:
        g = graph_module.graph
        n_new = 0
        for n in list(g.nodes):
            if n.op != "call_function" or n.target not in _SQUEEZES:
                continue
            val = n.meta.get("val")
            if val is None or not val.is_contiguous():
                continue
            with g.inserting_before(n):
                v = g.call_function(exir_ops.edge.aten.view_copy.default, (n.args[0], list(val.shape)))
            v.meta = dict(n.meta)
            n.replace_all_uses_with(v)
            g.erase_node(n)
            n_new += 1
        self.replaced += n_new
        if n_new:
            g.lint()
            graph_module.recompile()
        return PassResult(graph_module, n_new > 0)


def constant_views_as_copies(edge_program) -> int:
    """With external weights: every `view_copy` of a parameter (trained ones too), buffer or lifted constant reads a
    clone of it. Run on the edge program after lowering; schedule.restore_order then puts each clone just before its
    view. Returns the number of views changed."""
    sig = edge_program.graph_signature
    frozen = set(sig.inputs_to_buffers) | set(sig.inputs_to_lifted_tensor_constants) | set(sig.inputs_to_parameters)
    gm = edge_program.graph_module
    g = gm.graph
    n_new = 0
    for n in list(g.nodes):
        if n.op != "call_function" or n.target != exir_ops.edge.aten.view_copy.default:
            continue
        src = n.args[0]
        if getattr(src, "op", None) != "placeholder" or src.name not in frozen:
            continue
        with g.inserting_before(n):
            c = g.call_function(exir_ops.edge.aten.clone.default, (src,))
        c.meta = dict(src.meta)
        n.replace_input_with(src, c)
        n_new += 1
    if n_new:
        g.lint()
        gm.recompile()
    return n_new
