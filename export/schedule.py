"""Node order of a lowered ExecuTorch program: put the nodes back in the order the joint graph had.

ExecuTorch plans memory by node order (a tensor lives from the node that creates it to its last reader), so the
order *is* the memory plan. Delegating to XNNPACK reorders the graph: after fusing each partition,
`exir.lowered_backend_module.create_submodule_from_nodes` calls `torch.fx.passes.tools_common.legalize_graph`,
a topological sort documented as not stable (Kahn's algorithm, first-in first-out). Every node whose inputs are
ready early is hoisted to the front, above all every chain that reads only frozen constants: each quantized
weight's int8 -> fp32 cast and dequantization, including the copies `graph_passes.recompute_frozen_in_backward`
placed just before their backward use. In the lowered program they all run at the start and stay alive until
their reader, i.e. every dequantized fp32 weight is in the arena at once (cause A in
benchmarks/results/device_footprint_causes.md).

`restore_order` sorts the lowered graph again, topologically, preferring at each step the ready node that came
first before lowering. "Before lowering" is the `debug_handle` that `to_edge` numbers nodes with, in graph order,
and that lowering keeps (a delegate call takes the smallest handle among the nodes it replaced, which its
`original_module` keeps). With every node's inputs earlier than the node itself in that numbering, the sort gives
the pre-lowering order back exactly; delegates sit where their first node was, or as soon after as their inputs
allow.
"""

from __future__ import annotations

import heapq
import operator

from torch.fx import GraphModule, Node


def _delegate_handle(gm: GraphModule, node: Node) -> float | None:
    lowered = getattr(gm, node.args[0].target, None)
    orig = getattr(lowered, "original_module", None)
    if orig is None:
        return None
    handles = [n.meta["debug_handle"] for n in orig.graph_module.graph.nodes
               if n.op == "call_function" and isinstance(n.meta.get("debug_handle"), int)]
    return float(min(handles)) if handles else None


def _priorities(gm: GraphModule) -> dict[Node, float]:
    prio: dict[Node, float] = {}
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            prio[n] = -1.0
        elif n.op == "call_function" and "executorch_call_delegate" in str(n.target):
            prio[n] = _delegate_handle(gm, n)
        elif n.op == "call_function" and n.target is operator.getitem:
            prio[n] = None             # right after its producer (below)
        elif isinstance(n.meta.get("debug_handle"), int):
            prio[n] = float(n.meta["debug_handle"])
        else:
            prio[n] = None
    # nodes without a handle that read program inputs only (the clone edge_passes.constant_views_as_copies puts
    # before a view of an input): just before their first reader. "As soon as their inputs are ready" would be the
    # start of the program, and the copy would live from there to its reader (a LoRA weight's clone from the start
    # to the backward: the SANA layout's remat program measured 97.5 MiB RssAnon with it, 90.1 MiB without,
    # benchmarks/device_footprint.py)
    for n in reversed(list(gm.graph.nodes)):
        if prio[n] is None and n.op == "call_function" and n.target is not operator.getitem and n.all_input_nodes \
                and all(a.op == "placeholder" for a in n.all_input_nodes):
            readers = [prio[u] for u in n.users if prio.get(u) is not None]
            if readers:
                prio[n] = min(readers) - 0.25
    # other nodes without a handle: as soon as their inputs are ready (the largest priority among the inputs)
    for n in gm.graph.nodes:
        if prio[n] is None:
            ins = [prio[a] for a in n.all_input_nodes if prio.get(a) is not None]
            prio[n] = max(ins, default=-1.0) + (1e-3 if n.target is operator.getitem else 0.5)
    return prio


def restore_order(gm: GraphModule) -> int:
    """Reorder `gm`'s nodes in place (see module docstring). Returns how many nodes changed position."""
    nodes = list(gm.graph.nodes)
    output = nodes[-1]
    prio = _priorities(gm)
    indeg = {n: 0 for n in nodes}
    for n in nodes:
        for a in n.all_input_nodes:
            indeg[n] += 1
    ready = [(prio[n], i, n) for i, n in enumerate(nodes) if indeg[n] == 0 and n is not output]
    heapq.heapify(ready)
    index = {n: i for i, n in enumerate(nodes)}
    order: list[Node] = []
    while ready:
        _, _, n = heapq.heappop(ready)
        order.append(n)
        for u in n.users:
            indeg[u] -= 1
            if indeg[u] == 0 and u is not output:
                heapq.heappush(ready, (prio[u], index[u], u))
    if len(order) != len(nodes) - 1:
        raise RuntimeError(f"restore_order: sorted {len(order)} of {len(nodes) - 1} nodes (a cycle?)")
    moved = sum(1 for a, b in zip(order, nodes) if a is not b)
    for n in order:
        if n.op != "placeholder":
            output.prepend(n)
    gm.graph.lint()
    gm.recompile()
    return moved
