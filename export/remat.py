"""Block rematerialization in the exported joint forward-backward graph (activation checkpoints at kept-block
boundaries).

    with block_marks(step_module):                  # while exporting: every stream entering kept block i passes
        ep = torch.export.export(...)               # through ditskip::block_mark(x, i), an identity custom op
    ep = _export_forward_backward(ep)               # the marks survive the joint pass as nodes (no metadata does:
                                                    # nn_module_stack is empty afterwards, checkpoint tags are lost)
    rematerialize_blocks(ep, RematSpec.parse("blocks"))   # backward reads of block i's activations -> recomputed
    remove_marks(ep)                                # marks -> their input (the checkpoint), before lowering

Which forward node belongs to which block: the largest mark index among its ancestors (a node downstream of the
streams entering block i and of no later block's); a node that reads no mark (the context every block reads: temb,
rotary embeddings, the caption) belongs to no block and is kept, unless all its forward readers belong to one block
(e.g. SANA's cross-attention keys and values of the caption, or a block's AdaLN modulation of temb), then it is
that block's. With `every` = K, blocks i with the same i // K form one group.

For each group but the last run forward, the forward nodes of the group that the backward reads are recomputed, with their ancestors in the
group and the constant-only chains they need (dequantized weights), just before the group's first backward node;
the backward then reads the copies, so the forward originals die in the forward pass. What stays alive from forward
to backward: the streams entering each group (the marks' inputs, i.e. the checkpoints), the context, the inputs and
parameters. In backward one group's internals are alive at a time. Recomputation repeats the same deterministic ops
on the same inputs, so loss and gradients are unchanged. The last group's gradients come first: recomputing it would
make again, right after the loss, what forward just dropped, so its activations are kept instead (the same peak,
one group's forward less work; `last_group=True` recomputes it too, for comparison).

Run before `graph_passes.recompute_frozen_in_backward`: the copies are new backward readers of dequantized weights,
and that pass then gives them their own just-in-time dequantization.

Why a graph pass and not one exported method per block: ExecuTorch plans one arena per method, and sharing arenas
between methods is a C++ `Module` option (`share_memory_arenas`) that the Python bindings do not expose; the driver
would also have to carry every block's boundary tensors between calls. One method keeps the device contract (one
`forward`, loss first, then gradients) and the existing trainers unchanged.
"""

from __future__ import annotations

import contextlib

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from ditskip_edge.remat import RematSpec  # noqa: F401  (the one parse of the setting; re-exported)

from . import graph_passes


@torch.library.custom_op("ditskip::block_mark", mutates_args=())
def block_mark(x: torch.Tensor, block: int) -> torch.Tensor:
    """Identity that names a block boundary in the exported graph (a copy: custom ops may not alias inputs)."""
    return x.clone()


@block_mark.register_fake
def _block_mark_fake(x, block):
    return torch.empty_like(x)


block_mark.register_autograd(lambda ctx, grad: (grad, None))
MARK = torch.ops.ditskip.block_mark.default


def _views(module: torch.nn.Module):
    from ditskip_edge.models.views import DiTView
    return [m for m in module.modules() if isinstance(m, DiTView)]


@contextlib.contextmanager
def block_marks(module: torch.nn.Module):
    """While active, every stream entering block i of each DiTView under `module` goes through block_mark(x, i)."""
    patched = []
    for view in _views(module):
        index = {id(b): i for i, b in enumerate(view.blocks)}
        had = "run_block" in view.__dict__
        inner = view.run_block

        def run_block(block, streams, ctx, inner=inner, index=index):
            i = index[id(block)]
            return inner(block, {k: block_mark(v, i) for k, v in streams.items()}, ctx)

        view.run_block = run_block
        patched.append((view, had, inner))
    try:
        yield len(patched)
    finally:
        for view, had, inner in patched:
            if had:
                view.run_block = inner
            else:
                del view.run_block


def _is_mark(n: Node) -> bool:
    return n.op == "call_function" and n.target == MARK


