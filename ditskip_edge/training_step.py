"""The training step every runtime runs: one sample's *encoded* cache entry in, loss out.

    TrainingStep(x0, noise, t, cond, entry) = SkipModel(x0, noise, t, cond, decoder(entry))

`entry` is the sample's residual-cache entry as stored (for a compressed codec: integer codes and scales); the
decoder dequantizes inside the step, so a device never holds more than one decoded sample. The exporters
(export/) export this module, so the decode is part of the device graph.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .skip_model import SkipModel


class TrainingStep(nn.Module):
    def __init__(self, skip_model: SkipModel, decoder: nn.Module):
        super().__init__()
        self.skip_model = skip_model
        self.decoder = decoder

    def forward(self, x0, noise, t, cond, entry) -> torch.Tensor:
        return self.skip_model(x0, noise, t, cond, self.decoder(entry))
