"""ExportConfig(integer_matmuls="qd8"): the forward matmuls with frozen int8 weights as XNNPACK's dynamically
quantized linears (graph_passes.dynamically_quantized_linears, xnnpack_partition.MatmulChainPartitioner).

Properties protected:
- every forward matmul with a frozen int8 weight (a linear, a linear of a non-contiguous 3-D input, a 1x1
  convolution) is lowered as a dynamically quantized linear inside an XNNPACK delegate (choose_qparams / quantize /
  dequantize of the activation and dequantize_per_channel of the int8 weight in the delegate, nothing of it left to
  the portable kernels), and the int8 weights it packs come from the .ptd, not the .pte
- the program runs and its loss and LoRA gradients stay within stated tolerances of the fp32-dequant arithmetic (the
  eager step, which the current program equals to 1e-4: test_executorch.py) - and differ from it by more than fp32
  rounding, so the integer kernels did run
- "qd8_linears" rewrites the linears only (a 1x1 convolution stays an fp32 matmul)
- qd8 is refused outside XNNPACK's matmul partitioning, and is not the default
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

pytest.importorskip("executorch")

LOSS_RTOL = 2e-2           # activations rounded to 8 bits per row: measured ~1e-3 here, 1.8e-4 on the FLUX layout
GRAD_COSINE_MIN = 0.99     # LoRA gradients as one vector: measured > 0.999 here
FP32_ROUNDING = 1e-5       # the fp32-dequant program's gradients are within 1e-6 of eager: qd8 must be further


class _FrozenInt8Net(nn.Module):
    """Frozen linears and a 1x1 convolution around trained LoRA-like factors, in the three shapes the training
    programs' frozen matmuls take: a linear of a token batch, a linear of a transposed (non-contiguous) 3-D input,
    a 1x1 convolution (channels x positions after graph_passes.pointwise_conv_to_mm). The trained scale in front
    makes every frozen layer's input gradient needed."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.lin1 = nn.Linear(32, 48)
        self.lin2 = nn.Linear(6, 16, bias=False)
        self.conv = nn.Conv2d(48, 24, 1)
        self.scale = nn.Parameter(torch.ones(32))
        self.lora_a = nn.Parameter(torch.randn(4, 32, generator=g) * 0.1)
        self.lora_b = nn.Parameter(torch.randn(48, 4, generator=g) * 0.1)
        with torch.no_grad():
            for m in (self.lin1, self.lin2, self.conv):
                for p in m.parameters():
                    p.copy_(torch.randn(p.shape, generator=g) * 0.2)
                    p.requires_grad_(False)

    def forward(self, x):                                          # x [1, 6, 32]
        h = x * self.scale
        y = self.lin1(h) + (h @ self.lora_a.t()) @ self.lora_b.t()  # [1, 6, 48]
        z = self.lin2(F.gelu(y).transpose(1, 2))                    # [1, 48, 16]: a 3-D non-contiguous input
        c = self.conv(z.reshape(1, 48, 4, 4))                       # [1, 24, 4, 4]
        return (c - 0.25).pow(2).mean()


def _export(cfg, net, x):
    from export.executorch_program import _data_files, _op_placement, backend_config, joint_with_passes, lower
    with torch.no_grad():
        ep = torch.export.export(net, (x,), strict=False)
    ep, passes = joint_with_passes(ep, cfg)
    edge = lower(ep, cfg, passes)
    ops = _op_placement(edge.exported_program())
    et = edge.to_executorch(backend_config(cfg))
    return et, _data_files(et), ops, passes, edge.exported_program()


def _config(**over):
    from ditskip_edge.quantize import QuantSpec
    from export.executorch_program import ExportConfig
    fields = dict(quant=QuantSpec("int8"), backend="xnnpack", external_weights=True, trace_need=False)
    return ExportConfig(**{**fields, **over})


@pytest.fixture(scope="module")
def qd8_program():
    from ditskip_edge.quantize import QuantSpec, quantize_frozen_layers
    net = _FrozenInt8Net()
    assert quantize_frozen_layers(net, QuantSpec("int8")) == 3
    x = torch.randn(1, 6, 32, generator=torch.Generator().manual_seed(1))
    et, data, ops, passes, edge = _export(_config(integer_matmuls="qd8"), net, x)
    return net, x, et, data, ops, passes, edge


