"""The `normalizer` step: a tokenizer.json `normalizer` entry -> a str -> str function.

Supported types: Sequence, NFC, NFD, NFKC, NFKD, Lowercase (per character, as Rust's char::to_lowercase), Replace
(String or Regex), Prepend, Strip, StripAccents, Precompiled (SentencePiece's charsmap: its double-array trie is read
and applied per grapheme cluster, as `spm_precompiled` does). Any other type raises ValueError naming its path.

Approximation: NFC/NFKC/lowercasing use Python's `unicodedata`, whose version can differ from the Rust crates'.
"""

from __future__ import annotations

import base64
import struct
import unicodedata

from .unicode import compile_pattern, graphemes, is_space


PRECOMPILED_WHOLE_GRAPHEME_BYTES = 6           # graphemes shorter than this are looked up whole


class Precompiled:
    """SentencePiece's precompiled charsmap: a darts-clone double-array trie over UTF-8 keys, plus a pool of
    NUL-terminated replacements. A grapheme under 6 bytes is looked up whole; otherwise (or with no hit) each
    character is. A lookup takes the *shortest* key that prefixes the chunk, as `spm_precompiled` does."""

    def __init__(self, charsmap: bytes):
        (trie_bytes,) = struct.unpack_from("<I", charsmap, 0)
        self.units = struct.unpack_from(f"<{trie_bytes // 4}I", charsmap, 4)
        self.pool = charsmap[4 + trie_bytes:]

    def transform(self, chunk: str) -> str | None:
        units, pos = self.units, 0
        pos ^= (units[0] >> 10) << ((units[0] & (1 << 9)) >> 6)
        for byte in chunk.encode("utf-8"):
            if byte == 0:
                return None
            pos ^= byte
            unit = units[pos]
            if unit & ((1 << 31) | 0xFF) != byte:
                return None
            pos ^= (unit >> 10) << ((unit & (1 << 9)) >> 6)
            if (unit >> 8) & 1:
                start = units[pos] & ((1 << 31) - 1)
                return self.pool[start:self.pool.index(b"\0", start)].decode("utf-8")
        return None

    def __call__(self, text: str) -> str:
        out = []
        for g in graphemes(text):
            norm = self.transform(g) if len(g.encode("utf-8")) < PRECOMPILED_WHOLE_GRAPHEME_BYTES else None
            if norm is not None:
                out.append(norm)
                continue
            for ch in g:
                norm = self.transform(ch)
                out.append(ch if norm is None else norm)
        return "".join(out)


def _strip_accents(text: str) -> str:
    return "".join(c for c in text if unicodedata.category(c) not in ("Mn", "Mc", "Me"))


def _strip(text: str, left: bool, right: bool) -> str:
    i, j = 0, len(text)
    while left and i < j and is_space(text[i]):
        i += 1
    while right and j > i and is_space(text[j - 1]):
        j -= 1
    return text[i:j]


def build_normalizer(spec: dict | None, where: str = "normalizer"):
    """A str -> str function for a `normalizer` entry (None: identity)."""
    if spec is None:
        return lambda s: s
    kind = spec.get("type")
    if kind == "Sequence":
        steps = [build_normalizer(s, f"{where}.normalizers[{i}]") for i, s in enumerate(spec["normalizers"])]

        def run(s: str) -> str:
            for step in steps:
                s = step(s)
            return s
        return run
    if kind in ("NFC", "NFD", "NFKC", "NFKD"):
        return lambda s: unicodedata.normalize(kind, s)
    if kind == "Lowercase":
        return lambda s: "".join(c.lower() for c in s)
    if kind == "Replace":
        regex, content = compile_pattern(spec["pattern"], where), spec["content"]
        return lambda s: regex.sub(lambda _: content, s)
    if kind == "Prepend":
        return lambda s: spec["prepend"] + s if s else s
    if kind == "Strip":
        return lambda s: _strip(s, spec.get("strip_left", False), spec.get("strip_right", False))
    if kind == "StripAccents":
        return _strip_accents
    if kind == "Precompiled":
        blob = spec.get("precompiled_charsmap")
        if not blob:
            return lambda s: s
        return Precompiled(base64.b64decode(blob) if isinstance(blob, str) else bytes(blob))
    raise ValueError(f"{where}: type {kind!r} is not supported")
