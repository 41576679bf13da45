"""The `pre_tokenizer` step: a tokenizer.json `pre_tokenizer` entry -> a function over pieces (text, starts the
text), each piece one word for the model.

Supported types: Sequence, Split (String or Regex; Removed / Isolated / MergedWithPrevious / MergedWithNext /
Contiguous; invert), ByteLevel (GPT-2 bytes_to_unicode; add_prefix_space; use_regex), Metaspace (replacement,
prepend_scheme always / first / never, split), Whitespace, WhitespaceSplit, Digits. Any other type raises ValueError
naming its path. The splitting helpers are `tokenizers`' Pattern::find_matches and NormalizedString::split.

Approximation: Metaspace prepend_scheme "first" treats a piece as the text's first when it starts the normalized text
of the first added-token split; `tokenizers` asks for original offset 0, which differs only when a normalizer drops
leading characters.
"""

from __future__ import annotations

import re
import unicodedata

from .unicode import compile_pattern, is_space, translate_regex


def _regex_segments(regex: re.Pattern, text: str) -> list[tuple[int, int, bool]]:
    """(start, end, is_match) covering text, as `tokenizers`' Pattern::find_matches for a regex."""
    if not text:
        return [(0, 0, False)]
    segs, prev = [], 0
    for m in regex.finditer(text):
        if prev != m.start():
            segs.append((prev, m.start(), False))
        segs.append((m.start(), m.end(), True))
        prev = m.end()
    if prev != len(text):
        segs.append((prev, len(text), False))
    return segs


def _char_segments(is_match, text: str) -> list[tuple[int, int, bool]]:
    """As find_matches for a char predicate: every matching character is a segment of its own."""
    segs, last = [], 0
    for i, ch in enumerate(text):
        if is_match(ch):
            if last < i:
                segs.append((last, i, False))
            segs.append((i, i + 1, True))
            last = i + 1
    if last < len(text):
        segs.append((last, len(text), False))
    return segs


def _split_by(segs: list[tuple[int, int, bool]], behavior: str, invert: bool = False) -> list[tuple[int, int]]:
    """NormalizedString::split: which (start, end) pieces a SplitDelimiterBehavior keeps."""
    segs = [(a, b, m != invert) for a, b, m in segs]
    if behavior == "Removed":
        return [(a, b) for a, b, m in segs if not m]
    if behavior == "Isolated":
        return [(a, b) for a, b, _ in segs]
    acc: list[list[int]] = []
    prev = False
    if behavior == "Contiguous":
        for a, b, m in segs:
            if m == prev and acc:
                acc[-1][1] = b
            else:
                acc.append([a, b])
            prev = m
    elif behavior == "MergedWithPrevious":
        for a, b, m in segs:
            if m and not prev and acc:
                acc[-1][1] = b
            else:
                acc.append([a, b])
            prev = m
    elif behavior == "MergedWithNext":
        for a, b, m in reversed(segs):
            if m and not prev and acc:
                acc[-1][0] = a
            else:
                acc.append([a, b])
            prev = m
        acc.reverse()
    else:
        raise ValueError(f"split behavior {behavior!r} is not supported")
    return [(a, b) for a, b in acc]


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table (ByteLevel)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, n = {b: chr(b) for b in keep}, 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return table


BYTE_CHARS = _bytes_to_unicode()
GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


Piece = tuple[str, bool]                       # (text, starts the text: for Metaspace prepend_scheme "first")


def _splitter(split_one):
    """Lift `text -> list[(start, end)]` to a pre-tokenizer over pieces; empty pieces are dropped."""
    def run(pieces: list[Piece]) -> list[Piece]:
        out = []
        for text, first in pieces:
            out += [(text[a:b], first and a == 0) for a, b in split_one(text) if b > a]
        return out
    return run


def _byte_level(spec: dict):
    add_prefix_space, use_regex = spec.get("add_prefix_space", True), spec.get("use_regex", True)
    regex = translate_regex(GPT2_SPLIT, "ByteLevel") if use_regex else None

    def run(pieces: list[Piece]) -> list[Piece]:
        out = []
        for text, first in pieces:
            if add_prefix_space and not text.startswith(" "):
                text = " " + text
            spans = _split_by(_regex_segments(regex, text), "Isolated") if use_regex else [(0, len(text))]
            for a, b in spans:
                if b > a:
                    out.append(("".join(BYTE_CHARS[x] for x in text[a:b].encode("utf-8")), first and a == 0))
        return out
    return run


def _metaspace(spec: dict, where: str):
    repl = spec.get("replacement", "\u2581")
    scheme = spec.get("prepend_scheme", "always")
    if spec.get("add_prefix_space") is False:
        scheme = "never"
    if scheme not in ("always", "first", "never"):
        raise ValueError(f"{where}: prepend_scheme {scheme!r} is not supported")
    split = spec.get("split", True)

    def run(pieces: list[Piece]) -> list[Piece]:
        out = []
        for text, first in pieces:
            text = text.replace(" ", repl)
            if not text.startswith(repl) and (scheme == "always" or (scheme == "first" and first)):
                text = repl + text
            spans = _split_by(_char_segments(lambda c: c == repl, text), "MergedWithNext") if split \
                else [(0, len(text))]
            out += [(text[a:b], first and a == 0) for a, b in spans if b > a]
        return out
    return run


def build_pre_tokenizer(spec: dict | None, where: str = "pre_tokenizer"):
    """A list[Piece] -> list[Piece] function for a `pre_tokenizer` entry (None: identity)."""
    if spec is None:
        return lambda pieces: pieces
    kind = spec.get("type")
    if kind == "Sequence":
        steps = [build_pre_tokenizer(s, f"{where}.pretokenizers[{i}]") for i, s in enumerate(spec["pretokenizers"])]

        def run(pieces: list[Piece]) -> list[Piece]:
            for step in steps:
                pieces = step(pieces)
            return pieces
        return run
    if kind == "Split":
        regex, behavior, invert = compile_pattern(spec["pattern"], where), spec["behavior"], spec.get("invert", False)
        if behavior not in ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"):
            raise ValueError(f"{where}: behavior {behavior!r} is not supported")
        return _splitter(lambda t: _split_by(_regex_segments(regex, t), behavior, invert))
    if kind == "ByteLevel":
        return _byte_level(spec)
    if kind == "Metaspace":
        return _metaspace(spec, where)
    if kind == "Whitespace":
        regex = translate_regex(r"\w+|[^\w\s]+", where)
        return _splitter(lambda t: _split_by(_regex_segments(regex, t), "Removed", invert=True))
    if kind == "WhitespaceSplit":
        return _splitter(lambda t: _split_by(_char_segments(is_space, t), "Removed"))
    if kind == "Digits":
        is_num = lambda c: unicodedata.category(c)[0] == "N"                    # noqa: E731 (char::is_numeric)
        behavior = "Isolated" if spec.get("individual_digits", False) else "Contiguous"
        return _splitter(lambda t: _split_by(_char_segments(is_num, t), behavior))
    raise ValueError(f"{where}: type {kind!r} is not supported")
