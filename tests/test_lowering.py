"""Joint-graph and lowering rewrites that must not change what the program computes:
graph_passes.pointwise_conv_to_mm (1x1 convolutions and their backward as matmuls), lowering.checked_legalize
(partition lowering without a whole-graph copy per partition) and lowering.pruned_xnnpack_passes (XNNPACK's
preprocess passes skipped on partitions without the ops they rewrite: the same program bytes)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

pytest.importorskip("executorch")


class _PointwiseNet(nn.Module):
    """GLUMBConv's shape of use: a frozen 1x1 conv with bias, a trainable 1x1 conv without, a depthwise 3x3 between
    (not pointwise: must stay a convolution), a trained scale in front (so the frozen convs' input gradients are
    needed); the loss is a mean of squares."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.frozen = nn.Conv2d(6, 8, 1)
        self.depth = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.trained = nn.Conv2d(8, 5, 1, bias=False)
        self.scale = nn.Parameter(torch.ones(6, 1, 1))        # trained: the frozen convs' input gradients are needed
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        for p in (*self.frozen.parameters(), *self.depth.parameters()):
            p.requires_grad_(False)

    def forward(self, x):
        y = self.trained(torch.nn.functional.silu(self.depth(self.frozen(x.permute(0, 3, 1, 2) * self.scale))))
        return ((y - 0.5) ** 2).mean()


def _joint(net, x):
    from torch.export.experimental import _export_forward_backward
    with torch.no_grad():
        ep = torch.export.export(net, (x,), strict=False)
    return _export_forward_backward(ep)


def _run_joint(ep, x) -> list:
    """The joint graph's outputs (loss, then gradients), its frozen and trained state taken from the program."""
    from torch.export.graph_signature import InputKind
    args = []
    for spec in ep.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            args.append(x)
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            args.append(ep.constants[spec.target])
        else:
            args.append(ep.state_dict[spec.target])
    return list(ep.graph_module(*args))


def _targets(ep) -> list:
    return [n.target for n in ep.graph_module.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("batch", [1, 3])
def test_pointwise_convolutions_become_matmuls_with_the_same_loss_and_gradients(batch):
    from export.graph_passes import pointwise_conv_to_mm
    aten = torch.ops.aten
    net = _PointwiseNet()
    x = torch.randn(batch, 5, 4, 6, generator=torch.Generator().manual_seed(1))   # channels last, as SANA's tokens
    ep = _joint(net, x)
    before = _run_joint(ep, x)
    n = pointwise_conv_to_mm(ep)
    after = _run_joint(ep, x)
    targets = _targets(ep)
    assert n == 4                           # two forward convolutions, two backward (frozen: input grad only)
    assert targets.count(aten.convolution.default) == 1            # the depthwise 3x3 stays a convolution
    assert targets.count(aten.convolution_backward.default) == 1
    assert targets.count(aten.mm.default) >= 4
    for a, b in zip(before, after):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7), (a, b)
    net.zero_grad()
    loss = net(x)
    loss.backward()
    assert torch.allclose(after[0], loss, rtol=1e-5)
    grads = dict(zip([s.target for s in ep.graph_signature.output_specs[1:]], after[1:]))
    assert set(grads) == {"trained.weight", "scale"}
    assert torch.allclose(grads["trained.weight"], net.trained.weight.grad, rtol=1e-5, atol=1e-7)   # grad @ x.t()
    assert torch.allclose(grads["scale"], net.scale.grad, rtol=1e-5, atol=1e-7)     # through w.t() @ grad


def test_in_topological_order_sees_a_use_before_its_definition():
    from export.lowering import in_topological_order
    gm = torch.fx.symbolic_trace(lambda x: (x + 1) * 2)
    assert in_topological_order(gm)
    add = next(n for n in gm.graph.nodes if n.op == "call_function")
    gm.graph.output_node().append(add)          # the add now comes after its user and the output
    assert not in_topological_order(gm)


class _TwoOutputs(nn.Module):
    """XNNPACK fuses the linear and its epilogue into one partition with two outputs; its order needs no repair."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        h = self.a(x)
        return torch.sigmoid(h) * self.b(h) + h, h.exp()


class _UserBetween(nn.Module):
    """XNNPACK merges the two independent linears into one partition; the cumsum (portable) reads the first one's
    output and sits between them, so the fused call placed after the second breaks the order: legalize runs."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        e = torch.cumsum(self.a(x), 0)
        return e, self.b(x)


