"""The training step as an ONNX graph for ONNX Runtime Training 1.19.2.

The exported module is the exporters' FlatTrainingStep (export/step_module.py): the project's TrainingStep with
flat inputs in the program contract's order (ditskip_edge/runtime/contract.py), the loss *in the graph*
(x_t = (1 - t) x0 + t noise, target = noise - x0, the cache entry decoded in-graph, mse). So `generate_artifacts`
gets `loss=None` (its PassThrough block) and builds the gradient graph from the scalar output 0, and every runtime
runs the very module the eager trainer runs. ORT computes loss and gradients only; the runtime's loop runs AdamW.
Initializers are renamed to the transformer's own (full-model) names, so LoRA parameters are called
`transformer_blocks.3.attn.to_q.lora_A.default.weight` in the checkpoint as in the eager model.

Export recipe (../shared/STACK.md): legacy TorchScript exporter, TRAINING mode, no constant folding (so int8 /
packed-int4 codes stay integer initializers feeding Cast + Mul), opset 16 (17's LayerNormalization has no gradient
builder), RMSNorm written out in plain ops while exporting.
"""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path

import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F


OPSET = 16


def _rms_norm_plain(input, normalized_shape, weight=None, eps=None):
    if eps is None:
        eps = torch.finfo(input.dtype).eps
    dims = tuple(range(-len(normalized_shape), 0))
    # Mul + ReduceMean + Add + Pow(-1/2): a form ORT's SimplifiedLayerNormFusion leaves alone
    y = input * torch.pow((input * input).mean(dims, keepdim=True) + eps, -0.5)
    return y * weight if weight is not None else y


def _rsqrt_as_pow(x):
    return torch.pow(x, -0.5)


@contextlib.contextmanager
def onnx_exportable_ops():
    """While exporting: aten::rms_norm has no ONNX symbolic at opset 16, so F.rms_norm runs as plain ops; and rsqrt
    is written as Pow(x, -1/2), because ORT's SimplifiedLayerNormFusion rewrites the x * rsqrt(mean(x^2) + eps)
    pattern into SimplifiedLayerNormalization, an ORT-only op in the ONNX domain that fails onnx.checker."""
    original, original_rsqrt = F.rms_norm, torch.rsqrt
    F.rms_norm = _rms_norm_plain
    torch.rsqrt = _rsqrt_as_pow     # diffusers' own RMSNorm writes x * rsqrt(mean(x^2) + eps)
    try:
        yield
    finally:
        F.rms_norm, torch.rsqrt = original, original_rsqrt


def full_model_names(module: nn.Module, transformer: nn.Module) -> dict[str, str]:
    """module-path name -> transformer name, for every parameter and buffer `module` reaches in `transformer`."""
    by_id = {}
    for n, p in transformer.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), n)
    for n, b in transformer.named_buffers(remove_duplicate=False):
        by_id.setdefault(id(b), n)
    out = {}
    for n, p in [*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)]:
        if id(p) in by_id:
            out[n] = by_id[id(p)]
    return out


def rename_initializers(model: onnx.ModelProto, mapping: dict[str, str]) -> None:
    """Rename initializers (and every node input that reads them) in place."""
    names = {i.name for i in model.graph.initializer}
    mapping = {k: v for k, v in mapping.items() if k in names and k != v}
    if not mapping:
        return
    taken = names - set(mapping)
    clash = [v for v in mapping.values() if v in taken]
    if clash:
        raise ValueError(f"initializer rename would collide: {clash[:3]}")
    for init in model.graph.initializer:
        init.name = mapping.get(init.name, init.name)
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            if name in mapping:
                node.input[i] = mapping[name]


