"""Image embedders for the selection distance D(a, b) = 1 - cosine(embed(a), embed(b)).

`load_embedder(name)`:
- "pixel-stats" (default, offline, no download): a fixed hand-written feature of the image, not a learned one.
  The image [3, H, W] in [-1, 1] is resized to 64 x 64 and described by four groups, each L2-normalised so that
  each weighs the same in the cosine:
    1. layout: RGB means on a 4 x 4 and an 8 x 8 grid (centred by the image mean)       48 + 192 values
    2. colour: a soft 8-bin histogram per channel                                       24 values
    3. edges: gradient-orientation histograms (8 orientations, magnitude-weighted) on a 4 x 4 grid  128 values
  It sees layout, colour and edges; it knows nothing about objects. It is what the tiny random models get (their
  generations have no semantics for DINO or CLIP to see either).
- a local folder with a transformers model (no download: `from_pretrained(folder)`): a CLIP model
  (`model_type` "clip" / "clip_vision_model": image features of the vision tower, projected) or any other vision
  backbone, e.g. DINOv2 (`AutoModel`: the CLS token of the last hidden state). The folder's image processor
  prepares the pixels (without torchvision, transformers' PIL processors round them to 8 bits, as a saved PNG).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F

from ..runtime.errors import UserError

DEFAULT_EMBEDDER = "pixel-stats"


class PixelStatsEmbedder:
    name = DEFAULT_EMBEDDER
    description = ("fixed hand-written features (no learned weights): multi-scale pooled colour layout, colour "
                   "histogram, gradient-orientation histograms; see ditskip_edge/selection/embedders.py")
    side = 64

    @torch.no_grad()
    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """images [B, 3, H, W] in [-1, 1] -> features [B, F]."""
        x = F.interpolate(images.float().clamp(-1, 1), size=(self.side, self.side), mode="bilinear",
                          align_corners=False, antialias=True)
        b = x.shape[0]
        centred = x - x.mean(dim=(2, 3), keepdim=True)
        layout = torch.cat([F.adaptive_avg_pool2d(centred, g).reshape(b, -1) for g in (4, 8)], 1)
        centres = torch.linspace(-1, 1, 8)
        weights = torch.exp(-((x.reshape(b, 3, -1, 1) - centres) / (2 / 7)) ** 2)     # [B, 3, HW, 8]
        colour = weights.mean(2).reshape(b, -1)
        grey = x.mean(1, keepdim=True)
        gx = grey[..., :, 2:] - grey[..., :, :-2]
        gy = grey[..., 2:, :] - grey[..., :-2, :]
        gx, gy = gx[..., 1:-1, :], gy[..., :, 1:-1]                                     # [B, 1, 62, 62]
        mag = torch.sqrt(gx ** 2 + gy ** 2 + 1e-12)
        angle = torch.atan2(gy, gx) % math.pi                                           # unsigned orientation
        bins = torch.arange(8) * (math.pi / 8)
        diff = torch.remainder(angle[..., None] - bins + math.pi / 2, math.pi) - math.pi / 2
        soft = torch.clamp(1 - diff.abs() / (math.pi / 8), min=0) * mag[..., None]      # [B, 1, h, w, 8]
        soft = soft[:, 0].permute(0, 3, 1, 2)                                           # [B, 8, h, w]
        edges = F.adaptive_avg_pool2d(soft, 4).reshape(b, -1)
        groups = [layout, colour, edges]
        return torch.cat([F.normalize(g, dim=1, eps=1e-8) for g in groups], 1)


class TransformersEmbedder:
    """A CLIP or DINO(v2) model from a local transformers folder."""

    def __init__(self, folder: Path):
        try:
            from transformers import AutoImageProcessor, AutoModel, CLIPModel, CLIPVisionModelWithProjection
        except ImportError as e:
            raise UserError(f"embedder {folder}: the transformers package is not installed ({e})") from e
        cfg = folder / "config.json"
        if not cfg.is_file():
            raise UserError(f"embedder {folder}: no config.json; expected a transformers model folder (CLIP or DINO)")
        model_type = json.loads(cfg.read_text()).get("model_type", "")
        self.name = str(folder)
        self.kind = "clip" if model_type.startswith("clip") else model_type or "vision"
        self.description = f"{self.kind} image embedding from {folder}"
        self.processor = AutoImageProcessor.from_pretrained(folder, local_files_only=True)
        if model_type == "clip":
            self.model = CLIPModel.from_pretrained(folder, local_files_only=True).eval()
        elif model_type == "clip_vision_model":
            self.model = CLIPVisionModelWithProjection.from_pretrained(folder, local_files_only=True).eval()
        else:
            self.model = AutoModel.from_pretrained(folder, local_files_only=True).eval()

    @torch.no_grad()
    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        pixels = ((images.float().clamp(-1, 1) + 1) / 2)                     # [B, 3, H, W] in [0, 1]
        inputs = self.processor(images=list(pixels), return_tensors="pt", do_rescale=False)
        if self.kind == "clip":
            if hasattr(self.model, "get_image_features"):
                out = self.model.get_image_features(pixel_values=inputs["pixel_values"])
            else:
                out = self.model(pixel_values=inputs["pixel_values"]).image_embeds
            return out if torch.is_tensor(out) else out.pooler_output
        hidden = self.model(pixel_values=inputs["pixel_values"]).last_hidden_state
        return hidden[:, 0]                                                   # CLS token


def load_embedder(name: str | None):
    if name is None or name == DEFAULT_EMBEDDER:
        return PixelStatsEmbedder()
    folder = Path(name)
    if not folder.is_dir():
        raise UserError(f"embedder {name!r}: expected '{DEFAULT_EMBEDDER}' or a local folder with a transformers "
                        f"CLIP or DINO model (config.json + weights)")
    return TransformersEmbedder(folder)


def cosine_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """1 - cosine similarity, per row: a, b [B, F] -> [B]."""
    return 1 - F.cosine_similarity(a.double(), b.double(), dim=1)
