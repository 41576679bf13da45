"""Graph passes on a joint forward-backward ExportedProgram (the output of `_export_forward_backward`).

Each pass rewrites `ep.graph_module` in place, keeps every node's fake value (`meta["val"]`) right, and returns
how many nodes it changed. They are runtime-agnostic aten-level rewrites: the ExecuTorch exporter uses them and so
can any other exporter that starts from a joint graph.

- `replace_empty_permuted`: `aten.empty_permuted` (SiLU backward on 4-D tensors, SANA) has no ExecuTorch kernel.
- `negative_pad_to_slice`: `constant_pad_nd` with negative pads (the backward of SANA's `F.pad`) is a crop; the
  portable kernel rejects negative pads.
- `addmm_to_mm_add`: ExecuTorch's portable `addmm.out` is a naive loop, `mm.out` is optimised (STACK.md: 6x per
  step at 256 wide).
- `pointwise_conv_to_mm`: a 1x1 convolution (SANA's GLUMBConv conv_inverted / conv_point, its 1x1 patch embedder)
  and its backward become matmuls. ExecuTorch's portable `convolution` / `convolution_backward` are naive loops and
  XNNPACK has no convolution backward: at the SANA layout (250M) they made the remat step 20x the eager one.
- `recompute_frozen_in_backward`: a value computed only from frozen constants (a dequantized weight, a transposed
  weight) that the backward reads is recomputed just before its first backward use instead of being kept alive in
  the activation arena from forward to backward.
- `conv_input_grad_as_convolution`: an input-gradient-only `convolution_backward` (a frozen depthwise 3x3: SANA's
  conv_depth) reads the forward's input only for its shape, yet keeps it alive from forward to backward; it becomes
  a convolution of the gradient with the flipped kernel, which does not read it.
- `silu_backward_in_order`: SiLU's backward with no tensor of ones and its products ordered so that fewer
  temporaries are alive at once (it sits where SANA's backward holds the most).
- `transpose_before_cast`: a transpose (or view, or flip) of an integer -> float cast (int8 codes as fp32:
  quantize.py multiplies the scale into the matmul's output, so the cast is the weight a matmul reads) becomes the
  cast of the transposed codes: the transpose copies int8 (a quarter of the bytes) and no fp32 weight is alive twice
  (the cast and its transposed copy) for one matmul.
- `casts_as_dequantize`: the int8 -> fp32 cast of the codes becomes `quantized_decomposed.dequantize_per_tensor` with
  scale 1 and zero point 0 (the same values: (q - 0) * 1.0 is exact), which XNNPACK runs as one vectorized convert
  (xnnpack_partition.MatmulChainPartitioner); and a transpose of int8 codes becomes quantize(transpose(dequantize))
  with the same unit scale, which XNNPACK runs as one int8 transpose. The portable `_to_dim_order_copy` and int8
  `permute_copy` that ran them were 27% and 19% of the 288M FLUX step (benchmarks/results/step_profile.md).
- `pow_as_mul`: pow(x, 2) -> x * x and pow(x, 1) -> x (RMSNorm's square and its backward): the portable
  `pow.Tensor_Scalar` calls std::pow per element (6.7% of the 288M FLUX step, benchmarks/results/step_profile.md),
  the product is one correctly rounded multiply (pow(x, 2) is the same value up to pow's last-bit error).
- `safe_softmax_as_softmax`: the math attention's `_safe_softmax` (softmax, then where(row all -inf, 0, p) with
  its eq / logical_not / any over the scores, in forward, remat and backward) becomes the softmax: the same values
  wherever a row of scores has a finite entry, which every row of an unmasked attention has (4% of the 288M FLUX
  step went to the mask's portable ops).
- `transposed_codes_as_constants` (an option: ExportConfig.transposed_codes): a transpose of frozen int8 codes (the
  backward's W^T, after `transpose_before_cast`) becomes a constant of its own, the codes transposed at export and
  stored beside them in the weights file: the step no longer transposes weights (the portable `permute_copy` of
  int8, slow strided loops), and no transposed copy is alive in the arena; the weights file (mapped, file-backed)
  holds those codes twice.
- `constant_views_as_constants` (run on the edge program after lowering; ExportConfig.constant_views_folded): a frozen
  constant read only through views of one shape (int8 codes unsqueezed for a weight-left bmm, a scale [out, 1]
  squeezed) is stored in that shape, so with external weights the program no longer clones it before every view
  (edge_passes.constant_views_as_copies). Exact: the same bytes in the same order.
- `dynamically_quantized_linears` (an option: ExportConfig.integer_matmuls, off by default): the forward matmuls with
  frozen int8 weights as XNNPACK's dynamically quantized linear (int8 activations rounded at run time; not exact;
  XNNPACK packs the weights into anonymous memory at load: benchmarks/results/step_profile_qd8.md).
- `views_per_use`: a view of a program input (the transpose of a LoRA weight) is a copy in ExecuTorch; shared by a
  forward and a backward op it stays in the arena from one to the other. Each use gets its own view, made just
  before it, and a transpose of a transpose folds into one permute (or none).
"""

from __future__ import annotations

import operator

import torch
from torch.export import ExportedProgram
from torch.fx import Graph, Node

aten = torch.ops.aten


def _fake(node: Node):
    return node.meta.get("val") if isinstance(node, Node) else node


def _insert(g: Graph, target, args, kwargs=None, like: Node | None = None) -> Node:
    """A call_function node (inserted at the graph's current insertion point) with its fake value computed."""
    kwargs = kwargs or {}
    new = g.call_function(target, args, kwargs)
    fargs = torch.fx.node.map_arg(args, _fake)
    fkwargs = torch.fx.node.map_arg(kwargs, _fake)
    leaves = torch.utils._pytree.tree_leaves((fargs, fkwargs, like.meta.get("val") if like is not None else None))
    mode = next(v.fake_mode for v in leaves if isinstance(v, torch.Tensor) and hasattr(v, "fake_mode"))
    with mode:
        new.meta["val"] = target(*fargs, **fkwargs)
    if like is not None:
        for k in ("stack_trace", "nn_module_stack", "source_fn_stack"):
            if k in like.meta:
                new.meta[k] = like.meta[k]
    return new


def _finish(ep: ExportedProgram) -> None:
    ep.graph_module.graph.lint()
    ep.graph_module.recompile()


