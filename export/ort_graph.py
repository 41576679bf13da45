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
    with onnx_exportable_ops():
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