@pytest.mark.parametrize("net_cls,legalized", [(_TwoOutputs, 0), (_UserBetween, 1)])
def test_checked_legalize_lowers_to_the_same_program_results(net_cls, legalized):
    """XNNPACK's own partitioner (large fused partitions) under checked_legalize: the program gives what the same
    lowering without it gives; the whole-graph legalize runs only where a partition broke the order."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

    from export.lowering import to_edge_lowered
    torch.manual_seed(0)
    net = net_cls().eval()
    x = torch.randn(3, 8)
    plain = to_edge_transform_and_lower(torch.export.export(net, (x,)),
                                        partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    edge, stats = to_edge_lowered(torch.export.export(net, (x,)), [XnnpackPartitioner()])
    checked = edge.to_executorch().buffer
    assert (stats["checked"], stats["legalized"]) == (1, legalized)
    out_plain = _load_for_executorch_from_buffer(plain).forward((x,))
    out_checked = _load_for_executorch_from_buffer(checked).forward((x,))
    for a, b, c in zip(out_plain, out_checked, net(x)):
        assert torch.equal(a, b) and torch.allclose(b, c, atol=1e-6)


class _PassTriggers(nn.Module):
    """Ops that XNNPACK's preprocess passes rewrite (a convolution and the ReLU fused into it, a constant pad, a max
    pool with its indices' getitem, a cat of 6 inputs split in two, a 1-d convolution made 2-d, a clone) beside a
    bmm on its own."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.conv1d = nn.Conv1d(24, 4, 3)

    def forward(self, x, a, b):
        y = torch.relu(self.conv(x))
        y = torch.nn.functional.max_pool2d(torch.nn.functional.pad(y, (1, 1, 1, 1)), 2)
        z = torch.cat([y * (i + 1) for i in range(6)], 1)
        w = self.conv1d(z.flatten(2)).clone()
        return z, w, torch.bmm(a, b.transpose(1, 2))


def _partitioner(name: str):
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    from export.xnnpack_partition import MatmulChainPartitioner, rounding_only_partitioner
    return {"xnnpack": XnnpackPartitioner, "rounding_only": rounding_only_partitioner,
            "matmul_chain": MatmulChainPartitioner}[name]()


@pytest.mark.parametrize("partitioner", ["xnnpack", "rounding_only", "matmul_chain"])
def test_pruned_xnnpack_passes_lower_to_the_same_program_bytes(partitioner):
    """XNNPACK's own partitioner (one partition of many ops), the inference programs' rounding-only one and the
    training programs' matmul chains: with the passes that have nothing to rewrite skipped, the program's bytes
    are those of the lowering that runs every pass, and some passes were skipped, others run."""
    from export.lowering import to_edge_lowered
    torch.manual_seed(0)
    net = _PassTriggers().eval()
    example = (torch.randn(1, 3, 8, 8), torch.randn(2, 5, 7), torch.randn(2, 6, 7))
    buffers, stats = [], []
    for prune in (False, True):
        edge, s = to_edge_lowered(torch.export.export(net, example), [_partitioner(partitioner)], prune_passes=prune)
        buffers.append(edge.to_executorch().buffer)
        stats.append(s)
    assert "passes_skipped" not in stats[0]                     # not pruned: every pass ran, nothing counted
    assert stats[1]["passes_skipped"] > 0 and stats[1]["passes_run"] > 0
    assert buffers[1] == buffers[0]


def test_every_pruned_pass_is_one_xnnpack_runs_and_the_unlisted_ones_always_run():
    """lowering._xnnpack_pass_ops names passes of this ExecuTorch's XNNPACK pass list (a renamed pass would silently
    stop being pruned), and leaves out the five whose rewrites are not tied to a fixed op set."""
    from executorch.backends.xnnpack._passes import XNNPACKPassManager

    from export.lowering import _xnnpack_pass_ops
    default = [p.__name__ for p in XNNPACKPassManager(None).passes]
    assert set(_xnnpack_pass_ops()) <= set(default)
    assert set(default) - set(_xnnpack_pass_ops()) == {"ConvertToUpsampleBilinear2d", "ConvertToLinearPass",
                                                        "ConvertToSDPAPass", "ConstPropPass",
                                                        "ChannelsLastTaggedReshapePass"}


def _forward_and_backward(ep) -> tuple[set, set]:
    """The joint graph's call nodes before and after the loss (the first output)."""
    nodes = list(ep.graph_module.graph.nodes)
    loss = nodes[-1].args[0][0]
    at = nodes.index(loss)
    calls = [n for n in nodes if n.op == "call_function"]
    return {n for n in calls if nodes.index(n) <= at}, {n for n in calls if nodes.index(n) > at}


def _assert_same(before, after):
    for a, b in zip(before, after):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7), (a, b)


