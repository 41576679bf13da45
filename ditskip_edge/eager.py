"""The eager step adapter: the reference every device runtime is compared against, under the runtime's one loop.

    EagerStep(bundle): the kept blocks with LoRA (bundle_model.build_skip_model) and the cache decoder as one
    TrainingStep; accumulate() = loss / grad_accum -> backward (autograd accumulates into .grad); its optimizer is
    torch.optim.AdamW itself (the reference the runtime's numpy AdamW is checked against).

`decoder` replaces the cache decoder: `cache.codecs.ZeroResiduals` (the "no residual" ablation) or another
codec's decoder (cache-report's fixed run).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn

from .bundle_model import build_skip_model, open_bundle
from .cache.codecs import decoder_for
from .runtime.bundle import MODEL_WEIGHTS, Bundle, OptimizerSpec
from .runtime.contract import COND_PREFIX, ENTRY_PREFIX, lora_file_key
from .runtime.inputs import NamedInputs
from .runtime.loop import StepAdapter
from .training_step import TrainingStep


class TorchAdamW:
    """torch.optim.AdamW over the eager parameters, with the runtime optimizer's interface and state layout."""

    def __init__(self, params: dict[str, nn.Parameter], spec: OptimizerSpec):
        self.params = params
        self.opt = torch.optim.AdamW(list(params.values()), lr=spec.lr, betas=spec.betas, eps=spec.eps,
                                     weight_decay=spec.weight_decay)

    def set_lr(self, lr: float) -> None:
        for group in self.opt.param_groups:
            group["lr"] = lr

    def step(self, params: dict[str, np.ndarray], grads: dict[str, np.ndarray]) -> None:
        self.opt.step()                   # on the torch parameters and their .grad (params are views of them)

    def state(self) -> dict[str, np.ndarray]:
        out, step = {}, 0
        for name, p in self.params.items():
            st = self.opt.state.get(p, {})
            if st:
                step = int(st["step"])
                out[f"m/{name}"] = st["exp_avg"].numpy().copy()
                out[f"v/{name}"] = st["exp_avg_sq"].numpy().copy()
        out["step_count"] = np.array(step, np.int64)
        return out

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        step = int(state["step_count"])
        for name, p in self.params.items():
            if f"m/{name}" in state:
                self.opt.state[p] = {"step": torch.tensor(float(step)),
                                     "exp_avg": torch.from_numpy(np.array(state[f"m/{name}"])),
                                     "exp_avg_sq": torch.from_numpy(np.array(state[f"v/{name}"]))}


class EagerStep(StepAdapter):
    runtime = "eager"

    def __init__(self, bundle: Bundle, decoder: nn.Module | None = None):
        self.host = open_bundle(bundle)
        model, self.transformer, _ = build_skip_model(self.host)
        self.step_fn = TrainingStep(model, decoder if decoder is not None
                                    else decoder_for(self.host.codec, self.host.entry_shapes))
        self.params = {n: p for n, p in self.transformer.named_parameters() if p.requires_grad}
        self.program_sha256 = bundle.file_sha256(MODEL_WEIGHTS)

    def accumulate(self, inputs: NamedInputs, grad_accum: int) -> float:
        t = {k: torch.from_numpy(v) for k, v in inputs.items()}
        cond = {k[len(COND_PREFIX):]: v for k, v in t.items() if k.startswith(COND_PREFIX)}
        entry = {k[len(ENTRY_PREFIX):]: v for k, v in t.items() if k.startswith(ENTRY_PREFIX)}
        loss = self.step_fn(t["x0"], t["noise"], t["t"], cond, entry) / grad_accum
        loss.backward()
        return loss.item()

    def gradients(self) -> dict[str, np.ndarray]:
        return {n: p.grad.numpy() for n, p in self.params.items()}

    def zero_grad(self) -> None:
        for p in self.params.values():
            p.grad = None

    def parameters(self) -> dict[str, np.ndarray]:
        return {n: p.detach().numpy() for n, p in self.params.items()}

    def lora_keys(self) -> dict[str, str]:
        return {n: lora_file_key(n) for n in self.params}

    def make_optimizer(self, spec: OptimizerSpec) -> TorchAdamW:
        return TorchAdamW(self.params, spec)

    def reset_lora(self, values: dict[str, np.ndarray]) -> None:
        """Put the LoRA back to `values` (e.g. its initial state, to rerun a fixed run with another decoder)."""
        with torch.no_grad():
            for n, p in self.params.items():
                p.copy_(torch.from_numpy(values[n]))
