"""The `added_tokens` step, first of all: tokens found literally in the text become whole tokens, leftmost-longest:
normalized=false ones in the raw text, then normalized=true ones (their normalized form) in the normalized text of
what is left; lstrip / rstrip / single_word as `tokenizers` applies them.
"""

from __future__ import annotations

import re

from .unicode import is_space, is_word_char


class AddedTokens:
    """`added_tokens`: whole tokens matched in the text before the model sees it (leftmost-longest)."""

    def __init__(self, entries: list[dict], normalize):
        self.raw, self.normed = {}, {}                 # matched text -> entry
        for e in entries:
            if not e["content"]:
                continue
            if e.get("normalized", not e.get("special", False)):
                self.normed[normalize(e["content"])] = e
            else:
                self.raw[e["content"]] = e
        self.raw_re, self.normed_re = self._regex(self.raw), self._regex(self.normed)

    @staticmethod
    def _regex(table: dict) -> re.Pattern | None:
        if not table:
            return None
        return re.compile("|".join(re.escape(t) for t in sorted(table, key=len, reverse=True)))

    @staticmethod
    def split(text: str, regex: re.Pattern | None, table: dict) -> list[tuple[int, int, int | None]]:
        """(start, end, token id or None) covering text, with lstrip / rstrip / single_word applied."""
        if regex is None or not text:
            return [(0, len(text), None)]
        out, done = [], 0
        for m in regex.finditer(text):
            start, stop = m.span()
            e = table[m.group()]
            if e.get("single_word"):
                if (start > 0 and is_word_char(text[start - 1])) or (stop < len(text) and is_word_char(text[stop])):
                    continue
            if e.get("lstrip"):
                left = start
                while left > 0 and is_space(text[left - 1]):
                    left -= 1
                start = max(left, done)
            if e.get("rstrip"):
                while stop < len(text) and is_space(text[stop]):
                    stop += 1
            if done < start:
                out.append((done, start, None))
            out.append((start, stop, e["id"]))
            done = stop
        if done != len(text):
            out.append((done, len(text), None))
        return out
