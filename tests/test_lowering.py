"""Joint-graph and lowering rewrites that must not change what the program computes:
graph_passes.pointwise_conv_to_mm (1x1 convolutions and their backward as matmuls) and lowering.checked_legalize
(partition lowering without a whole-graph copy per partition)."""

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
    assert stats == {"checked": 1, "legalized": legalized}
    out_plain = _load_for_executorch_from_buffer(plain).forward((x,))
    out_checked = _load_for_executorch_from_buffer(checked).forward((x,))
    for a, b, c in zip(out_plain, out_checked, net(x)):
        assert torch.equal(a, b) and torch.allclose(b, c, atol=1e-6)
