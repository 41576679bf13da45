"""Partition lowering without the whole-graph copy per partition (ExecuTorch 1.5.1).

`to_backend` cuts each partition out of the program with `create_submodule_from_nodes`, which inserts the fused
call after the partition's last output node and then calls torch.fx's `legalize_graph` on the WHOLE program: a
Kahn-order copy of every node into a new graph, assigned back to the module, which recompiles the program and every
delegate submodule created so far. Once per partition, so lowering is quadratic in the number of partitions. The
training programs have one small delegate per matmul chain (xnnpack_partition.py): sana-tiny's has 860, the SANA
layout's (250M) export took 4078 s, and a py-spy sample of a sana-tiny export
(25 s, taken by hand: no benchmark in the repo records it) put 92% of the time inside `legalize_graph`.

The call is inserted after the partition's last output, so the graph is already in topological order unless an
earlier output of the same partition has a user between the two (a multi-output partition). `checked_legalize`
checks the order in one pass over the nodes (no copy, no recompile) and calls `legalize_graph` only when the order
is broken. It also keeps the node order where `legalize_graph` would have reshuffled it (its Kahn order is not
stable; `schedule.restore_order` repairs that afterwards either way). `to_edge_lowered` recompiles the lowered
program once at the end, in place of the per-partition recompiles.

Each partition then goes through XNNPACK's preprocess, which runs 17 graph passes on it (`XNNPACKPassManager`), each
an ExportPass re-trace of the partition plus a new ExportedProgram, whether or not the partition holds an op the pass
rewrites. A training program's partitions are one bmm (with its transposes), permute, GELU, tanh or softmax each, so
most of those passes change nothing. `pruned_xnnpack_passes` skips, per partition and per pass, the passes of
`_xnnpack_pass_ops` when the partition holds none of the ops that pass rewrites (read from each pass's source in
ExecuTorch 1.5.1); the others always run. The programs come out byte for byte the same
(tests/test_lowering.py; `python benchmarks/xnnpack_pass_pruning.py@eb714ee` (git show) on the bundles' programs, with the times).
"""

from __future__ import annotations

import contextlib
import os
from typing import Callable

from torch.fx import GraphModule, Node


def in_topological_order(gm: GraphModule) -> bool:
    seen: set = set()
    for node in gm.graph.nodes:
        for a in node.all_input_nodes:
            if a not in seen:
                return False
        seen.add(node)
    return True


@contextlib.contextmanager
def checked_legalize():
    """Within: ExecuTorch's partition lowering legalizes the graph only when a partition broke its order."""
    import executorch.exir.lowered_backend_module as lbm
    original = lbm.legalize_graph
    stats = {"checked": 0, "legalized": 0}

    def legalize_if_needed(gm: GraphModule) -> GraphModule:
        stats["checked"] += 1
        if in_topological_order(gm):
            return gm
        stats["legalized"] += 1
        return original(gm)

    lbm.legalize_graph = legalize_if_needed
    try:
        yield stats
    finally:
        lbm.legalize_graph = original


def _xnnpack_pass_ops() -> dict[str, Callable[[Node], bool]]:
    """XNNPACK preprocess pass name -> does this node hold an op the pass rewrites (ExecuTorch 1.5.1's sources: each
    pass below looks only at nodes of these ops and leaves a graph without them as it was)."""
    from executorch.backends.xnnpack._passes.decompose_batch_norm import DecomposeBatchNorm
    from executorch.backends.xnnpack._passes.fuse_activation_pass import FuseActivationPass
    from executorch.backends.xnnpack.utils.quant_utils import is_dequant, is_quant
    from executorch.backends.transforms.remove_clone_ops import RemoveCloneOpsTransform
    from executorch.exir.passes.dim_order_ops_registry import MemoryFormatOpsMap

    def targets(*ops):
        wanted = set(ops)
        return lambda n: n.target in wanted

    def names(*ops):
        return lambda n: getattr(n.target, "__name__", None) in ops
    return {
        "XNNPACKRemoveCloneOpsTransform": targets(*RemoveCloneOpsTransform.clone_ops),
        "DimOrderOpsRevertPass": targets(*MemoryFormatOpsMap),
        "PropagateCustomMetaPass": lambda n: is_quant(n) or is_dequant(n),
        "FuseBatchNormPass": targets(*DecomposeBatchNorm.BATCH_NORM_OPS),
        "DecomposeBatchNorm": targets(*DecomposeBatchNorm.BATCH_NORM_OPS),
        "FuseActivationPass": targets(*FuseActivationPass.FUSEABLE_ACTIVATIONS),
        "DecomposeConcatenate": names("aten.cat.default"),
        "RemoveGetItemPass": names("aten.max_pool2d_with_indices.default", "aten.max.dim"),
        "InsertPadQDQPass": names("aten.constant_pad_nd.default"),
        "Conv1dUnsqueezePass": names("aten.convolution.default"),
        "PReLUReshapePass": names("aten._prelu_kernel.default"),
        "RemoveRedundantCopyPass": names("aten._to_copy.default"),
    }


