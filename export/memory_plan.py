"""Memory planning for the training program: where each planned tensor lives in the arena.

ExecuTorch 1.5.1 ships two planning algorithms (`exir/memory_planning.py`): `naive` (no reuse) and `greedy`, the
default. Greedy sorts tensors by size and puts each into a *shared object*, a slot sized by the first (largest)
tensor placed in it; a later tensor reuses a slot only if it fits beside the slot's tensors whose lifetimes it
overlaps. Slots never grow and never merge, so in a training graph, where tensors of many sizes live for very
different spans (saved activations from forward to backward, transients, gradients to the end), the arena ends up
well above the most bytes ever alive at once (cause B in benchmarks/results/device_footprint_causes.md).

`best_fit` places tensors by offset instead (greedy by size with best fit, Pisarchyk & Lee 2020, "Efficient Memory
Management for Deep Neural Net Inference", as TFLite does): largest first, each at the lowest offset that has a gap
big enough among the already placed tensors whose lifetimes overlap its own, preferring the tightest such gap.
Several orderings are tried and the smallest arena kept. `lower_bound` is the most bytes alive at one node under the
program's lifetimes: no planner can go below it.

`planning_pass(name)` returns the MemoryPlanningPass for `ExecutorchBackendConfig(memory_planning_pass=...)`:
"greedy" (ExecuTorch's), "best_fit" (ours), or "best" (both run, the smaller arena kept: ExecuTorch's
MemoryPlanningAlgorithmSuite).
"""

from __future__ import annotations

from executorch.exir.memory_planning import (MemoryAlgoResult, MemoryPlanningAlgorithmSuite, SpecAllocResult,
                                             greedy)
from executorch.exir.passes import MemoryPlanningPass

PLANNERS = ("greedy", "best_fit", "best")


def _place(items, start: int) -> tuple[dict, int]:
    """items: (size, first, last, key) in placement order. Returns key -> offset and the arena end."""
    placed: list[tuple[int, int, int, int]] = []          # (offset, end, first, last)
    offsets = {}
    top = start
    for size, first, last, key in items:
        live = sorted((o, e) for o, e, f, l in placed if not (l < first or f > last))
        best, best_gap, cursor = None, None, start
        for o, e in live:
            gap = o - cursor
            if gap >= size and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, e)
        if best is None:
            best = cursor
        offsets[key] = best
        placed.append((best, best + size, first, last))
        top = max(top, best + size)
    return offsets, top


ORDERS = {
    "size": lambda it: (-it[0], it[1] - it[2], it[1]),            # largest first, longer-lived first
    "area": lambda it: (-(it[0] * (it[2] - it[1] + 1)), it[1]),
    "start": lambda it: (it[1], -it[0]),
    "longest": lambda it: (-(it[2] - it[1]), -it[0]),
}


def best_fit(alignment: int, specs, graph_module, graph_signature, extra_padding: int = 0) -> MemoryAlgoResult:
    """MemoryPlanningAlgorithmSuite-compatible algorithm (see module docstring). Tensors that alias another one's
    storage (`storage_base`) are not supported: ExecuTorch sets them only for `_share_alloc_with_arg_idx` nodes,
    which the training program has none of."""
    specs = list(specs)
    result = MemoryAlgoResult({}, [])
    start = 0
    bufsizes = getattr(graph_module, "input_mem_buffer_sizes", None)
    if bufsizes and len(bufsizes) > 1:
        start = bufsizes[1]
    items = []
    for i, spec in enumerate(specs):
        if spec.storage_base is not None:
            raise NotImplementedError("best_fit: storage-backed TensorSpec (storage_base) is not supported")
        mem_id = 1 if spec.mem_id is None else spec.mem_id
        if mem_id != 1:
            raise NotImplementedError(f"best_fit plans memory id 1 only, got {mem_id}")
        spec.realign(alignment)
        items.append((spec.allocated_memory, spec.lifetime[0], spec.lifetime[1], i))
    best = None
    for order in ORDERS.values():
        offsets, top = _place(sorted(items, key=order), start)
        if best is None or top < best[1]:
            best = (offsets, top)
    offsets, top = best
    for i, spec in enumerate(specs):
        result.spec_dict[spec] = SpecAllocResult(mem_id=1, mem_obj_id=i, mem_offset=offsets[i])
    result.bufsizes = [0, (top + extra_padding) if specs or start else 0]
    return result


def planned_specs(gm) -> list:
    """(TensorSpec, origin) for every tensor planned in memory id 1 of a lowered, memory-planned graph, once each
    (a `memory.view` shares its base's storage and is skipped). origin: the op that writes the tensor (for an
    `alloc`, the out-variant op it is passed to), "input:NAME" for placeholders, "delegate output" for getitems of
    a delegate call."""
    from torch.utils._pytree import tree_flatten

    from executorch.exir import memory
    seen = {}
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target == memory.view:
            continue
        for s in tree_flatten(n.meta.get("spec"))[0]:
            if getattr(s, "mem_id", None) == 1 and getattr(s, "mem_offset", None) is not None and id(s) not in seen:
                seen[id(s)] = (s, _origin(n))
    return list(seen.values())


def _origin(n) -> str:
    if n.op == "placeholder":
        return "input:" + n.name
    if n.op == "call_function" and "getitem" in str(n.target):
        src = n.args[0]
        tgt = getattr(src, "target", None)
        if "delegate" in str(getattr(tgt, "__name__", tgt)) or "delegate" in getattr(src, "name", ""):
            return "delegate output"
        return "getitem"
    for u in n.users:
        if u.op == "call_function":
            name = getattr(u.target, "__name__", str(u.target))
            return str(name).split("::")[-1]
    return str(getattr(n.target, "__name__", n.target))


def _live_bytes(specs):
    """(instruction, planned bytes alive from it on) at each lifetime start or end, in instruction order (ends
    before starts at one instruction)."""
    events = []
    for s in specs:
        events.append((s.lifetime[0], s.allocated_memory))
        events.append((s.lifetime[1] + 1, -s.allocated_memory))
    events.sort(key=lambda e: (e[0], e[1]))
    live = 0
    for t, d in events:
        live += d
        yield t, live


def peak_instruction(specs) -> int:
    """The instruction index where the most planned bytes are alive."""
    peak = at = 0
    for t, live in _live_bytes(specs):
        if live > peak:
            peak, at = live, t
    return at


def lower_bound(specs) -> int:
    """Most bytes alive at one node (sum of allocated sizes of the tensors whose lifetimes contain it)."""
    return max((live for _, live in _live_bytes(specs)), default=0)


def planning_pass(name: str = "best", alloc_graph_input: bool = True,
                  alloc_graph_output: bool = True) -> MemoryPlanningPass:
    if name not in PLANNERS:
        raise ValueError(f"memory planner {name!r}: expected one of {PLANNERS}")
    algos = {"greedy": [greedy], "best_fit": [best_fit], "best": [greedy, best_fit]}[name]
    return MemoryPlanningPass(memory_planning_algo=MemoryPlanningAlgorithmSuite(algo_list=algos),
                              alloc_graph_input=alloc_graph_input, alloc_graph_output=alloc_graph_output)
