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
"""

from __future__ import annotations

import contextlib

from torch.fx import GraphModule


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


def to_edge_lowered(ep, partitioner, transform_passes=(), compile_config=None):
    """`to_edge_transform_and_lower` under `checked_legalize`; the lowered program's graph module is recompiled
    once at the end (what the skipped per-partition recompiles left stale). Returns (edge program manager, stats)."""
    from executorch.exir import to_edge_transform_and_lower
    with checked_legalize() as stats:
        edge = to_edge_transform_and_lower(ep, transform_passes=list(transform_passes), partitioner=list(partitioner),
                                           compile_config=compile_config)
    edge.exported_program().graph_module.recompile()
    return edge, stats