def rematerialize_blocks(ep: ExportedProgram, spec: RematSpec, last_group: bool = False) -> dict:
    """See the module docstring. Returns counts: groups recomputed, nodes copied, backward reads redirected, and
    `kept_group`: the group not recomputed (the last run forward), unless `last_group` asks for it too."""
    stats = {"groups": 0, "recomputed_nodes": 0, "backward_reads_redirected": 0, "marks": 0}
    if not spec.enabled:
        return stats
    g = ep.graph_module.graph
    nodes = list(g.nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    out_node = nodes[-1]
    loss = out_node.args[0][0]
    fwd_end = pos[loss]
    frozen = graph_passes.frozen_input_names(ep)
    const: set[Node] = set()
    block: dict[Node, int] = {}
    forward = [n for n in nodes if pos[n] <= fwd_end]
    for n in forward:
        if n.op == "placeholder":
            block[n] = -1
            if n.name in frozen:
                const.add(n)
            continue
        if n.op == "call_function" and n.all_input_nodes and all(a in const for a in n.all_input_nodes):
            const.add(n)
        if _is_mark(n):
            block[n] = int(n.args[1])
            stats["marks"] += 1
        else:
            block[n] = max((block.get(a, -1) for a in n.all_input_nodes), default=-1)
    if not stats["marks"]:
        raise ValueError("rematerialize_blocks: the graph has no block marks (export under remat.block_marks)")
    # context read by one block only belongs to that block; inputs of marks are checkpoints and stay put
    feeds_mark = {a for n in forward if _is_mark(n) for a in n.all_input_nodes}
    for n in reversed(forward):
        if block[n] != -1 or n.op != "call_function" or n in const or n in feeds_mark:
            continue
        fwd_users = {block[u] for u in n.users if pos.get(u, fwd_end + 1) <= fwd_end}
        if len(fwd_users) == 1 and min(fwd_users) >= 0:
            block[n] = fwd_users.pop()
    group = {n: (b // spec.every if b >= 0 else -1) for n, b in block.items()}
    members: dict[int, list[Node]] = {}
    for n in forward:
        if n.op == "call_function" and not _is_mark(n) and group[n] >= 0 and n not in const:
            members.setdefault(group[n], []).append(n)
    reads: dict[int, dict[Node, list[Node]]] = {}
    for gid, ns in sorted(members.items()):
        bwd_read = {n: sorted((u for u in n.users if u.op != "output" and pos.get(u, -1) > fwd_end), key=pos.get)
                    for n in ns}
        bwd_read = {n: us for n, us in bwd_read.items() if us}
        if bwd_read:
            reads[gid] = bwd_read
    # the group whose gradients come first (the last one run forward) is not recomputed: its activations would die
    # at the loss and be made again at once, so keeping them costs no more memory than the copies would
    first_read = {gid: pos[min((us[0] for us in r.values()), key=pos.get)] for gid, r in reads.items()}
    if first_read and not last_group:
        stats["kept_group"] = min(first_read, key=first_read.get)
        del reads[stats["kept_group"]]
    for gid, bwd_read in reads.items():
        in_group = set(members[gid])
        ns = members[gid]
        first = min((us[0] for us in bwd_read.values()), key=pos.get)
        copies: dict[Node, Node] = {}
        # read as they are: inputs, checkpoints (marks) and what the forward keeps (context, other groups)
        copy = graph_passes.recompute_copier(
            g, copies, reuse=lambda x, in_group=in_group: x.op == "placeholder" or _is_mark(x)
            or (x not in in_group and x not in const))
        with g.inserting_before(first):
            for n in ns:                       # forward order, so every copy's inputs are copied before it
                if n in bwd_read:
                    copy(n)
        for n, users in bwd_read.items():
            for u in users:
                u.replace_input_with(n, copies[n])
            stats["backward_reads_redirected"] += len(users)
        stats["groups"] += 1
        stats["recomputed_nodes"] += len(copies)
    graph_passes._finish(ep)
    return stats


def remove_marks(ep: ExportedProgram) -> int:
    """Replace every block mark by its input (identity). Returns how many were removed."""
    g = ep.graph_module.graph
    n_removed = 0
    for n in list(g.nodes):
        if _is_mark(n):
            n.replace_all_uses_with(n.args[0])
            g.erase_node(n)
            n_removed += 1
    graph_passes._finish(ep)
    return n_removed