def _rewrite_nodes(ep: ExportedProgram, targets: tuple, rewrite) -> int:
    """Drive a node-for-node rewrite: for every call of one of `targets`, `rewrite(g, n)` inserts (at n) and returns
    the node that replaces n, or None to leave n as it is. Returns how many nodes were replaced."""
    g = ep.graph_module.graph
    n_fixed = 0
    for n in list(g.nodes):
        if n.op != "call_function" or n.target not in targets:
            continue
        with g.inserting_before(n):
            new = rewrite(g, n)
        if new is None:
            continue
        n.replace_all_uses_with(new)
        g.erase_node(n)
        n_fixed += 1
    _finish(ep)
    return n_fixed


def replace_empty_permuted(ep: ExportedProgram) -> int:
    def rewrite(g, n):
        kw = {k: v for k, v in n.kwargs.items() if k in ("dtype", "layout", "device", "pin_memory")}
        return _insert(g, aten.empty.memory_format, (list(n.args[0]),), kw, like=n)

    n_fixed = _rewrite_nodes(ep, (aten.empty_permuted.default,), rewrite)
    if n_fixed:
        # full_like / empty_like downstream copied the permuted strides into their fake values: make them contiguous
        for n in ep.graph_module.graph.nodes:
            fv = n.meta.get("val")
            if n.op == "call_function" and isinstance(fv, torch.Tensor) and not fv.is_contiguous() \
                    and n.target in (aten.full_like.default, aten.empty_like.default):
                with fv.fake_mode:
                    n.meta["val"] = torch.empty(fv.shape, dtype=fv.dtype, device=fv.device)
        _finish(ep)
    return n_fixed


