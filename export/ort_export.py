"""A bundle's kept span -> the ONNX Runtime Training program of one precision, under `programs/ort/<precision>/`.

    open bundle -> build_step (export/step_module.py: the kept blocks with LoRA, frozen linears and convolutions
      quantized (int8 codes or packed int4 + fp32 scales, dequantized in the graph), the cache decoder, the loss)
      -> ONNX (export/ort_graph.py) -> training model + checkpoint (export/ort_artifacts.py)

The manifest entry is a runtime/contract.py ProgramEntry like ExecuTorch's: same inputs (contract order, the cache
layout's dtypes), `trainable` mapping the ONNX parameter names to the LoRA file keys, the checkpoint in `data`.

Memory (issue 14): the training model's gradient side reads recomputed dequantized weights
(ort_graph.recompute_frozen_in_gradient, the ExecuTorch pass's twin), so they are not kept from forward to backward.
ORT's common-subexpression elimination would merge the copies back: the entry's `graph_passes.session_config`
(RECOMPUTE_SESSION_CONFIG) turns it off, and runtime/ort.py creates the session with it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx

from ditskip_edge.bundle_model import OpenBundle
from ditskip_edge.quantize import QUANT_LAYERS, QuantConv2d, QuantSpec
from ditskip_edge.runtime.contract import TRAIN_STEP, ProgramEntry

from .ort_artifacts import generate_training_artifacts
from .ort_graph import (OPSET, RECOMPUTE_SESSION_CONFIG, export_step_onnx, full_model_names, integer_initializers,
                        recompute_frozen_in_gradient)
from .step_module import build_step, input_specs


def export_ort_train_step(b: OpenBundle, quant: QuantSpec, out_dir: Path, rel_dir: str) -> ProgramEntry:
    """Write the training model and checkpoint into out_dir (= BUNDLE/rel_dir); return the manifest entry."""
    import onnxruntime
    onnxruntime.set_default_logger_severity(3)
    step = build_step(b, quant)
    onnx_names = full_model_names(step.module, step.transformer)     # module path -> full-model name
    with tempfile.TemporaryDirectory() as tmp:
        graph = export_step_onnx(step.module, step.example, step.names, Path(tmp) / "training_step.onnx",
                                 step.transformer, OPSET)
        trainable = {onnx_names[n]: key for n, key in step.lora_keys.items()}
        files = generate_training_artifacts(graph, list(trainable), out_dir)
        int_inits = integer_initializers(graph)
        frozen = {i.name for i in graph.graph.initializer} - set(trainable)
    recompute = recompute_frozen(files["training_model"], frozen)
    shapes = {onnx_names[n]: list(p.shape) for n, p in step.module.named_parameters() if p.requires_grad}
    quant_layers = [m for m in step.module.modules() if isinstance(m, QUANT_LAYERS)]
    memory = {"program_bytes": files["training_model"].stat().st_size,
              "checkpoint_bytes": files["checkpoint"].stat().st_size,
              "quantized_layers": len(quant_layers),
              "quantized_convs": sum(isinstance(m, QuantConv2d) for m in quant_layers),
              "integer_initializers": len(int_inits),
              "integer_types": sorted({onnx.TensorProto.DataType.Name(t).lower() for t in int_inits.values()})}
    return ProgramEntry(name=TRAIN_STEP, runtime="ort", path=f"{rel_dir}/{files['training_model'].name}",
                        data=[f"{rel_dir}/{files['checkpoint'].name}"], inputs=input_specs(step.names, step.example),
                        outputs=[{"name": "loss", "shape": [], "dtype": "float32"}], trainable=trainable,
                        trainable_shapes=shapes, precision=quant.precision, backend="cpu", memory=memory,
                        graph_passes={"opset": OPSET, "runtime_version": onnxruntime.__version__,
                                      "recompute_frozen": recompute, "session_config": dict(RECOMPUTE_SESSION_CONFIG)})


def recompute_frozen(training_model: Path, frozen: set[str]) -> dict:
    """Rewrite the training model in place: gradient nodes read recomputed frozen-only values. Returns the counts."""
    model = onnx.load(str(training_model), load_external_data=False)
    done = recompute_frozen_in_gradient(model, frozen)
    onnx.save(model, str(training_model))
    return done