@pytest.mark.parametrize("batch", [1, 3])
def test_input_gradient_convolutions_leave_the_forward_input_unread_by_the_backward(batch):
    """A frozen convolution's backward (input gradient only) as a convolution with the flipped kernel: same loss and
    gradients, and the tensor the forward convolved is read by no backward op (freed after the forward)."""
    from export.graph_passes import conv_input_grad_as_convolution, replace_empty_permuted, silu_backward_in_order
    aten = torch.ops.aten
    net = _PointwiseNet()
    x = torch.randn(batch, 5, 4, 6, generator=torch.Generator().manual_seed(2))
    ep = _joint(net, x)
    replace_empty_permuted(ep)
    before = _run_joint(ep, x)
    conv_inputs = {n.args[0] for n in ep.graph_module.graph.nodes if n.target == aten.convolution.default
                   and n.args[1].name in ("p_frozen_weight", "p_depth_weight")}          # the frozen ones
    fwd, bwd = _forward_and_backward(ep)
    assert any(u in bwd for c in conv_inputs for u in c.users)          # before: the backward reads them
    ones_before = _targets(ep).count(aten.full_like.default)
    assert conv_input_grad_as_convolution(ep) == 2      # the depthwise 3x3 and the frozen 1x1 (groups 1)
    assert silu_backward_in_order(ep) == 1               # SiLU's backward: no ones tensor
    _assert_same(before, _run_joint(ep, x))
    nodes = list(ep.graph_module.graph.nodes)
    assert [n.args[-1] for n in nodes if n.target == aten.convolution_backward.default] == [[True, True, False]]
    assert _targets(ep).count(aten.full_like.default) == ones_before - 1    # the loss's seed remains
    fwd, bwd = _forward_and_backward(ep)
    assert not any(u in bwd for c in conv_inputs for u in c.users if c.op == "call_function")


class _LoraLinear(nn.Module):
    """x @ W.t() + (x @ A.t()) @ B.t() with W frozen, A and B trained: the LoRA form whose weight transposes the
    forward and the backward both read."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w = nn.Parameter(torch.randn(12, 8, generator=g), requires_grad=False)
        self.a = nn.Parameter(torch.randn(4, 8, generator=g) * 0.3)
        self.b = nn.Parameter(torch.randn(12, 4, generator=g) * 0.3)

    def forward(self, x):
        y = x @ self.w.t() + (x @ self.a.t()) @ self.b.t()
        return (y.tanh() ** 2).mean()


def test_views_of_inputs_are_made_per_use_and_transposes_of_transposes_fold():
    from export.graph_passes import _VIEW_OPS, _permutation, views_per_use
    net = _LoraLinear()
    x = torch.randn(6, 8, generator=torch.Generator().manual_seed(3))
    ep = _joint(net, x)
    before = _run_joint(ep, x)
    placeholders = {n for n in ep.graph_module.graph.nodes if n.op == "placeholder"}

    def shared_input_views():
        fwd, bwd = _forward_and_backward(ep)
        return [n for n in fwd if n.target in _VIEW_OPS and n.args[0] in placeholders
                and any(u in bwd for u in n.users)]

    def permutes_of_permutes():
        return [n for n in ep.graph_module.graph.nodes
                if _permutation(n) is not None and isinstance(n.args[0], torch.fx.Node)
                and _permutation(n.args[0]) is not None]

    assert shared_input_views() and permutes_of_permutes()             # the form the pass exists for
    counts = views_per_use(ep)
    assert counts["repeated"] >= 1 and counts["folded"] >= 2
    assert not shared_input_views() and not permutes_of_permutes()
    _assert_same(before, _run_joint(ep, x))


def test_restore_order_puts_an_input_copy_just_before_its_reader():
    """A node without a debug handle that reads only program inputs (the clone constant_views_as_copies puts before
    a view of an input) goes right before its reader, not to the start where it would stay alive until then."""
    from export.schedule import restore_order

    def f(x, w):
        a = x + 1
        b = a * 2
        c = b - 3
        return c @ w.clone()

    gm = torch.fx.symbolic_trace(f)
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    clone = next(n for n in gm.graph.nodes if n.op == "call_method" and n.target == "clone")
    clone.op, clone.target = "call_function", torch.ops.aten.clone.default
    for i, n in enumerate(calls):
        n.meta["debug_handle"] = i + 1                  # the clone has none, as a pass-made node
    first = calls[0]
    first.prepend(clone)                                # hoisted to the start, as lowering leaves it
    gm.recompile()
    restore_order(gm)
    order = [n for n in gm.graph.nodes if n.op == "call_function"]
    matmul = order[-1]
    assert order[-2] is clone and clone in matmul.all_input_nodes
    x, w = torch.randn(3, 4), torch.randn(4, 2)
    assert torch.allclose(gm(x, w), f(x, w))


def test_a_bad_all_passes_switch_is_refused_in_one_line_before_compile_starts(tmp_path, monkeypatch, capsys):
    """$DITSKIP_EDGE_XNNPACK_ALL_PASSES other than 0 / 1 (or unset): compile exits 2 with one line, writing nothing."""
    from compiler.cli import main
    from export.lowering import ENV_ALL_PASSES
    monkeypatch.setenv(ENV_ALL_PASSES, "yes")
    assert main(["compile", "--model", "flux-tiny", "--prompt", "a photo of sks toy", "--out", str(tmp_path / "b"),
                 "--json"]) == 2
    err = capsys.readouterr().err
    assert ENV_ALL_PASSES in err and err.count("\n") == 1
    assert not (tmp_path / "b").exists()
