"""What the two device step adapters (ExecuTorch, ONNX Runtime) share: a manifest program entry, the trainable
parameters as numpy arrays by the program's names, and the gradient sums the loop reads."""

from __future__ import annotations

import numpy as np

from .bundle import Bundle
from .contract import TRAIN_STEP, find_program
from .loop import StepAdapter


def program_sha256(bundle: Bundle, program: dict) -> str:
    """The manifest's SHA-256 of the program's files (path, then data), joined by "+": a checkpoint's program."""
    return "+".join(bundle.file_sha256(p) for p in [program["path"], *program.get("data", [])])


class ProgramStep(StepAdapter):
    """A bundle's train_step program for `runtime`. Subclasses load it and fill `_params` (and keep them current);
    gradient sums are numpy arrays of the trainable shapes."""

    def __init__(self, bundle: Bundle, precision: str | None = None):
        self.program = find_program(bundle.programs, TRAIN_STEP, self.runtime, precision, str(bundle.root))
        self.program_sha256 = program_sha256(bundle, self.program)
        self.names = list(self.program["trainable"])
        self._params: dict[str, np.ndarray] | None = None
        self._grads = {n: np.zeros(s, np.float32) for n, s in self.program["trainable_shapes"].items()}

    def gradients(self) -> dict[str, np.ndarray]:
        return self._grads

    def zero_grad(self) -> None:
        for g in self._grads.values():
            g[...] = 0.0

    def parameters(self) -> dict[str, np.ndarray]:
        return self._params

    def lora_keys(self) -> dict[str, str]:
        return dict(self.program["trainable"])

    def describe(self) -> dict:
        return {"program": self.program["path"], "backend": self.program["backend"],
                "precision": self.program["precision"]}