def _holds(ep, wanted: Callable[[Node], bool]) -> bool:
    return any(n.op == "call_function" and wanted(n)
               for gm in ep.graph_module.modules() if isinstance(gm, GraphModule) for n in gm.graph.nodes)


@contextlib.contextmanager
def pruned_xnnpack_passes():
    """Within: XNNPACK's preprocess runs a pass of `_xnnpack_pass_ops` on a partition only when the partition (as
    the passes before it left it) holds an op that pass rewrites; every other pass runs as before, in its order."""
    from executorch.backends.xnnpack._passes import XNNPACKPassManager
    from executorch.backends.xnnpack._passes.xnnpack_pass import XNNPACKPass
    from executorch.exir.program._program import _transform
    pass_ops = _xnnpack_pass_ops()
    original = XNNPACKPassManager.transform
    stats = {"passes_run": 0, "passes_skipped": 0}

    def transform(self):
        ep = self.exported_program
        for pass_ in self.passes:
            wanted = pass_ops.get(pass_.__name__)
            if wanted is not None and not _holds(ep, wanted):
                stats["passes_skipped"] += 1
                continue
            stats["passes_run"] += 1
            ep = _transform(ep, pass_(ep) if issubclass(pass_, XNNPACKPass) else pass_())
        return ep

    XNNPACKPassManager.transform = transform
    try:
        yield stats
    finally:
        XNNPACKPassManager.transform = original


ENV_ALL_PASSES = "DITSKIP_EDGE_XNNPACK_ALL_PASSES"    # "1": XNNPACK runs every pass on every partition (no pruning)


def prune_passes_from_env() -> bool:
    """False when $DITSKIP_EDGE_XNNPACK_ALL_PASSES is 1; unset, empty or 0: True; anything else a one-line refusal."""
    value = os.environ.get(ENV_ALL_PASSES, "")
    if value not in ("", "0", "1"):
        from ditskip_edge.runtime.errors import UserError
        raise UserError(f"{ENV_ALL_PASSES}={value!r}: expected 1 (run every XNNPACK pass) or 0")
    return value != "1"


def to_edge_lowered(ep, partitioner, transform_passes=(), compile_config=None, prune_passes: bool | None = None):
    """`to_edge_transform_and_lower` under `checked_legalize` and (prune_passes; default: unless
    $DITSKIP_EDGE_XNNPACK_ALL_PASSES is 1) `pruned_xnnpack_passes`; the lowered program's graph module is recompiled
    once at the end (what the skipped per-partition recompiles left stale). Returns (edge program manager, stats)."""
    from executorch.exir import to_edge_transform_and_lower
    if prune_passes is None:
        prune_passes = prune_passes_from_env()
    pruning = pruned_xnnpack_passes() if prune_passes else contextlib.nullcontext({})
    with checked_legalize() as stats, pruning as pass_stats:
        edge = to_edge_transform_and_lower(ep, transform_passes=list(transform_passes), partitioner=list(partitioner),
                                           compile_config=compile_config)
    edge.exported_program().graph_module.recompile()
    return edge, {**stats, **pass_stats}
