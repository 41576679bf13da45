"""Unicode text handling the other steps share: character classes, Oniguruma regexes on Python `re`, grapheme
clusters. Stdlib only (`unicodedata`, `re`).

    class_body        the inside of a `re` character class for \\p{L}, \\p{N}, \\w or \\s (one `unicodedata` scan)
    translate_regex   a tokenizer.json regex (Oniguruma, Ruby syntax) -> a compiled `re` pattern, or ValueError
    compile_pattern   a Split / Replace `pattern` field ({"String": ...} or {"Regex": ...})
    graphemes         text -> grapheme clusters (what Precompiled looks up)

Approximations (exact on the tested prompts, tests/test_tokenizer.py):
  - Regexes are Oniguruma's (Rust `regex` for Whitespace) and run on Python `re`: \\p{L}, \\p{N}, \\s, \\w become
    explicit classes built from `unicodedata` (Unicode 14 in Python 3.11; `tokenizers` may ship newer tables, so
    characters assigned after Unicode 14 can class differently); \\w is L + Nl + M + Nd + Pc + ZWNJ/ZWJ (Rust's
    Alphabetic adds a few So characters such as circled letters).
  - Grapheme clusters are found by a short rule set (CR LF, controls, combining/extending marks, spacing marks, ZWJ
    emoji sequences, regional-indicator pairs, Hangul syllables), not the full UAX #29 tables.
"""

from __future__ import annotations

import re
import unicodedata


