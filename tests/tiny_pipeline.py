"""Tiny diffusers pipeline folders with *real* text encoders of toy size and tokenizers of the real ones' kinds
(built here, no downloads), so the local-folder path with real encoders is tested end to end:

    save_tiny_flux_pipeline   FluxPipeline: flux-tiny's transformer and VAE, CLIPTextModel + a CLIP-style BPE
                              tokenizer, T5EncoderModel + a T5-style Unigram tokenizer
    save_tiny_sana_pipeline   SanaPipeline: sana-tiny's transformer and DC-AE, Gemma2Model + a Gemma-style BPE
                              (byte fallback) tokenizer; FlowMatchEulerDiscreteScheduler (the device's sampler)

The tokenizers come from ditskip_edge/models/tiny_tokenizers.py (trained on a small prompt corpus with the real
tokenizers' components: what the device's tokenizers (runtime/text_tokens.py, the core's src/text) must read).
"""

from __future__ import annotations

import json
from pathlib import Path

from ditskip_edge.models.loading import TINY_TEXT_FILE


def save_tiny_flux_pipeline(folder: Path) -> Path:
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    from ditskip_edge.models.loading import build_transformer, build_vae, resolve_spec
    from ditskip_edge.models.tiny_tokenizers import clip_style_tokenizer, t5_style_tokenizer
    spec = resolve_spec("flux-tiny")
    clip_tok, t5_tok = clip_style_tokenizer(), t5_style_tokenizer()
    torch.manual_seed(0)
    clip = CLIPTextModel(CLIPTextConfig(vocab_size=len(clip_tok), hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=1, num_attention_heads=2, projection_dim=32,
                                        max_position_embeddings=77, eos_token_id=clip_tok.eos_token_id,
                                        pad_token_id=clip_tok.pad_token_id, bos_token_id=clip_tok.bos_token_id))
    t5 = T5EncoderModel(T5Config(vocab_size=len(t5_tok), d_model=32, d_kv=16, d_ff=64, num_layers=1, num_heads=2,
                                 pad_token_id=t5_tok.pad_token_id, eos_token_id=t5_tok.eos_token_id))
    pipe = FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=build_vae(spec), text_encoder=clip,
                        tokenizer=clip_tok, text_encoder_2=t5, tokenizer_2=t5_tok,
                        transformer=build_transformer(spec))
    pipe.save_pretrained(folder)
    return Path(folder)


def save_tiny_sana_pipeline(folder: Path) -> Path:
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, SanaPipeline
    from transformers import Gemma2Config, Gemma2Model

    from ditskip_edge.models.loading import build_transformer, build_vae, resolve_spec
    from ditskip_edge.models.tiny_tokenizers import gemma_style_tokenizer
    spec = resolve_spec("sana-tiny")
    tok = gemma_style_tokenizer()
    torch.manual_seed(0)
    dim = int(spec.transformer_config["caption_channels"])
    gemma = Gemma2Model(Gemma2Config(vocab_size=len(tok), hidden_size=dim, intermediate_size=2 * dim,
                                     num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                     head_dim=dim // 2, max_position_embeddings=512, sliding_window=16,
                                     pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                                     eos_token_id=tok.eos_token_id))
    pipe = SanaPipeline(tokenizer=tok, text_encoder=gemma, vae=build_vae(spec), transformer=build_transformer(spec),
                        scheduler=FlowMatchEulerDiscreteScheduler())
    pipe.save_pretrained(folder)
    # sana-tiny's resolutions (a real SANA folder trains at 512 px): the example photos fit them
    (Path(folder) / TINY_TEXT_FILE).write_text(json.dumps({"data_px": spec.data_px, "train_px": spec.train_px}))
    return Path(folder)
