"""Generation for the testbed: rectified-flow Euler through the full model's view, the user's path for a LoRA.

    transformer = build_transformer(spec); load_lora(transformer, lora_file)   # diffusers load_lora_adapter
    x_1 ~ N(0, I) (per-image seed);  for t_i = 1 .. 0 in `steps` equal steps:
        v = v(x, t, "") + g * (v(x, t, prompt) - v(x, t, ""))                     # classifier-free guidance
        x = x + (t_{i+1} - t_i) * v                                              # v = noise - x0
    image = decode(unpack(x))

v comes from `DiTView.forward` over all blocks (models/views.py), i.e. the diffusers model's own computation.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from .models.latents import LatentEncoder, enable_diffusers_tiling
from .models.loading import build_transformer, build_vae
from .models.specs import ModelSpec
from .models.text import encode_prompt
from .models.views import make_view


def load_lora(transformer: nn.Module, lora_file: str | Path, adapter_name: str = "subject") -> None:
    """Load a LoRA file written by the trainer into the full diffusers transformer (the user's path)."""
    from diffusers import FluxPipeline
    sd = FluxPipeline.lora_state_dict(str(lora_file))
    sd = sd[0] if isinstance(sd, tuple) else sd
    transformer.load_lora_adapter(sd, prefix="transformer", adapter_name=adapter_name)


def load_model(spec: ModelSpec, lora_file: str | Path | None = None, adapter_weight: float = 1.0) -> nn.Module:
    """The full diffusers transformer, with the LoRA file loaded at `adapter_weight` (diffusers' `set_adapters`
    weight: what a user sets to draw the subject weaker or stronger) when one is given."""
    transformer = build_transformer(spec)
    if lora_file is not None:
        load_lora(transformer, lora_file)
        if adapter_weight != 1.0:
            transformer.set_adapters("subject", weights=adapter_weight)
    return transformer.eval()


@torch.no_grad()
def generate(spec: ModelSpec, transformer: nn.Module, prompts: list[str], seeds: list[int], steps: int = 20,
             guidance: float = 3.0, px: int | None = None, batch: int = 16,
             noises: list[torch.Tensor] | None = None) -> torch.Tensor:
    """One image per (prompt, seed) pair, in that order: [N, 3, px, px] in [-1, 1]. `noises` (latent layout
    [1, C, h, w], one per image) replaces the seeds' torch noise: the device runtime's portable-RNG noise."""
    if len(prompts) != len(seeds) or (noises is not None and len(noises) != len(prompts)):
        raise ValueError("generate: one seed (and noise) per prompt")
    px = px or spec.train_px
    view = make_view(spec.arch, transformer)
    decoder = LatentEncoder(spec.arch, build_vae(spec))
    c = int(spec.vae_config.get("in_channels", 3)) * int(spec.vae_scale_factor) ** 2
    hw = (px // spec.vae_scale_factor, px // spec.vae_scale_factor)
    enc = {p: encode_prompt(spec, p) for p in set(prompts) | {""}}
    out = []
    for i in range(0, len(prompts), batch):
        ps, ss = prompts[i:i + batch], seeds[i:i + batch]
        ns = noises[i:i + batch] if noises is not None else [
            torch.randn(1, c, *hw, generator=torch.Generator().manual_seed(s)) for s in ss]
        x = torch.cat([view.pack(n) for n in ns])
        cond = {k: torch.cat([enc[p][k] for p in ps]) for k in enc[""]}
        uncond = {k: v.expand(len(ps), *v.shape[1:]) for k, v in enc[""].items()}
        both = {k: torch.cat([uncond[k], cond[k]]) for k in cond}
        ts = torch.linspace(1.0, 0.0, steps + 1)
        for t, t_next in zip(ts[:-1], ts[1:]):
            v_u, v_c = view(torch.cat([x, x]), t.repeat(2 * len(ps)), both).chunk(2)
            x = x + (t_next - t) * (v_u + guidance * (v_c - v_u))
        out.append(decoder.decode(view.unpack(x, hw)).clamp(-1, 1))
    return torch.cat(out)


def grid(images: torch.Tensor, cols: int, pad: int = 1) -> torch.Tensor:
    """[N, 3, H, W] -> one [3, rows*(H+pad), cols*(W+pad)] image, white padding."""
    n, _, h, w = images.shape
    rows = (n + cols - 1) // cols
    g = torch.ones(3, rows * (h + pad), cols * (w + pad))
    for k in range(n):
        r, c = divmod(k, cols)
        g[:, r * (h + pad):r * (h + pad) + h, c * (w + pad):c * (w + pad) + w] = images[k]
    return g


@torch.no_grad()
def diffusers_reference(spec: ModelSpec, lora_file: str | Path | None, prompt: str, noise: torch.Tensor, steps: int,
                        guidance: float, decode_tiling: dict | None = None) -> torch.Tensor:
    """The host's picture for the device runtime's comparison: [H, W, 3] in [0, 1], from the same initial noise
    (latent layout [1, C, h, w]), prompt, schedule and guidance.
    - flux-tiny / sana-tiny: diffusers' own FluxPipeline / SanaPipeline built from the model's components, the LoRA
      loaded with `load_lora_weights`, the prompt given as the hash encoder's embeddings (the tiny models have no
      text encoder network) and the empty prompt as the negative. FluxPipeline runs its default sigmas (the
      runtime's); SanaPipeline is given the same sigmas (`sigmas=`, its FlowMatch default would end at 1e-3) and no
      resolution binning. FLUX guidance is `true_cfg_scale` (cond and uncond in two calls), SANA's `guidance_scale`.
      With `decode_tiling` (a bundle's generation.decode record) the autoencoder decodes with diffusers' own tiling.
    - a local pipeline folder with real text encoders: the folder's own FluxPipeline / SanaPipeline
      (`from_pretrained`, its CLIP + T5 or Gemma-2 and tokenizers) given the prompt as text and "" as the negative
      prompt, SANA without its complex human instruction (as models/text.py encodes for training); else as above.
    - flux-testbed (MiniLM text, pixel autoencoder: no stock pipeline): `generate` above, the LoRA loaded with
      `load_lora_adapter` into the full diffusers transformer, with the same noise."""
    import numpy as np
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, SanaPipeline
    px = noise.shape[-1] * spec.vae_scale_factor
    if spec.text.kind not in ("hash", "pipeline"):
        img = generate(spec, load_model(spec, lora_file), [prompt], [0], steps, guidance, px, noises=[noise])
        return (img[0].permute(1, 2, 0) * 0.5 + 0.5).clamp(0, 1)
    common = dict(transformer=build_transformer(spec), vae=enable_diffusers_tiling(build_vae(spec), decode_tiling),
                  scheduler=FlowMatchEulerDiscreteScheduler())
    if spec.text.kind == "pipeline":                 # the folder's own encoders and tokenizers read the prompt
        cls = FluxPipeline if spec.arch == "flux" else SanaPipeline
        pipe = cls.from_pretrained(spec.source, dtype=torch.float32, **common)
        text = dict(prompt=prompt, negative_prompt="", max_sequence_length=spec.text.seq_len)
        if spec.arch != "flux":
            text["complex_human_instruction"] = None
    else:
        cond, uncond = encode_prompt(spec, prompt), encode_prompt(spec, "")
        if spec.arch == "flux":
            pipe = FluxPipeline(text_encoder=None, tokenizer=None, text_encoder_2=None, tokenizer_2=None, **common)
            text = dict(prompt_embeds=cond["txt"], pooled_prompt_embeds=cond["pooled"],
                        negative_prompt_embeds=uncond["txt"], negative_pooled_prompt_embeds=uncond["pooled"])
        else:
            pipe = SanaPipeline(text_encoder=None, tokenizer=None, **common)
            text = dict(prompt_embeds=cond["txt"], prompt_attention_mask=cond["txt_mask"],
                        negative_prompt_embeds=uncond["txt"], negative_prompt_attention_mask=uncond["txt_mask"],
                        negative_prompt=None)
    if spec.arch == "flux":
        kw = dict(true_cfg_scale=guidance, latents=make_view(spec.arch, pipe.transformer).pack(noise))
    else:
        kw = dict(guidance_scale=guidance, sigmas=list(np.linspace(1.0, 1 / steps, steps)),
                  use_resolution_binning=False, latents=noise)
    if lora_file is not None:
        pipe.load_lora_weights(str(lora_file))
    pipe.set_progress_bar_config(disable=True)
    out = pipe(num_inference_steps=steps, height=px, width=px, output_type="np", **text, **kw)
    return torch.from_numpy(out.images[0])