def export_step_onnx(step: nn.Module, inputs: tuple, names: list[str], path: Path, transformer: nn.Module,
                     opset: int = OPSET) -> onnx.ModelProto:
    """Export the training step (inputs named `names`, contract order) to ONNX in training mode and give
    initializers their full-model names."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with onnx_exportable_ops(), warnings.catch_warnings():
        # ORT's training artifacts take a training-mode graph, which only the TorchScript exporter writes (the
        # torch.export-based one has no training mode); torch 2.13 (pinned) marks that exporter, its `training`
        # argument and its export context deprecated: notices about the exporter we choose, not about our graph
        for message in (r"You are using the legacy TorchScript-based ONNX export",
                        r"Setting `training` to something other than default is deprecated",
                        r"The feature will be removed\. Please remove usage of this function"):
            warnings.filterwarnings("ignore", message=message, category=DeprecationWarning)
        # the step is traced at the bundle's fixed shapes: where tracing reads a shape as a Python number
        # (FluxView.image_ids' token count, F.mse_loss's size check) the constant it records is the right one
        warnings.filterwarnings("ignore", message=r"Converting a tensor to a Python (integer|boolean)",
                                category=torch.jit.TracerWarning)
        # its constant folding skips a strided Slice of the quantized step: a folding not done, the graph unchanged
        warnings.filterwarnings("ignore", message=r"Constant folding - Only steps=1 can be constant folded",
                                category=UserWarning)
        torch.onnx.export(step, tuple(inputs), str(path), input_names=list(names), output_names=["loss"],
                          dynamo=False, export_params=True, do_constant_folding=False, opset_version=opset,
                          training=torch.onnx.TrainingMode.TRAINING)
    model = onnx.load(str(path))
    rename_initializers(model, full_model_names(step, transformer))
    onnx.save(model, str(path))
    return model


def integer_initializers(model: onnx.ModelProto) -> dict[str, int]:
    """name -> ONNX element type of every non-float initializer (the quantized weight codes)."""
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}
    return {i.name: i.data_type for i in model.graph.initializer if i.data_type not in floats}


# ------------------------------------------------------------------------------------------------------------------
# Recomputation in ORT's training graph (issue 14). ORT's gradient builder reads forward values in the gradient
# nodes, so the session keeps them alive from forward to backward: every dequantized weight (Cast(codes) * scale, read
# by the MatMul / Gemm gradients) and every activation the gradients need. The passes below rewrite the training
# model that generate_artifacts wrote: the gradient side reads copies, placed in the node list just before their
# first gradient reader, so the forward originals die in the forward pass.
#
# ORT undoes a copy on its own unless told not to: its CommonSubexpressionElimination transformer (basic level, on in
# every default session) merges nodes with the same op, attributes and inputs, i.e. every copy with its original
# (measured: 23 duplicated Cast nodes of flux-tiny's training model -> 23 Cast nodes after the session's optimizer).
# RECOMPUTE_SESSION_CONFIG turns exactly that transformer off; the session must be created with it.
RECOMPUTE_SESSION_CONFIG = {"optimization.disable_specified_optimizers": "CommonSubexpressionElimination"}


def _forward_nodes(model: onnx.ModelProto, loss: str = "loss") -> set[int]:
    """Indices of the nodes the loss depends on (the forward pass); the rest is the gradient graph."""
    producer = {o: i for i, n in enumerate(model.graph.node) for o in n.output}
    seen: set[int] = set()
    stack = [producer[loss]]
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        stack.extend(producer[x] for x in model.graph.node[i].input if x in producer)
    return seen


def _copy_for_gradient(model: onnx.ModelProto, groups: list[set[int]], const: set[int], fwd: set[int],
                       suffix: str) -> dict:
    """For each group of forward node indices: copy the members the gradient graph reads (with their ancestors in
    the group or among `const`) before the group's first gradient reader, and point the gradient readers at the
    copies. Returns counts."""
    import copy as _copy
    g = model.graph
    nodes = list(g.node)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output}
    readers: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for x in n.input:
            readers.setdefault(x, []).append(i)
    inserts: dict[int, list] = {}           # node index -> copies to place before it
    redirect: dict[int, dict[str, str]] = {}
    stats = {"groups": 0, "copied_nodes": 0, "gradient_reads_redirected": 0}
    for gi, members in enumerate(groups):
        read = {o: [r for r in readers.get(o, []) if r not in fwd]
                for m in members for o in nodes[m].output}
        read = {o: rs for o, rs in read.items() if rs}
        if not read:
            continue
        first = min(min(rs) for rs in read.values())
        copied: dict[int, object] = {}
        order: list[int] = []

        def visit(i: int) -> None:
            if i in copied or (i not in members and i not in const):
                return
            copied[i] = None
            for x in nodes[i].input:
                if x in producer:
                    visit(producer[x])
            order.append(i)

        for o in read:
            visit(producer[o])
        names = {o: f"{o}{suffix}{gi}" for i in order for o in nodes[i].output}
        new = []
        for i in sorted(order):           # graph order is topological
            c = _copy.deepcopy(nodes[i])
            c.name = f"{c.name}{suffix}{gi}"
            c.input[:] = [names.get(x, x) for x in c.input]
            c.output[:] = [names[o] for o in c.output]
            new.append(c)
        inserts.setdefault(first, []).extend(new)
        for o, rs in read.items():
            for r in rs:
                redirect.setdefault(r, {})[o] = names[o]
                stats["gradient_reads_redirected"] += 1
        stats["groups"] += 1
        stats["copied_nodes"] += len(new)
    out = []
    for i, n in enumerate(nodes):
        out.extend(inserts.get(i, []))
        if i in redirect:
            n.input[:] = [redirect[i].get(x, x) for x in n.input]
        out.append(n)
    del g.node[:]
    g.node.extend(out)
    return stats


def _const_nodes(model: onnx.ModelProto, frozen: set[str], fwd: set[int]) -> set[int]:
    """Forward nodes computed from frozen parameters / initializers / Constant nodes only."""
    const_values = set(frozen) | {i.name for i in model.graph.initializer}
    const: set[int] = set()
    for i, n in enumerate(model.graph.node):
        if i in fwd and all((x in const_values) or x == "" for x in n.input):
            const.add(i)
            const_values.update(n.output)
    return const


def recompute_frozen_in_gradient(model: onnx.ModelProto, frozen: set[str], loss: str = "loss") -> dict:
    """The ExecuTorch pass graph_passes.recompute_frozen_in_backward for ORT's training model: every value computed
    from frozen parameters only (dequantized weights, their transposes) that a gradient node reads is recomputed
    for it. Run the session with RECOMPUTE_SESSION_CONFIG."""
    fwd = _forward_nodes(model, loss)
    const = _const_nodes(model, frozen, fwd)
    return _copy_for_gradient(model, [{i} for i in sorted(const)], const, fwd, "_recompute")


def rematerialize_blocks_onnx(model: onnx.ModelProto, frozen: set[str], every: int = 1, loss: str = "loss") -> dict:
    """Block remat for ORT's training model. Blocks come from the exporter's scoped node names
    ('/step/skip_model/blocks.3/attn/...'); a forward node outside every block (embedding, context, head) is kept.
    The gradient side reads copies of each group's forward values (groups of `every` blocks; the last group is
    kept), recomputed with their in-group ancestors and the frozen-only chains they need. Run the session with RECOMPUTE_SESSION_CONFIG."""
    import re
    fwd = _forward_nodes(model, loss)
    const = _const_nodes(model, frozen, fwd)
    groups: dict[int, set[int]] = {}
    for i, n in enumerate(model.graph.node):
        if i in fwd and i not in const:
            m = re.search(r"/blocks\.(\d+)/", n.name)
            if m:
                groups.setdefault(int(m.group(1)) // every, set()).add(i)
    # the last group's gradients come first: kept, not recomputed (as remat.rematerialize_blocks does)
    stats = _copy_for_gradient(model, [groups[k] for k in sorted(groups)[:-1]], const, fwd, "_remat")
    stats["blocks_found"] = len(groups)
    return stats