WHITE_SPACE = ((0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
               (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000))
SCAN_RANGES = ((0, 0x40000), (0xE0000, 0xE1000))   # planes 4-13, 15, 16 hold no letters, numbers or marks
_RANGES: dict[str, list[tuple[int, int]]] = {"s": list(WHITE_SPACE)}
_SPACE_CHARS = frozenset(chr(c) for lo, hi in WHITE_SPACE for c in range(lo, hi + 1))


def _is_word_category(cat: str, cp: int) -> bool:
    return cat[0] in "LM" or cat in ("Nd", "Nl", "Pc") or cp in (0x200C, 0x200D)


def _scan_categories() -> None:
    """Code-point ranges of \\p{L}, \\p{N} and \\w, from one pass over `unicodedata` (~0.1 s, once)."""
    tests = {"L": lambda cat, cp: cat[0] == "L", "N": lambda cat, cp: cat[0] == "N", "w": _is_word_category}
    found: dict[str, list[tuple[int, int]]] = {k: [] for k in tests}
    for lo, hi in SCAN_RANGES:
        for cp in range(lo, hi):
            cat = unicodedata.category(chr(cp))
            for name, test in tests.items():
                if test(cat, cp):
                    ranges = found[name]
                    if ranges and ranges[-1][1] == cp - 1:
                        ranges[-1] = (ranges[-1][0], cp)
                    else:
                        ranges.append((cp, cp))
    _RANGES.update(found)


def class_body(name: str) -> str:
    """The inside of a Python `re` character class for "L", "N", "w" or "s"."""
    if name not in _RANGES:
        _scan_categories()
    return "".join(f"\\U{lo:08x}" if lo == hi else f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in _RANGES[name])


def is_space(ch: str) -> bool:
    return ch in _SPACE_CHARS


_WORD_CHAR_RE: re.Pattern | None = None


def is_word_char(ch: str) -> bool:
    global _WORD_CHAR_RE
    if _WORD_CHAR_RE is None:
        _WORD_CHAR_RE = re.compile(f"[{class_body('w')}]")
    return _WORD_CHAR_RE.match(ch) is not None


_PROPERTY_NAMES = {"L": "L", "Letter": "L", "N": "N", "Number": "N"}
_UNSUPPORTED_ESCAPES = "hHRXKGkgyYOx"


def translate_regex(pattern: str, where: str) -> re.Pattern:
    """Compile an Oniguruma (Ruby syntax) pattern from a tokenizer.json with Python `re`; ValueError when the pattern
    uses something this translation does not express (other \\p classes, negated classes inside brackets, nested
    classes, POSIX brackets, \\h \\R \\X \\K \\G \\x{..} ...). ^ and $ are line anchors in Ruby syntax: re.MULTILINE."""
    out, i, in_class, n = [], 0, False, len(pattern)

    def fail(what: str):
        raise ValueError(f"{where}: regex {pattern!r}: {what} is not supported")

    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            e = pattern[i + 1]
            if e in "pP":
                m = re.match(r"\{(\^?)(\w+)\}", pattern[i + 2:])
                if not m or e == "P" or m.group(1) or m.group(2) not in _PROPERTY_NAMES:
                    fail(f"\\{e}{m.group(0) if m else ''}")
                body = class_body(_PROPERTY_NAMES[m.group(2)])
                out.append(body if in_class else f"[{body}]")
                i += 2 + len(m.group(0))
                continue
            if e in "sSwW":
                body = class_body(e.lower())
                if e.isupper() and in_class:
                    fail(f"\\{e} inside [...]")
                out.append(body if in_class else (f"[^{body}]" if e.isupper() else f"[{body}]"))
            elif e == "z" and not in_class:
                out.append(r"\Z")
            elif e == "Z" and not in_class:
                out.append(r"(?=\n?\Z)")
            elif e in _UNSUPPORTED_ESCAPES:
                fail(f"\\{e}")
            else:
                out.append(c + e)
            i += 2
            continue
        if c == "[":
            if in_class:
                fail("a nested class or POSIX bracket [...[...]...]")
            in_class = True
            out.append(c)
            i += 1
            if i < n and pattern[i] == "^":
                out.append("^")
                i += 1
            if i < n and pattern[i] == "]":             # a leading ] is a literal in Ruby syntax
                out.append(r"\]")
                i += 1
            continue
        if c == "]" and in_class:
            in_class = False
        elif in_class and pattern.startswith("&&", i):
            fail("class intersection &&")
        elif c == "(" and pattern.startswith("(?<", i) and pattern[i + 3:i + 4] not in ("=", "!"):
            out.append("(?P<")
            i += 3
            continue
        out.append(c)
        i += 1
    try:
        return re.compile("".join(out), re.MULTILINE)
    except re.error as err:
        raise ValueError(f"{where}: regex {pattern!r} does not compile as Python re ({err})") from None


def compile_pattern(spec: dict, where: str) -> re.Pattern:
    """A Split / Replace `pattern` field: {"String": literal} or {"Regex": oniguruma pattern}."""
    if "String" in spec:
        return re.compile(re.escape(spec["String"]))
    if "Regex" in spec:
        return translate_regex(spec["Regex"], where)
    raise ValueError(f"{where}: pattern {spec!r} is neither String nor Regex")


def _hangul_kind(cp: int) -> str:
    if 0x1100 <= cp <= 0x115F or 0xA960 <= cp <= 0xA97C:
        return "L"
    if 0x1160 <= cp <= 0x11A7 or 0xD7B0 <= cp <= 0xD7C6:
        return "V"
    if 0x11A8 <= cp <= 0x11FF or 0xD7CB <= cp <= 0xD7FB:
        return "T"
    if 0xAC00 <= cp <= 0xD7A3:
        return "LV" if (cp - 0xAC00) % 28 == 0 else "LVT"
    return ""


def _is_control(ch: str) -> bool:
    return unicodedata.category(ch) in ("Cc", "Zl", "Zp") or (
        unicodedata.category(ch) == "Cf" and ch not in "\u200c\u200d")


def _is_extend(ch: str) -> bool:
    cp = ord(ch)
    return (unicodedata.category(ch) in ("Mn", "Me", "Mc") or cp in (0x200C, 0x200D, 0xFF9E, 0xFF9F)
            or 0x1F3FB <= cp <= 0x1F3FF or 0xE0020 <= cp <= 0xE007F)


def _is_pictographic(ch: str) -> bool:
    cp = ord(ch)
    return 0x1F000 <= cp <= 0x1FAFF or (cp >= 0xA9 and unicodedata.category(ch) == "So")


def _joins(cluster: str, ch: str) -> bool:
    """No grapheme break between `cluster` and `ch` (the UAX #29 rules that matter for prompts)."""
    last = cluster[-1]
    if last == "\r":
        return ch == "\n"
    if _is_control(last) or _is_control(ch):
        return False
    a, b = _hangul_kind(ord(last)), _hangul_kind(ord(ch))
    if (a == "L" and b in ("L", "V", "LV", "LVT")) or (a in ("LV", "V") and b in ("V", "T")) or (
            a in ("LVT", "T") and b == "T"):
        return True
    if _is_extend(ch):
        return True
    if last == "\u200d" and _is_pictographic(ch) and any(_is_pictographic(c) for c in cluster):
        return True
    ri = lambda c: 0x1F1E6 <= ord(c) <= 0x1F1FF                      # noqa: E731
    return ri(ch) and all(ri(c) for c in cluster) and len(cluster) % 2 == 1


def graphemes(text: str) -> list[str]:
    out: list[str] = []
    for ch in text:
        if out and _joins(out[-1], ch):
            out[-1] += ch
        else:
            out.append(ch)
    return out
