"""ONNX training graph -> ORT training artifacts: training, eval and optimizer models plus checkpoint.

    generate_artifacts(step.onnx, requires_grad=LoRA, frozen_params=everything else, loss=None (the graph's output 0
    is the loss already), optimizer=AdamW block)

The optimizer is ORT's AdamWOptimizer op as `onnxblock.optim.AdamW` builds it: the Hugging Face variant
(`adam_mode=1`), not torch.optim.AdamW:

    m = b1 m + (1 - b1) g ;  v = b2 v + (1 - b2) g^2
    p = p - lr * sqrt(1 - b2^k) / (1 - b1^k) * m / (sqrt(v) + eps)      (bias correction folded into the step size)
    p = p - lr * weight_decay * p                                       (decay after the update, uncorrected lr)

with k the 1-based step count. `ADAMW_VARIANT` names it in the bundle; `hf_adamw_update` in tests mirrors it.
"""

from __future__ import annotations

import os
from pathlib import Path

import onnx

ADAMW_VARIANT = "huggingface"       # ORT AdamWOptimizer adam_mode=1, correct_bias=1
ARTIFACT_FILES = ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx", "checkpoint")


def generate_training_artifacts(model: onnx.ModelProto, trainable: list[str], out_dir: Path, betas=(0.9, 0.999),
                                eps: float = 1e-6, weight_decay: float = 0.0) -> dict[str, Path]:
    """Write the four artifacts into out_dir. `trainable` must all be initializers of `model`."""
    from onnxruntime.training import artifacts, onnxblock
    inits = [i.name for i in model.graph.initializer]
    missing = sorted(set(trainable) - set(inits))
    if missing:
        raise ValueError(f"trainable parameters not in the ONNX graph's initializers: {missing[:3]}")
    keep = set(trainable)
    frozen = [n for n in inits if n not in keep]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)      # generate_artifacts does not create it
    optimizer = onnxblock.optim.AdamW(bias_correction=True, betas=tuple(betas), eps=float(eps),
                                      weight_decay=float(weight_decay))
    artifacts.generate_artifacts(model, requires_grad=list(trainable), frozen_params=frozen, loss=None,
                                 optimizer=optimizer, artifact_directory=os.fspath(out_dir))
    return {f: out_dir / f for f in ARTIFACT_FILES}
