"""The ONNX Runtime Training step adapter: a bundle's `train_step` ORT program under the loop.

    state = CheckpointState.load_checkpoint(program's checkpoint)     # initial LoRA + frozen weights
    module = Module(training_model.onnx, state)
    module.lazy_reset_grad(); loss = module(*inputs)                  # inputs in contract order
    state.parameters[name].grad / .data                               # this sample's gradient, the weights

ORT only computes gradients here: the loop's AdamW (runtime/adamw.py, torch.optim.AdamW's update) updates the
parameters and writes them back through the state, as it does for every runtime.
"""

from __future__ import annotations

import numpy as np

from . import bindings
from .bundle import Bundle
from .contract import ordered_inputs
from .errors import BundleError
from .inputs import NamedInputs
from .program_step import ProgramStep


def session_options(program: dict):
    """SessionOptions with the program's session config entries (`graph_passes.session_config`: e.g. CSE off, so
    the recomputed dequantized weights of the gradient graph are not merged back into the forward's)."""
    import onnxruntime
    so = onnxruntime.SessionOptions()
    for key, value in ((program.get("graph_passes") or {}).get("session_config") or {}).items():
        so.add_session_config_entry(key, str(value))
    return so


class OrtStep(ProgramStep):
    runtime = "ort"

    def __init__(self, bundle: Bundle, precision: str | None = None):
        api = bindings.ort_training_api()
        super().__init__(bundle, precision)
        checkpoint = [d for d in self.program.get("data", []) if d.endswith("checkpoint")]
        if len(checkpoint) != 1:
            raise BundleError(f"{bundle.root}: ORT program {self.program['path']} lists no checkpoint in data")
        self.state = api.CheckpointState.load_checkpoint(str(bundle.root / checkpoint[0]))
        self.module = api.Module(str(bundle.root / self.program["path"]), self.state,
                                 session_options=session_options(self.program))
        self.module.train()
        missing = [n for n in self.names if n not in self.state.parameters]
        if missing:
            raise BundleError(f"{self.program['path']}: trainable parameters {missing[:3]} are not in its checkpoint")
        self._params = {n: np.array(self.state.parameters[n].data, np.float32) for n in self.names}

    def accumulate(self, inputs: NamedInputs, grad_accum: int) -> float:
        self.module.lazy_reset_grad()
        loss = float(np.asarray(self.module(*ordered_inputs(self.program, inputs))))
        for n in self.names:
            self._grads[n] += self.state.parameters[n].grad / np.float32(grad_accum)
        return loss / grad_accum

    def set_parameters(self, values: dict[str, np.ndarray]) -> None:
        for n, v in values.items():
            if v is not self._params[n]:
                self._params[n][...] = v
            self.state.parameters[n].data = self._params[n]
