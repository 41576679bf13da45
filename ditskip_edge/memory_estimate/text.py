"""Predicted memory of the text-encoder phase of generation (runtime/generation.py encodes the prompt and "" first,
then drops the text programs before sampling): each encoder program of a real model, traced on the meta device from
its published config (no weights needed), one program at a time.

    phase_bytes (dirty anonymous)  = the largest encoder program's traced transient peak at batch 1 (its weights
                                     excluded: constants of the program, read from the mapped file, fp32 ones
                                     stored transposed; int8 / int4 weights are dequantized in the graph, one
                                     linear at a time, and their transposed copy for the portable mm is counted)
                                     + the conditioning of both prompts (what leaves the phase)
    file_backed_bytes              = every encoder's weights at the precision

Configs (what the real folders' text_encoder*/config.json say): FLUX.1-dev's CLIP ViT-L/14 text model (77 tokens)
and T5 v1.1 XXL encoder; SANA's Gemma-2-2B (its last hidden states). The bundle's encoder programs are fp32 today
(export/generation_stage.py); int8 is the planner's what-if (quantize.py's rule on every linear).
"""

from __future__ import annotations

import torch

from ..models.specs import FLUX_ARCH, ModelSpec
from ..quantize import QuantSpec, quantize_frozen_layers
from .tracker import StepMemoryTracker, storage_keys

# role -> (transformers config class, config, tokens the pipeline feeds it)
TEXT_ENCODER_CONFIGS = {
    "clip": ("CLIPTextConfig", dict(vocab_size=49408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                                    num_attention_heads=12, max_position_embeddings=77, projection_dim=768,
                                    hidden_act="quick_gelu"), 77),
    "t5": ("T5Config", dict(vocab_size=32128, d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64,
                            feed_forward_proj="gated-gelu", relative_attention_num_buckets=32,
                            relative_attention_max_distance=128), None),
    "gemma": ("Gemma2Config", dict(vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                                   num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                                   sliding_window=4096, query_pre_attn_scalar=256, attn_logit_softcapping=50.0,
                                   final_logit_softcapping=30.0, max_position_embeddings=8192), None),
}
MODEL_CLASSES = {"clip": "CLIPTextModel", "t5": "T5EncoderModel", "gemma": "Gemma2Model"}


def encoder_roles(spec: ModelSpec) -> tuple[str, ...]:
    return ("clip", "t5") if spec.arch == FLUX_ARCH else ("gemma",)


def _weights_bytes(m: torch.nn.Module) -> int:
    seen, n = set(), 0
    for t in list(m.parameters()) + [b for b in m.buffers() if b is not None]:
        k = t.untyped_storage()._cdata
        if k not in seen:
            seen.add(k)
            n += t.untyped_storage().nbytes()
    return n


def trace_text_encoder(role: str, tokens: int, precision: str = "fp32") -> dict:
    """One encoder program at batch 1: its traced transient peak (weights excluded) and its weights' bytes."""
    import transformers
    from torch._subclasses.fake_tensor import FakeTensorMode
    cfg_cls, cfg, fixed_tokens = TEXT_ENCODER_CONFIGS[role]
    tokens = fixed_tokens or tokens
    config = getattr(transformers, cfg_cls)(**cfg)
    config._attn_implementation = "sdpa" if role != "gemma" else "eager"
    with torch.device("meta"):
        model = getattr(transformers, MODEL_CLASSES[role])(config).eval().requires_grad_(False)
    with FakeTensorMode(allow_non_fake_inputs=True), torch.no_grad():
        model = model.to_empty(device="cpu")
        if precision in ("int8", "int4"):
            quantize_frozen_layers(model, QuantSpec(precision), convs=False)
        ids = torch.zeros(1, tokens, dtype=torch.long)
        mask = torch.ones(1, tokens, dtype=torch.long)
        weights = list(model.parameters()) + [b for b in model.buffers() if b is not None]
        # fp32 programs store transposed weights (export's fold_constants); int8 / int4 transpose the dequantized
        # weight at every matmul (the portable mm writes it into the arena)
        tr = StepMemoryTracker(storage_keys(weights + [ids, mask]),
                               weight_transposes=None if precision == "fp32" else "portable")
        with tr:
            if role == "gemma":
                model(input_ids=ids, attention_mask=mask)
            else:
                model(input_ids=ids)
        wbytes = _weights_bytes(model)
    return {"role": role, "tokens": tokens, "precision": precision, "arena_bytes": tr.peak_bytes,
            "weights_bytes": wbytes}


def text_phase_estimate(spec: ModelSpec, text_tokens: int, cond_bytes: int, precision: str = "fp32") -> dict:
    """The text phase of generation: encoder programs one at a time, both prompts' conditioning kept."""
    encoders = [trace_text_encoder(r, text_tokens, precision) for r in encoder_roles(spec)]
    arena = max(e["arena_bytes"] for e in encoders)
    return {"encoders": encoders, "precision": precision, "arena_bytes": arena,
            "phase_bytes": arena + cond_bytes, "file_backed_bytes": sum(e["weights_bytes"] for e in encoders)}
