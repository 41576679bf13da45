"""A tiny FLUX pipeline folder with *real* text encoders (CLIP + T5 of toy size, word-level tokenizers built
here), so the local-folder path with real encoders is tested without downloads."""

from __future__ import annotations

from pathlib import Path

WORDS = "<pad> <unk> </s> <s> a photo of sks toy dog cat on the table red blue".split()


def _tokenizer(max_len: int):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    t = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=t, pad_token="<pad>", unk_token="<unk>", eos_token="</s>",
                                   model_max_length=max_len)


def save_tiny_flux_pipeline(folder: Path) -> Path:
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel
    from ditskip_edge.models.loading import build_transformer, build_vae, resolve_spec
    spec = resolve_spec("flux-tiny")
    torch.manual_seed(0)
    clip = CLIPTextModel(CLIPTextConfig(vocab_size=len(WORDS), hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=1, num_attention_heads=2, projection_dim=32,
                                        max_position_embeddings=77, eos_token_id=2, pad_token_id=0, bos_token_id=3))
    t5 = T5EncoderModel(T5Config(vocab_size=len(WORDS), d_model=32, d_kv=16, d_ff=64, num_layers=1, num_heads=2,
                                 pad_token_id=0, eos_token_id=2))
    pipe = FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=build_vae(spec), text_encoder=clip,
                        tokenizer=_tokenizer(77), text_encoder_2=t5, tokenizer_2=_tokenizer(512),
                        transformer=build_transformer(spec))
    pipe.save_pretrained(folder)
    return Path(folder)