def negative_pad_to_slice(ep: ExportedProgram) -> int:
    def rewrite(g, n):
        x, pad = n.args[0], list(n.args[1])
        if not all(p <= 0 for p in pad) or not any(p < 0 for p in pad):
            return None
        shape = x.meta["val"].shape
        cur = x
        for i in range(len(pad) // 2):
            dim = len(shape) - 1 - i
            lo, hi = -pad[2 * i], -pad[2 * i + 1]
            if lo or hi:
                cur = _insert(g, aten.slice.Tensor, (cur, dim, lo, shape[dim] - hi), like=n)
        # slice is a strided view; downstream views need a contiguous tensor
        return _insert(g, aten.clone.default, (cur,), {"memory_format": torch.contiguous_format}, like=n)

    return _rewrite_nodes(ep, (aten.constant_pad_nd.default,), rewrite)


def addmm_to_mm_add(ep: ExportedProgram, dialect: str = "aten") -> int:
    """dialect "aten": a core-ATen program (joint graphs, decomposed programs); "edge": an edge program (after
    `to_edge`, whose own decomposition turns linears into addmm: no separate `run_decompositions` needed)."""
    ops = aten
    if dialect == "edge":
        from executorch.exir.dialects._ops import ops as exir_ops
        ops = exir_ops.edge.aten
    elif dialect != "aten":
        raise ValueError(f"addmm_to_mm_add: dialect {dialect!r}, expected 'aten' or 'edge'")

    def rewrite(g, n):
        if n.kwargs.get("beta", 1) != 1 or n.kwargs.get("alpha", 1) != 1:
            return None
        bias, a, b = n.args[:3]
        return _insert(g, ops.add.Tensor, (_insert(g, ops.mm.default, (a, b), like=n), bias), like=n)

    return _rewrite_nodes(ep, (ops.addmm.default,), rewrite)


def _is_pointwise(stride, padding, dilation, transposed, groups, weight) -> bool:
    w = _fake(weight)
    return (isinstance(w, torch.Tensor) and w.dim() == 4 and tuple(w.shape[2:]) == (1, 1) and not transposed
            and groups == 1 and all(s == 1 for s in stride) and all(p == 0 for p in padding)
            and all(d == 1 for d in dilation))


def _contiguous(g, x, like):
    v = _fake(x)
    if v.is_contiguous():
        return x
    return _insert(g, aten.clone.default, (x,), {"memory_format": torch.contiguous_format}, like=like)


def _view(g, src, shape, like):
    return _insert(g, aten.view.default, (_contiguous(g, src, like), shape), like=like)


def _channels_by_positions(g, x, like):
    """x [B, C, H, W] -> [C, B*H*W] (B = 1: a view)."""
    b, c, h, w = _fake(x).shape
    if b != 1:
        x = _insert(g, aten.permute.default, (x, [1, 0, 2, 3]), like=like)
    return _view(g, x, [c, b * h * w], like)


def _from_channels_by_positions(g, y2, b, h, w, like):
    """[C, B*H*W] -> [B, C, H, W], contiguous."""
    c = _fake(y2).shape[0]
    if b == 1:
        return _insert(g, aten.view.default, (y2, [1, c, h, w]), like=like)
    y = _insert(g, aten.permute.default, (_insert(g, aten.view.default, (y2, [c, b, h, w]), like=like),
                                          [1, 0, 2, 3]), like=like)
    return _insert(g, aten.clone.default, (y,), {"memory_format": torch.contiguous_format}, like=like)


def _replace_outputs(g: Graph, n: Node, out: dict[int, Node], pass_name: str) -> None:
    """Replace a multi-output node n (read through getitem) by out[i] for its output i, and erase it."""
    for user in list(n.users):
        if user.op != "call_function" or user.target is not operator.getitem or user.args[1] not in out:
            raise RuntimeError(f"{pass_name}: unexpected use of {n.name}: {user.format_node()}")
        user.replace_all_uses_with(out[user.args[1]])
        g.erase_node(user)
    g.erase_node(n)


def pointwise_conv_to_mm(ep: ExportedProgram) -> int:
    """convolution(x, w [O, I, 1, 1], b) with stride 1, no padding, no groups -> w[O, I] @ x[I, B*H*W] (+ b), and
    its convolution_backward -> grad_x = w.t() @ grad, grad_w = grad @ x.t(), grad_b = sum(grad): what mm_to_bmm
    then hands to XNNPACK. The weight stays on the left (the large operand: mm_to_bmm's weights_left form). Returns
    the number of convolution and convolution_backward nodes replaced."""
    g = ep.graph_module.graph

    def forward(g, n):
        x, w, bias, stride, padding, dilation, transposed, _, groups = n.args[:9]
        if not _is_pointwise(stride, padding, dilation, transposed, groups, w):
            return None
        bsz, _, h, wd = _fake(x).shape
        o, i = _fake(w).shape[:2]
        w2 = _view(g, w, [o, i], n)
        y = _from_channels_by_positions(g, _insert(g, aten.mm.default, (w2, _channels_by_positions(g, x, n)),
                                                   like=n), bsz, h, wd, n)
        if bias is not None:
            y = _insert(g, aten.add.Tensor, (y, _view(g, bias, [o, 1, 1], n)), like=n)
        return y

    n_fixed = _rewrite_nodes(ep, (aten.convolution.default,), forward)
    for n in list(g.nodes):
        if n.op != "call_function" or n.target != aten.convolution_backward.default:
            continue
        grad, x, w, _, stride, padding, dilation, transposed, _, groups, mask = n.args[:11]
        if not _is_pointwise(stride, padding, dilation, transposed, groups, w):
            continue
        bsz, _, h, wd = _fake(x).shape
        o, i = _fake(w).shape[:2]
        with g.inserting_before(n):
            g2 = _channels_by_positions(g, grad, n)
            out = {}
            if mask[0]:
                w2t = _insert(g, aten.permute.default, (_view(g, w, [o, i], n), [1, 0]), like=n)
                out[0] = _from_channels_by_positions(g, _insert(g, aten.mm.default, (w2t, g2), like=n), bsz, h, wd, n)
            if mask[1]:
                x2t = _insert(g, aten.permute.default, (_channels_by_positions(g, x, n), [1, 0]), like=n)
                out[1] = _insert(g, aten.view.default, (_insert(g, aten.mm.default, (g2, x2t), like=n), [o, i, 1, 1]),
                                 like=n)
            if mask[2]:
                out[2] = _insert(g, aten.sum.dim_IntList, (grad, [0, 2, 3]), like=n)
        _replace_outputs(g, n, out, "pointwise_conv_to_mm")
        n_fixed += 1
    g.eliminate_dead_code()
    _finish(ep)
    return n_fixed


def frozen_input_names(ep: ExportedProgram) -> set[str]:
    """Placeholders holding frozen state: parameters without a gradient output, buffers, lifted constants."""
    sig = ep.graph_signature
    trained = set()
    if sig.backward_signature is not None:
        trained = set(sig.backward_signature.gradients_to_parameters.values())
    frozen = {ph for ph, p in sig.inputs_to_parameters.items() if p not in trained}
    frozen |= set(sig.inputs_to_buffers)
    frozen |= set(sig.inputs_to_lifted_tensor_constants)
    return frozen


def recompute_frozen_in_backward(ep: ExportedProgram) -> int:
    """Rematerialise constant-only subgraphs (e.g. codes * scale -> weight -> transpose) for their backward users.

    The backward region is every node after the loss. A constant-only node read there gets one copy of its
    constant-only ancestry inserted before its first backward user; the forward copy then dies after its last
    forward use, so memory planning no longer keeps a float weight alive across the whole step."""
    g = ep.graph_module.graph
    frozen = frozen_input_names(ep)
    nodes = list(g.nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    out_node = nodes[-1]
    loss = out_node.args[0][0]
    const: set[Node] = set()
    for n in nodes:
        if n.op == "placeholder" and n.name in frozen:
            const.add(n)
        elif n.op == "call_function" and n.all_input_nodes and all(a in const for a in n.all_input_nodes):
            const.add(n)
    n_copied = 0
    for n in nodes:
        if n not in const or n.op == "placeholder" or pos[n] > pos[loss]:
            continue
        bwd_users = sorted((u for u in n.users if u.op != "output" and pos.get(u, -1) > pos[loss]),
                           key=pos.get)
        if not bwd_users:
            continue
        copies: dict[Node, Node] = {}
        with g.inserting_before(bwd_users[0]):
            twin = recompute_copier(g, copies, reuse=lambda x: x.op == "placeholder")(n)
        n_copied += len(copies)
        for u in bwd_users:
            u.replace_input_with(n, twin)
    _finish(ep)
    return n_copied


def recompute_copier(g: Graph, copies: dict[Node, Node], reuse):
    """copy(x): a node computing x again, from copies of its inputs made the same way (memoized in `copies`,
    inserted at g's insertion point), stopping at the nodes for which reuse(node) holds: those are read as they are."""
    def copy(x):
        if not isinstance(x, Node) or reuse(x):
            return x
        if x not in copies:
            new = g.call_function(x.target, torch.fx.node.map_arg(x.args, copy), torch.fx.node.map_arg(x.kwargs, copy))
            new.meta = dict(x.meta)
            copies[x] = new
        return copies[x]
    return copy


def tag_delegate_constants(ep: ExportedProgram, tag: str) -> int:
    """Mark every lifted parameter, buffer and constant for ExecuTorch's external data file `tag`: the weights a
    delegate (XNNPACK) takes go to that file instead of its blob in the .pte (what executorch's
    delegate_external_constants_pass_unlifted does on an unlifted module, here without exporting again). Returns how
    many inputs were marked."""
    sig = ep.graph_signature
    names = set(sig.inputs_to_parameters) | set(sig.inputs_to_buffers) | set(sig.inputs_to_lifted_tensor_constants)
    n = 0
    for node in ep.graph_module.graph.nodes:
        if node.op == "placeholder" and node.name in names:
            node.meta.setdefault("custom", {})["delegate_constant_tag"] = tag
            n += 1
    return n


def remove_unused_constants(ep: ExportedProgram) -> int:
    """Drop frozen buffers / lifted constants nothing reads (after dead-code elimination). ExecuTorch drops unused
    parameters itself but keeps unused buffers: e.g. the int8 codes of the last kept double block's text-stream
    weights, whose output the head never reads. Returns the number of inputs removed."""
    import copy

    from torch.export.graph_signature import InputKind
    g = ep.graph_module.graph
    for n in list(g.nodes):     # metadata asserts count as side effects and would keep dead dequant chains alive
        if n.op == "call_function" and n.target == aten._assert_tensor_metadata.default:
            g.erase_node(n)
    g.eliminate_dead_code()
    placeholders = {n.name: n for n in g.nodes if n.op == "placeholder"}
    sig = copy.deepcopy(ep.graph_signature)
    removed = 0
    for spec in list(sig.input_specs):
        if spec.kind not in (InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            continue
        node = placeholders.get(spec.arg.name)
        if node is None or node.users:
            continue
        sig.input_specs.remove(spec)
        ep.state_dict.pop(spec.target, None)
        ep.constants.pop(spec.target, None)
        g.erase_node(node)
        removed += 1
    ep._graph_signature = sig
    _finish(ep)
    return removed


def constant_views_as_constants(ep: ExportedProgram) -> int:
    """A frozen constant (buffer, lifted constant, or a parameter with no gradient output) every use of which is a
    view to one shape (aten view / edge view_copy: the unsqueeze mm_to_bmm puts before a weight-left bmm, the
    squeeze of an int8 scale [out, 1] to [out]) is stored in that shape instead: the same bytes in the same order
    (a view of a contiguous tensor), the views removed. With external weights each such view read a clone of the
    constant (edge_passes.constant_views_as_copies: 690 clones per step of the 288M FLUX step, int8 codes and scales
    copied before every use); the values are the same bit for bit. Returns the number of constants reshaped."""
    from torch.export.graph_signature import InputKind, OutputKind
    sig = ep.graph_signature
    trained = {s.target for s in sig.output_specs if s.kind == OutputKind.GRADIENT_TO_PARAMETER}
    frozen = {s.arg.name: s.target for s in sig.input_specs
              if s.kind in (InputKind.BUFFER, InputKind.CONSTANT_TENSOR)
              or (s.kind == InputKind.PARAMETER and s.target not in trained)}
    view_targets = {aten.view.default, aten._unsafe_view.default}
    try:
        from executorch.exir.dialects._ops import ops as exir_ops
        view_targets.add(exir_ops.edge.aten.view_copy.default)
    except ImportError:         # pragma: no cover - the aten dialect alone
        pass
    g = ep.graph_module.graph
    n_fixed = 0
    for n in list(g.nodes):
        if n.op != "placeholder" or n.name not in frozen or not n.users:
            continue
        users = list(n.users)
        if any(u.op != "call_function" or u.target not in view_targets for u in users):
            continue
        shapes = {tuple(u.meta["val"].shape) for u in users}
        if len(shapes) != 1:
            continue
        target = frozen[n.name]
        table = ep.constants if target in ep.constants else ep.state_dict
        t = table[target]
        if not t.is_contiguous():
            continue
        new_t = t.reshape(next(iter(shapes)))
        table[target] = torch.nn.Parameter(new_t, requires_grad=False) if isinstance(t, torch.nn.Parameter) \
            else new_t
        n.meta["val"] = users[0].meta["val"]
        if "tensor_meta" in users[0].meta:
            n.meta["tensor_meta"] = users[0].meta["tensor_meta"]
        for u in users:
            u.replace_all_uses_with(n)
            g.erase_node(u)
        n_fixed += 1
    _finish(ep)
    return n_fixed


def _transposed_source(node) -> Node | None:
    """x when node is x.t() / x.permute(1, 0) of a 2-D x, else None."""
    if not isinstance(node, Node) or node.op != "call_function":
        return None
    if node.target == aten.t.default or (node.target == aten.permute.default and list(node.args[1]) == [1, 0]):
        src = node.args[0]
        return src if isinstance(src, Node) and getattr(_fake(src), "dim", lambda: 0)() == 2 else None
    return None


def _numel(node) -> int:
    v = _fake(node)
    return v.numel() if isinstance(v, torch.Tensor) else 0


def mm_to_bmm(ep: ExportedProgram, weights_left: bool = True) -> int:
    """mm(a, b) -> squeeze(bmm(a[None], b[None]), 0). XNNPACK's partitioner takes bmm with two dynamic operands but
    not a 2-D mm whose weight is not a plain parameter (in the joint graph every weight reaches mm through a
    transpose, and the backward's mm are activation x activation): with this rewrite the matmuls run in XNNPACK.

    weights_left: a matmul whose right operand is the larger one (a weight: the forward's x @ w.t(), the backward's
    g @ w) becomes (w @ x.t()).t() / (w.t() @ g.t()).t(). XNNPACK's bmm packs its right operand into the delegate
    workspace, which every delegate call shares and which stays as large as the largest call needed for the whole
    run, outside the planned arena (a transpose chained into the delegate lands there too): at the 288M FLUX layout
    the remat program's RssAnon went from 141.7 to 72.3 MiB with this rewrite (benchmarks/device_footprint.py
    --configs headline; device_footprint_before_workspace_fix.md@eb714ee, in git). The activations (tokens x features) are transposed and packed instead; the backward's w.t() is a separate
    transpose whose output the memory plan places (and frees) like any other tensor."""
    def transposed_product(g, n, left, a):
        """(left @ a.t()).t(), the right operand a.t() the small one."""
        at = _insert(g, aten.permute.default, (a, [1, 0]), like=n)
        r = _insert(g, aten.bmm.default, (_insert(g, aten.unsqueeze.default, (left, 0), like=n),
                                          _insert(g, aten.unsqueeze.default, (at, 0), like=n)), like=n)
        return _insert(g, aten.permute.default, (_insert(g, aten.squeeze.dim, (r, 0), like=n), [1, 0]), like=n)

    def rewrite(g, n):
        a, b = n.args
        if weights_left and _numel(b) > _numel(a):
            w = _transposed_source(b)
            if w is not None:                               # forward: x @ w.t() = (w @ x.t()).t()
                return transposed_product(g, n, w, a)
            # backward: g @ w = (w.t() @ g.t()).t(); w.t() is a separate transpose into the planned arena
            return transposed_product(g, n, _insert(g, aten.permute.default, (b, [1, 0]), like=n), a)
        a3 = _insert(g, aten.unsqueeze.default, (a, 0), like=n)
        b3 = _insert(g, aten.unsqueeze.default, (b, 0), like=n)
        return _insert(g, aten.squeeze.dim, (_insert(g, aten.bmm.default, (a3, b3), like=n), 0), like=n)

    n = _rewrite_nodes(ep, (aten.mm.default,), rewrite)
    ep.graph_module.graph.eliminate_dead_code()           # the weights' transposes no longer read
    _finish(ep)
    return n


_CASTS = (aten._to_copy.default, aten.to.dtype)
# ops that only move or reshape elements: done on the int8 codes they give the same values, cast after
_MOVES = (aten.permute.default, aten.t.default, aten.view.default, aten._unsafe_view.default, aten.reshape.default,
          aten.squeeze.dim, aten.unsqueeze.default, aten.flip.default)


def _integer_to_float_cast(node) -> Node | None:
    """x when node casts an integer tensor x to a floating one (and does nothing else), else None."""
    if not isinstance(node, Node) or node.op != "call_function" or node.target not in _CASTS:
        return None
    src, out = (node.args[0] if node.args else None), _fake(node)
    fsrc = _fake(src)
    if not isinstance(fsrc, torch.Tensor) or not isinstance(out, torch.Tensor):
        return None
    if fsrc.dtype.is_floating_point or not out.dtype.is_floating_point or fsrc.shape != out.shape:
        return None
    extra = set(node.kwargs) - {"dtype", "layout", "device", "memory_format"}
    return src if not extra and len(node.args) <= 2 else None


def transpose_before_cast(ep: ExportedProgram) -> int:
    """move(cast(x), ...) -> cast(move(x, ...)) for an integer x and a move in _MOVES (a transpose, view or flip),
    repeated until no cast feeds a move: the transposes (and a 1x1 convolution's weight views, a depthwise
    kernel's flip) copy the int8 codes, and the cast writes the fp32 weight the matmul reads (module docstring).
    Returns the number of moves rewritten."""
    def rewrite(g, n):
        src = _integer_to_float_cast(n.args[0])
        if src is None:
            return None
        cast = n.args[0]
        moved = _insert(g, n.target, (src, *n.args[1:]), dict(n.kwargs), like=n)
        return _insert(g, cast.target, (moved, *cast.args[1:]), dict(cast.kwargs), like=n)

    total = 0
    while True:
        n = _rewrite_nodes(ep, _MOVES, rewrite)
        ep.graph_module.graph.eliminate_dead_code()
        _finish(ep)
        total += n
        if not n:
            return total


def pow_as_mul(ep: ExportedProgram) -> int:
    """pow.Tensor_Scalar(x, 2) -> mul(x, x); pow.Tensor_Scalar(x, 1) -> x (module docstring). Returns the number of
    pow nodes replaced."""
    def rewrite(g, n):
        x, e = n.args[:2]
        if not isinstance(x, Node) or isinstance(e, bool) or e not in (1, 2) or _fake(n).dtype != _fake(x).dtype:
            return None
        return x if e == 1 else _insert(g, aten.mul.Tensor, (x, x), like=n)

    return _rewrite_nodes(ep, (aten.pow.Tensor_Scalar,), rewrite)


def _is_zero(x) -> bool:
    """A literal 0, or a full / full_like / scalar_tensor of 0."""
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return x == 0
    if _call(x, aten.full_like.default) or _call(x, aten.full.default):
        return x.args[1] == 0
    if _call(x, aten.scalar_tensor.default):
        return x.args[0] == 0
    return False


def _all_minus_inf_rows(cond) -> bool:
    """cond is logical_not(any(logical_not(eq(s, -inf)), dim, keepdim=True)): the rows of s that are all -inf."""
    if not _call(cond, aten.logical_not.default) or not _call(cond.args[0], aten.any.dim):
        return False
    inner = cond.args[0].args[0]
    return (_call(inner, aten.logical_not.default) and _call(inner.args[0], aten.eq.Scalar)
            and inner.args[0].args[1] == float("-inf"))


def safe_softmax_as_softmax(ep: ExportedProgram) -> int:
    """where(rows all -inf, 0, y) -> y for the mask of a `_safe_softmax` (module docstring): its forward output and
    its backward's gradient. Returns the number of where nodes replaced."""
    def rewrite(g, n):
        cond, a, b = n.args[:3]
        if not _all_minus_inf_rows(cond) or not _is_zero(a) or not isinstance(b, Node):
            return None
        if tuple(_fake(b).shape) != tuple(_fake(n).shape) or _fake(b).dtype != _fake(n).dtype:
            return None
        return b

    n_fixed = _rewrite_nodes(ep, (aten.where.self,), rewrite)
    ep.graph_module.graph.eliminate_dead_code()
    _finish(ep)
    return n_fixed


_UNIT_INT8 = (1.0, 0, -128, 127, torch.int8)        # scale 1, zero point 0: int8 <-> fp32 exactly


def casts_as_dequantize(ep: ExportedProgram) -> dict:
    """cast(x int8 -> fp32) -> quantized_decomposed.dequantize_per_tensor(x, 1.0, 0, -128, 127, int8), and a
    transpose of int8 codes p(x) -> quantize_per_tensor(p(dequantize_per_tensor(x)), 1.0, 0, ...): the same values
    (module docstring), as ops XNNPACK takes (the transpose as its int8 transpose: a quantized permute whose
    dequantize / quantize XNNPACK folds into the op). Returns {"casts": n, "int8_transposes": m}."""
    import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)
    dq = torch.ops.quantized_decomposed.dequantize_per_tensor.default
    q = torch.ops.quantized_decomposed.quantize_per_tensor.default

    def cast(g, n):
        src = _integer_to_float_cast(n)
        if src is None or _fake(src).dtype != torch.int8 or _fake(n).dtype != torch.float32:
            return None
        return _insert(g, dq, (src, *_UNIT_INT8), like=n)

    def transpose(g, n):
        src = n.args[0]
        if not isinstance(src, Node) or _fake(src).dtype != torch.int8 or _fake(n).dtype != torch.int8:
            return None
        moved = _insert(g, n.target, (_insert(g, dq, (src, *_UNIT_INT8), like=n), *n.args[1:]), like=n)
        return _insert(g, q, (moved, *_UNIT_INT8), like=n)

    return {"casts": _rewrite_nodes(ep, _CASTS, cast),
            "int8_transposes": _rewrite_nodes(ep, (aten.permute.default,), transpose)}


def transposed_codes_as_constants(ep: ExportedProgram) -> int:
    """permute(codes, [1, 0]) / t(codes) of a frozen 2-D int8 placeholder -> a new constant placeholder holding
    codes.t().contiguous() (one per codes tensor, named `<target>_transposed`), placed right after the codes' own
    (module docstring). Returns the number of transposes replaced."""
    import copy

    from torch.export.graph_signature import InputKind, InputSpec, TensorArgument
    g = ep.graph_module.graph
    frozen = frozen_input_names(ep)
    sig = copy.deepcopy(ep.graph_signature)
    spec_of = {s.arg.name: s for s in sig.input_specs if isinstance(s.arg, TensorArgument)}
    made: dict[Node, Node] = {}
    n_fixed = 0
    for n in list(g.nodes):
        src = _transposed_source(n)
        if src is None or src.op != "placeholder" or src.name not in frozen or _fake(src).dtype != torch.int8:
            continue
        if src not in made:
            spec = spec_of[src.name]
            value = ep.state_dict[spec.target] if spec.target in ep.state_dict else ep.constants[spec.target]
            target = f"{spec.target}_transposed"
            ep.constants[target] = value.t().contiguous()
            with g.inserting_after(src):
                ph = g.placeholder(src.name + "_transposed")
            with _fake(src).fake_mode:
                ph.meta["val"] = torch.empty(tuple(reversed(_fake(src).shape)), dtype=torch.int8)
            sig.input_specs.insert(sig.input_specs.index(spec) + 1,
                                   InputSpec(kind=InputKind.CONSTANT_TENSOR, arg=TensorArgument(name=ph.name),
                                             target=target))
            made[src] = ph
        n.replace_all_uses_with(made[src])
        g.erase_node(n)
        n_fixed += 1
    ep._graph_signature = sig
    _finish(ep)
    return n_fixed


def drop_identity_views(ep: ExportedProgram) -> int:
    """Remove `alias` and same-shape `expand` nodes. ExecuTorch materialises them as copies (alias_copy,
    expand_copy), and the ones on attention probabilities [B, H, N, N] are read again by the backward: without this
    pass each attention kept three copies of its probabilities alive from forward to backward."""
    def rewrite(g, n):
        src = n.args[0]
        a, b = (src.meta.get("val") if isinstance(src, Node) else None), n.meta.get("val")
        same = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and tuple(a.shape) == tuple(b.shape)
        return src if same else None

    return _rewrite_nodes(ep, (aten.alias.default, aten.expand.default), rewrite)


def conv_input_grad_as_convolution(ep: ExportedProgram) -> int:
    """convolution_backward(grad, x, w, ...) with output_mask [True, False, False] (w and b frozen), stride 1, dilation
    1, no transposition, padding p <= k - 1, and groups 1 or depthwise (w [C, 1, kh, kw], groups = C) ->
    convolution(grad, w', padding k - 1 - p, same groups), w' = w flipped in both spatial dimensions (and, for groups
    1, with its channel dimensions swapped). Same values; x is no longer read, so the forward's x is freed after its
    forward use (at the SANA layout one [1, 5760, 8, 8] SiLU output per kept block). Returns the number of nodes
    replaced."""
    g = ep.graph_module.graph
    n_fixed = 0
    for n in list(g.nodes):
        if n.op != "call_function" or n.target != aten.convolution_backward.default:
            continue
        grad, x, w, _, stride, padding, dilation, transposed, _, groups, mask = n.args[:11]
        wv, xv = _fake(w), _fake(x)
        if list(mask) != [True, False, False] or transposed or wv.dim() != 4:
            continue
        kernel = list(wv.shape[2:])
        depthwise = wv.shape[1] == 1 and groups == wv.shape[0] == xv.shape[1]
        if not (groups == 1 or depthwise) or any(s != 1 for s in stride) or any(d != 1 for d in dilation) \
                or any(p > k - 1 for p, k in zip(padding, kernel)):
            continue
        users = list(n.users)
        if any(u.op != "call_function" or u.target is not operator.getitem or u.args[1] != 0 for u in users):
            continue
        with g.inserting_before(n):
            flipped = _insert(g, aten.flip.default, (w, [2, 3]), like=n)
            if groups == 1:
                flipped = _insert(g, aten.permute.default, (flipped, [1, 0, 2, 3]), like=n)
            gx = _insert(g, aten.convolution.default,
                         (grad, flipped, None, [1, 1], [k - 1 - p for p, k in zip(padding, kernel)], [1, 1], False,
                          [0, 0], groups), like=n)
        _replace_outputs(g, n, {0: gx}, "conv_input_grad_as_convolution")
        n_fixed += 1
    g.eliminate_dead_code()
    _finish(ep)
    return n_fixed


_VIEW_OPS = (aten.permute.default, aten.t.default, aten.transpose.int, aten.view.default, aten.unsqueeze.default,
             aten.squeeze.dim, aten.expand.default)


def _permutation(n: Node) -> list[int] | None:
    """The dims of a permute / t / transpose node, None for any other node."""
    if n.op != "call_function":
        return None
    if n.target == aten.permute.default:
        return list(n.args[1])
    if n.target == aten.t.default:
        return [1, 0] if _fake(n.args[0]).dim() == 2 else [0]
    if n.target == aten.transpose.int:
        dims = list(range(_fake(n.args[0]).dim()))
        a, b = (d % len(dims) for d in n.args[1:3])
        dims[a], dims[b] = dims[b], dims[a]
        return dims
    return None


def views_per_use(ep: ExportedProgram) -> dict:
    """Two rewrites of views, which ExecuTorch turns into copies:
    - a chain of views of a program input that is not frozen (t(lora_A), view(t(x)), ...) read by several ops is
      repeated before each reader but the first, so that no such copy outlives the op that reads it (the LoRA
      weights' transposes were kept from forward to backward);
    - permute(permute(x, p), q) -> permute(x, p[q]), dropped when that is the identity (the backward's transpose of
      the forward's transpose of a LoRA weight), where the inner permute has no other reader or x is a program
      input: otherwise x would be kept alive beside the inner permute.
    Returns {"repeated": views made, "folded": permutes folded}."""
    g = ep.graph_module.graph
    frozen = frozen_input_names(ep)     # frozen constants: recompute_frozen_in_backward's; with external weights
                                        # each view of one is a copy (edge_passes.constant_views_as_copies)

    def input_view(n) -> bool:
        if not (isinstance(n, Node) and n.op == "call_function" and n.target in _VIEW_OPS
                and isinstance(n.args[0], Node)):
            return False
        src = n.args[0]
        return (src.op == "placeholder" and src.name not in frozen) or input_view(src)

    repeated = 0
    for n in list(g.nodes):
        if not input_view(n) or len(n.users) < 2:
            continue
        for user in list(n.users)[1:]:
            copies: dict[Node, Node] = {}

            def copy(x: Node) -> Node:
                nonlocal repeated
                if not input_view(x):
                    return x
                if x not in copies:
                    new = g.call_function(x.target, torch.fx.node.map_arg(x.args, copy), dict(x.kwargs))
                    new.meta = dict(x.meta)
                    copies[x] = new
                    repeated += 1
                return copies[x]

            with g.inserting_before(user):
                twin = copy(n)
            user.replace_input_with(n, twin)

    def fold(g, n):
        inner_node = n.args[0]
        inner = _permutation(inner_node) if isinstance(inner_node, Node) else None
        outer = _permutation(n)
        if inner is None or len(inner) != len(outer):
            return None
        src = inner_node.args[0]
        if len(inner_node.users) > 1 and getattr(src, "op", None) != "placeholder":
            return None     # the inner transpose stays alive for its other readers: folding would keep src alive too
        dims = [inner[d] for d in outer]
        return src if dims == list(range(len(dims))) else _insert(g, aten.permute.default, (src, dims), like=n)

    folded = _rewrite_nodes(ep, (aten.permute.default, aten.t.default, aten.transpose.int), fold)
    g.eliminate_dead_code()
    _finish(ep)
    return {"repeated": repeated, "folded": folded}


def _call(n, target) -> bool:
    return isinstance(n, Node) and n.op == "call_function" and n.target == target


def silu_backward_in_order(ep: ExportedProgram) -> int:
    """SiLU's backward as autograd writes it, g * (s * (1 + x * (full_like(x, 1) - s))) with s = sigmoid(x), holds x,
    g, s, a tensor of ones and two temporaries at once where the backward holds the most (SANA's GLUMBConv at the
    start of its block's backward). Rewritten as a = g * s; b = x * (1 - s) (rsub, no ones tensor); out = a * (b + 1),
    in that order: g dies at the first product and s at the second, so at most x, s and two temporaries are alive.
    Same values up to rounding order. Returns the number of SiLU backwards rewritten."""
    def rewrite(g, n):
        grad, m5 = n.args
        if not _call(m5, aten.mul.Tensor):
            m5, grad = grad, m5
        if not _call(m5, aten.mul.Tensor) or len(m5.users) != 1:
            return None
        sig, plus_one = m5.args
        if not _call(sig, aten.sigmoid.default):
            plus_one, sig = sig, plus_one
        if not (_call(sig, aten.sigmoid.default) and _call(plus_one, aten.add.Scalar) and plus_one.args[1] == 1
                and len(plus_one.users) == 1 and _call(plus_one.args[0], aten.mul.Tensor)
                and len(plus_one.args[0].users) == 1):
            return None
        x = sig.args[0]
        m4 = plus_one.args[0]
        one_minus = m4.args[1] if m4.args[0] is x else m4.args[0] if m4.args[1] is x else None
        if not (_call(one_minus, aten.sub.Tensor) and one_minus.args[1] is sig and len(one_minus.users) == 1
                and _call(one_minus.args[0], aten.full_like.default) and one_minus.args[0].args[1] == 1):
            return None
        if not isinstance(grad, Node) or tuple(_fake(grad).shape) != tuple(_fake(x).shape):
            return None
        a = _insert(g, aten.mul.Tensor, (grad, sig), like=n)
        b = _insert(g, aten.mul.Tensor, (x, _insert(g, aten.rsub.Scalar, (sig, 1), like=n)), like=n)
        return _insert(g, aten.mul.Tensor, (a, _insert(g, aten.add.Scalar, (b, 1), like=n)), like=n)

    n_fixed = _rewrite_nodes(ep, (aten.mul.Tensor,), rewrite)
    ep.graph_module.graph.eliminate_dead_code()
    _finish(ep)
    return n_fixed


# ------------------------------------------------------------------------------------------------ qd8 (an option)
_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)
QD8_RANGE = (-128, 127)                 # the codes' range (quantize.py: symmetric, qmin -128) and the activations'


def _frozen_codes(w, frozen: set[str], shape: tuple) -> Node | None:
    """The frozen int8 codes placeholder when w is cast(codes) seen through views as an fp32 weight of `shape`
    [O, I] (a 1x1 convolution's codes [O, I, 1, 1] viewed as [O, I]: pointwise_conv_to_mm), else None."""
    while isinstance(w, Node) and w.op == "call_function" and w.target in _VIEWS:
        w = w.args[0]
    src = _integer_to_float_cast(w)
    if not isinstance(src, Node) or src.op != "placeholder" or src.name not in frozen:
        return None
    if _fake(src).dtype != torch.int8 or _fake(w).dtype != torch.float32:
        return None
    o, i = shape
    return src if _fake(src).numel() == o * i and _fake(src).shape[0] == o else None


def _forward_weight_matmul(n: Node, frozen: set[str]):
    """(x, codes, orientation) when the matmul n multiplies an activation x by a frozen int8 weight W [O, I] as a
    forward linear does, else None. Orientations: "x_wt": mm(x [N, I], t(W)) (a linear); "w_x": mm(W, x [I, P]) (a
    1x1 convolution over channels x positions, pointwise_conv_to_mm); "bx_wt": bmm(x [B, N, I], expand(t(W), [B, I,
    O])) (a linear of a 3-D non-contiguous input, as matmul decomposes it)."""
    a, b = n.args[:2]
    if not isinstance(a, Node) or not isinstance(b, Node):
        return None
    if n.target == aten.mm.default:
        w = _transposed_source(b)
        if w is not None:
            codes = _frozen_codes(w, frozen, tuple(_fake(w).shape))
            if codes is not None and a.name not in frozen:
                return a, codes, "x_wt"
        if _fake(a).dim() == 2:
            codes = _frozen_codes(a, frozen, tuple(_fake(a).shape))
            if codes is not None and b.name not in frozen:
                return b, codes, "w_x"
        return None
    if n.target == aten.bmm.default:
        e = b
        while isinstance(e, Node) and e.op == "call_function" and e.target in _VIEWS:
            e = e.args[0]
        if not (isinstance(e, Node) and e.op == "call_function" and e.target == aten.expand.default):
            return None
        w = _transposed_source(e.args[0])
        if w is None or tuple(_fake(b).shape[1:]) != tuple(reversed(_fake(w).shape)):
            return None
        codes = _frozen_codes(w, frozen, tuple(_fake(w).shape))
        if codes is not None and a.name not in frozen:
            return a, codes, "bx_wt"
    return None


def dynamically_quantized_linears(ep: ExportedProgram, external_tag: str | None = None,
                                  orientations: tuple[str, ...] = ("x_wt", "w_x", "bx_wt")) -> dict:
    """ExportConfig(integer_matmuls="qd8"): every forward matmul with a frozen int8 weight (_forward_weight_matmul:
    mm(x, t(cast(codes))), a 1x1 convolution's mm(cast(codes), x) and a 3-D linear's bmm(x, expand(t(cast(codes))));
    the forward's and, with remat, its recomputed copy in backward) becomes XNNPACK's dynamically quantized
    linear: linear(dequantize(quantize(x, choose_qparams(x))), dequantize_per_channel(codes, 1, 0)), the pattern
    ExecuTorch's XNNPACK partitioner (LinearConfig, DYNAMIC_QUANT) lowers to one qd8-f32-qc8w fully connected
    operator (activations quantized to int8 at run time, int8 weights used as integers; the per-channel scale stays
    on the output: quantize.py's `(x @ codes.T) * s` multiply is left as it is, the kernel's channel scales are 1).

    Not exact: the activations are rounded to 8 bits (XNNPACK picks their range per row at run time). The input
    gradient (grad_y * s) @ float(codes) in backward stays an fp32 matmul of the cast codes: the kernel has no
    transposed-weight form, and its weights would be packed a second time. A 1x1 convolution's product (weight on the
    left, channels x positions) becomes the linear of the transposed activation, transposed back: two activation
    transposes (XNNPACK permutes) per convolution that the fp32 program does not have.

    XNNPACK takes its weights as constants it owns and packs them into its own (anonymous) memory at load; a
    partition cannot share a placeholder, so each linear gets its own constant placeholder of the codes (the same
    tensor; the delegate data is keyed by the bytes' SHA-256, so the file holds them once beside the top-level
    codes the backward casts), tagged `external_tag` (ExecuTorch's delegate constant tag: into the weights file, not
    the .pte), and its own unit-scale / zero-point constants. `orientations`: which of _forward_weight_matmul's
    shapes are rewritten (all by default). Returns {"linears": n, "constants": m}."""
    import copy

    import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)
    from torch.export.graph_signature import InputKind, InputSpec, TensorArgument
    qd = torch.ops.quantized_decomposed
    lo, hi = QD8_RANGE
    g = ep.graph_module.graph
    frozen = frozen_input_names(ep)
    sig = copy.deepcopy(ep.graph_signature)
    spec_of = {s.arg.name: s for s in sig.input_specs if isinstance(s.arg, TensorArgument)}
    last = {}                                   # codes placeholder -> the last placeholder inserted after it
    made = {"linears": 0, "constants": 0}

    def constant(codes: Node, name: str, value: torch.Tensor, tag: str | None) -> Node:
        anchor = last.get(codes, codes)
        target = f"{spec_of[codes.name].target}_{name}"
        ep.constants[target] = value
        with g.inserting_after(anchor):
            ph = g.placeholder(f"{codes.name}_{name}")
        with _fake(codes).fake_mode:
            ph.meta["val"] = torch.empty(value.shape, dtype=value.dtype)
        if tag is not None:
            ph.meta.setdefault("custom", {})["delegate_constant_tag"] = tag
        anchor_spec = spec_of[anchor.name]
        spec = InputSpec(kind=InputKind.CONSTANT_TENSOR, arg=TensorArgument(name=ph.name), target=target)
        sig.input_specs.insert(sig.input_specs.index(anchor_spec) + 1, spec)
        spec_of[ph.name] = spec
        last[codes] = ph
        made["constants"] += 1
        return ph

    for n in list(g.nodes):
        if n.op != "call_function" or n.target not in (aten.mm.default, aten.bmm.default):
            continue
        found = _forward_weight_matmul(n, frozen)
        if found is None or _fake(found[0]).dtype != torch.float32 or found[2] not in orientations:
            continue
        x, codes, orientation = found
        o = _fake(codes).shape[0]
        i = _fake(codes).numel() // o
        spec = spec_of[codes.name]
        value = ep.state_dict[spec.target] if spec.target in ep.state_dict else ep.constants[spec.target]
        k = made["linears"]
        w = constant(codes, f"qd8_{k}", value.detach().reshape(o, i), external_tag)
        s = constant(codes, f"qd8_{k}_scale", torch.ones(o), None)
        z = constant(codes, f"qd8_{k}_zero_point", torch.zeros(o, dtype=torch.int64), None)
        with g.inserting_before(n):
            if orientation == "w_x":                # y = W @ x = linear(x.T, W).T
                x = _insert(g, aten.permute.default, (x, [1, 0]), like=n)
            elif orientation == "bx_wt":            # y = x @ W.T per batch = linear(x [B*N, I], W) as [B, N, O]
                x = _insert(g, aten.reshape.default, (x, [-1, i]), like=n)
            qp = _insert(g, qd.choose_qparams.tensor, (x, lo, hi, torch.finfo(torch.float32).eps, torch.int8), like=n)
            scale = _insert(g, operator.getitem, (qp, 0), like=n)
            zero = _insert(g, operator.getitem, (qp, 1), like=n)
            xq = _insert(g, qd.quantize_per_tensor.tensor, (x, scale, zero, lo, hi, torch.int8), like=n)
            xdq = _insert(g, qd.dequantize_per_tensor.tensor, (xq, scale, zero, lo, hi, torch.int8), like=n)
            wdq = _insert(g, qd.dequantize_per_channel.default, (w, s, z, 0, lo, hi, torch.int8), like=n)
            if external_tag is not None:        # XNNPACK serializes the weight under its dequantize node
                wdq.meta.setdefault("custom", {})["delegate_constant_tag"] = external_tag
            y = _insert(g, aten.linear.default, (xdq, wdq), like=n)
            if orientation == "w_x":
                y = _insert(g, aten.permute.default, (y, [1, 0]), like=n)
            elif orientation == "bx_wt":
                y = _insert(g, aten.view.default, (y, list(_fake(n).shape)), like=n)
        n.replace_all_uses_with(y)
        g.erase_node(n)
        made["linears"] += 1
    ep._graph_signature = sig
    g.eliminate_dead_code()
    _finish(ep)
    return made
