"""ONNX training graph -> ORT training artifacts: the training model (forward + gradient graph) and the checkpoint
(initial LoRA + frozen weights).

    generate_artifacts(step.onnx, requires_grad=LoRA, frozen_params=everything else, loss=None (the graph's output 0
    is the loss already), optimizer=None)

No optimizer model: the runtime's loop runs AdamW (torch.optim.AdamW's update, ditskip_edge/runtime/adamw.py) on the
gradients ORT computes, as it does for every runtime. The eval model `generate_artifacts` always writes is not
kept (training does not need it).
"""

from __future__ import annotations

import os
from pathlib import Path

import onnx

TRAINING_MODEL = "training_model.onnx"
CHECKPOINT = "checkpoint"


def generate_training_artifacts(model: onnx.ModelProto, trainable: list[str], out_dir: Path) -> dict[str, Path]:
    """Write the training model and the checkpoint into out_dir. `trainable` must all be initializers of `model`."""
    import onnxruntime
    from onnxruntime.training import artifacts
    onnxruntime.set_default_logger_severity(3)      # after the import: onnxruntime.training resets it to verbose
    inits = [i.name for i in model.graph.initializer]
    missing = sorted(set(trainable) - set(inits))
    if missing:
        raise ValueError(f"trainable parameters not in the ONNX graph's initializers: {missing[:3]}")
    keep = set(trainable)
    frozen = [n for n in inits if n not in keep]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)      # generate_artifacts does not create it
    artifacts.generate_artifacts(model, requires_grad=list(trainable), frozen_params=frozen, loss=None,
                                 optimizer=None, artifact_directory=os.fspath(out_dir))
    (out_dir / "eval_model.onnx").unlink(missing_ok=True)
    return {"training_model": out_dir / TRAINING_MODEL, "checkpoint": out_dir / CHECKPOINT}
