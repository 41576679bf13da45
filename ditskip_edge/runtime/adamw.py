"""AdamW over the runtime's parameter and gradient tensors, written out so the demo apps can mirror it line by line.

Same update as torch.optim.AdamW (decoupled weight decay, bias-corrected moments, eps added after the bias-corrected
square root), which is what the eager trainer runs. All arithmetic is float32 numpy, in place on the parameter
memory the runtime owns (ExecuTorch's named_parameters() alias its arena: writing them changes the next step):

    p      <- p * (1 - lr * weight_decay)
    m      <- beta1 * m + (1 - beta1) * g
    v      <- beta2 * v + (1 - beta2) * g * g
    p      <- p - (lr / (1 - beta1^k)) * m / (sqrt(v) / sqrt(1 - beta2^k) + eps)        k = step count, from 1
"""

from __future__ import annotations

import math

import numpy as np


class AdamW:
    def __init__(self, names, shapes, lr: float, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2):
        self.lr, self.beta1, self.beta2, self.eps, self.weight_decay = lr, betas[0], betas[1], eps, weight_decay
        self.step_count = 0
        self.m = {n: np.zeros(s, np.float32) for n, s in zip(names, shapes)}
        self.v = {n: np.zeros(s, np.float32) for n, s in zip(names, shapes)}

    def set_lr(self, lr: float) -> None:
        """The rate of the next steps (the loop sets the bundle's scheduled rate before each, OptimizerSpec.lr_at)."""
        self.lr = lr

    def step(self, params: dict[str, np.ndarray], grads: dict[str, np.ndarray]) -> None:
        self.step_count += 1
        k = self.step_count
        bias1 = 1.0 - self.beta1 ** k
        bias2_sqrt = math.sqrt(1.0 - self.beta2 ** k)
        step_size = np.float32(self.lr / bias1)
        for name, p in params.items():
            g, m, v = grads[name], self.m[name], self.v[name]
            p *= np.float32(1.0 - self.lr * self.weight_decay)
            m *= np.float32(self.beta1)
            m += np.float32(1.0 - self.beta1) * g
            v *= np.float32(self.beta2)
            v += np.float32(1.0 - self.beta2) * g * g
            denom = np.sqrt(v) / np.float32(bias2_sqrt) + np.float32(self.eps)
            p -= step_size * (m / denom)

    def state(self) -> dict[str, np.ndarray]:
        out = {"step_count": np.array(self.step_count, np.int64)}
        out.update({f"m/{n}": a for n, a in self.m.items()})
        out.update({f"v/{n}": a for n, a in self.v.items()})
        return out

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.step_count = int(state["step_count"])
        for n in self.m:
            self.m[n][...] = state[f"m/{n}"]
            self.v[n][...] = state[f"v/{n}"]