def test_every_frozen_int8_matmul_is_a_dynamically_quantized_linear_inside_an_xnnpack_delegate(qd8_program):
    _, _, et, data, ops, passes, edge = qd8_program
    assert passes["qd8_linears"]["linears"] == 3                   # lin1, lin2 (3-D, transposed input), the 1x1 conv
    delegated = ops["xnnpack_ops"]
    for op in ("linear", "quantized_decomposed.choose_qparams.tensor", "quantized_decomposed.quantize_per_tensor.tensor",
               "quantized_decomposed.dequantize_per_tensor.tensor", "quantized_decomposed.dequantize_per_channel"):
        assert delegated.get(op) == 3, (op, delegated)
    portable = ops["portable_ops"]
    assert not [o for o in portable if "linear" in o or "quantize" in o or "choose_qparams" in o], portable
    # each linear is in its own delegate, with its activation's quantization and its weight's dequantization
    from export.executorch_program import _op_name
    gm = edge.graph_module
    for n in gm.graph.nodes:
        if n.op == "call_function" and "executorch_call_delegate" in _op_name(n.target):
            inner = {_op_name(m.target) for m in getattr(gm, n.args[0].target).original_module.graph.nodes
                     if m.op == "call_function"}
            if "linear" in inner:
                assert {"quantized_decomposed.choose_qparams.tensor",
                        "quantized_decomposed.dequantize_per_channel"} <= inner, inner
    # the int8 weights XNNPACK packs are read from the .ptd (delegate constant tag), the .pte holds no copy
    from executorch.exir._serialize._program import deserialize_pte_binary
    assert list(data) == ["_default_external_constant.ptd"]
    named = deserialize_pte_binary(et.buffer).named_data
    in_pte = 0 if named is None else sum(len(b) for b in named.buffers)
    assert in_pte < 6 * 16, f"{in_pte} bytes of delegate data in the .pte"          # smaller than the least codes
    assert len(data["_default_external_constant.ptd"]) >= 48 * 32 + 16 * 6 + 24 * 48


def test_the_qd8_program_runs_within_the_stated_tolerance_of_the_fp32_dequant_step_and_is_not_exact(qd8_program):
    from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

    from ditskip_edge.runtime.bindings import training_module
    net, x, et, data, *_ = qd8_program
    m = training_module(_load_for_executorch_from_buffer(et.buffer, data_map_buffer=data["_default_external_constant.ptd"]))
    loss_et = float(m.forward_backward("forward", [x])[0])
    grads_et = m.named_gradients()
    params = {n: p for n, p in net.named_parameters() if p.requires_grad}
    for p in params.values():
        p.grad = None
    loss_t = net(x)
    loss_t.backward()
    loss = float(loss_t.detach())
    assert set(grads_et) == set(params)
    a = torch.cat([params[n].grad.reshape(-1) for n in sorted(params)])
    b = torch.cat([grads_et[n].reshape(-1) for n in sorted(params)])
    rel = float((a - b).norm() / a.norm())
    cos = float(F.cosine_similarity(a, b, dim=0))
    assert abs(loss_et - loss) <= LOSS_RTOL * abs(loss), (loss_et, loss)
    assert cos >= GRAD_COSINE_MIN, cos
    assert rel > FP32_ROUNDING, f"gradients equal the fp32 arithmetic to {rel:.1e}: the integer kernels did not run"


def test_qd8_linears_leaves_the_1x1_convolution_an_fp32_matmul_and_rewrites_the_linears():
    from ditskip_edge.quantize import QuantSpec, quantize_frozen_layers
    net = _FrozenInt8Net()
    quantize_frozen_layers(net, QuantSpec("int8"))
    _, _, ops, passes, _ = _export(_config(integer_matmuls="qd8_linears"), net, torch.randn(1, 6, 32))
    assert passes["qd8_linears"]["linears"] == 2
    assert ops["xnnpack_ops"].get("linear") == 2 and ops["xnnpack_ops"].get("bmm", 0) >= 1, ops["xnnpack_ops"]


def test_qd8_is_refused_outside_xnnpack_matmul_partitioning_and_is_not_the_default():
    from export.executorch_program import ExportConfig
    assert ExportConfig().integer_matmuls == "off"
    with pytest.raises(ValueError, match="xnnpack"):
        _config(integer_matmuls="qd8", backend="portable")
    with pytest.raises(ValueError, match="xnnpack_ops"):
        _config(integer_matmuls="qd8", xnnpack_ops="all")
    with pytest.raises(ValueError, match="integer_matmuls"):
        _config(integer_matmuls="int4")


def test_compile_integer_matmuls_flag_reaches_the_training_program_config():
    """`compile --integer-matmuls qd8` sets ExecutorchPrograms.integer_matmuls (then ExportConfig's); refused for the
    portable program, for other precisions than int8 and without --runtime executorch; off by default."""
    from compiler.commands.compile import program_stages
    from ditskip_edge.runtime.errors import UserError
    assert program_stages(["executorch"], "int8", None, integer_matmuls="qd8")[0].integer_matmuls == "qd8"
    assert program_stages(["executorch"], "int8", None)[0].integer_matmuls == "off"
    for runtimes, precision, backend in ((["executorch"], "int8", "portable"), (["executorch"], "int4", None),
                                         (["ort"], "int8", None)):
        with pytest.raises(UserError, match="integer-matmuls"):
            program_stages(runtimes, precision, backend, integer_matmuls="qd8")
