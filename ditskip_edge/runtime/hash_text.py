"""The built-in tiny models' *hash* text encoder, computed the same way on the host and on a device (numpy only).

Not a neural network: each lower-cased word (`[a-z0-9]+` runs) maps to a fixed random vector, so different prompts
give different conditioning with the right shapes and no semantics (synonyms are unrelated). The vectors come from
the portable RNG (rng.py), which the demo apps also implement, so a phone computes the conditioning of *any* prompt
itself, with no table and no program:

    seed(word)   = first 8 bytes of SHA-256(word as UTF-8), little-endian, & (2^63 - 1)
    vector(w, d) = rng.normal(seed(w), (d,))
    pos          = rng.normal(1234, (L, d)) * 0.1                              (fixed positional vectors)
    txt[i]       = vector(word_i, d) + pos[i]    for the first L words; 0 elsewhere          [1, L, d]
    FLUX: pooled = mean_i vector(word_i, pooled_d) (0 for no words)                          [1, pooled_d]
    SANA: txt_mask[i] = 1 for a word, 0 elsewhere                                             [1, L]

`ditskip_edge.models.text.HashTextEncoder` (the compiler's) calls this module, so the bundle's training conditioning
and the device's generation conditioning are one function.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

from . import rng

POSITION_SEED = 1234
POSITION_SCALE = np.float32(0.1)
WORD = re.compile(r"[a-z0-9]+")


def words(prompt: str) -> list[str]:
    return WORD.findall(prompt.lower())


def word_seed(word: str) -> int:
    return int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little") & ((1 << 63) - 1)


def word_vector(word: str, dim: int) -> np.ndarray:
    return rng.normal(word_seed(word), (dim,))


def encode(prompt: str, arch: str, seq_len: int, dim: int, pooled_dim: int = 0) -> dict[str, np.ndarray]:
    """Conditioning of one prompt as float32 arrays with a batch dimension of 1; words beyond seq_len are dropped
    (generation refuses such a prompt before it gets here: `count_tokens`)."""
    ws = words(prompt)[:seq_len]
    pos = rng.normal(POSITION_SEED, (seq_len, dim)) * POSITION_SCALE
    txt = np.zeros((seq_len, dim), np.float32)
    mask = np.zeros((seq_len,), np.float32)
    for i, w in enumerate(ws):
        txt[i] = word_vector(w, dim) + pos[i]
        mask[i] = 1.0
    cond = {"txt": txt[None]}
    if arch == "flux":
        pooled = np.zeros((pooled_dim,), np.float32)
        if ws:
            pooled = (np.sum(np.stack([word_vector(w, pooled_dim) for w in ws]), axis=0, dtype=np.float32)
                      / np.float32(len(ws))).astype(np.float32)
        cond["pooled"] = pooled[None]
    else:
        cond["txt_mask"] = mask[None]
    return cond


def count_tokens(prompt: str) -> int:
    return len(words(prompt))
