"""Passes on the edge-dialect program (between `to_edge` and partitioning / `to_executorch`).

- `UnsqueezeAsView`: `unsqueeze_copy` / `squeeze_copy` -> `view_copy` of the same shape. ExecuTorch turns a
  `view_copy` of a contiguous tensor into `memory.view` (no new storage: `ExecutorchBackendConfig.remove_view_copy`),
  but runs `unsqueeze_copy` / `squeeze_copy` as copies. `graph_passes.mm_to_bmm` wraps every 2-D matmul in
  unsqueeze / bmm / squeeze, and a weight that reaches a matmul outside an XNNPACK partition was copied in full
  once more for it (cause C in benchmarks/results/device_footprint_causes.md). Edge-dialect tensors are
  contiguous (every op writes a fresh, dense output), so the view is always legal.
  With `external_weights` a squeeze of a program input (a frozen constant) stays a copy: ExecuTorch 1.5.1's emitter
  gives the view the constant's external-data spec without its `constant_tag` and fails (`assert constant_tag is not
  None`, seen on SANA's `scale_shift_table`); such constants are small (quantized weights are dequantized first).
"""

from __future__ import annotations

from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.pass_base import PassBase, PassResult

_SQUEEZES = (exir_ops.edge.aten.unsqueeze_copy.default, exir_ops.edge.aten.squeeze_copy.dims,
             exir_ops.edge.aten.squeeze_copy.dim, exir_ops.edge.aten.squeeze_copy.default)


class UnsqueezeAsView(PassBase):
    def __init__(self, external_weights: bool = False):
        super().__init__()
        self.replaced = 0
        self.external_weights = external_weights

    def call(self, graph_module) -> PassResult:
        g = graph_module.graph
        n_new = 0
        for n in list(g.nodes):
            if n.op != "call_function" or n.target not in _SQUEEZES:
                continue
            val = n.meta.get("val")
            if val is None or not val.is_contiguous():
                continue
            if self.external_weights and getattr(n.args[0], "op", None) == "placeholder":
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
