"""BERT-uncased WordPiece tokenization on the device (what MiniLM's tokenizer.json describes), numpy-free and
dependency-free; the bundle carries the vocabulary (one token a line, line number = id).

    BertNormalizer   clean text (drop NUL, U+FFFD and control characters but tab/newline/CR; whitespace -> " "),
                     space out CJK ideographs, lower-case, strip accents (NFD, drop combining marks)
    BertPreTokenizer split on whitespace, and every punctuation character is a word of its own
    WordPiece        greedy longest match, continuation pieces prefixed "##"; a word with no match, or longer
                     than 100 characters, is [UNK]
    template         [CLS] pieces [SEP], padded with [PAD] to the encoder's length; attention mask 1 on real tokens

Checked against Hugging Face `tokenizers` on MiniLM's own tokenizer.json (tests/test_generation.py; the reference
port and its 500-prompt check: docs/optimum.md section 5). Generation
refuses a prompt whose pieces do not fit (`count_tokens`) instead of truncating it.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

MAX_WORD_CHARS = 100
CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
              (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def load_vocab(path: str | Path) -> dict[str, int]:
    with open(path, encoding="utf-8") as f:
        return {line.rstrip("\n"): i for i, line in enumerate(f)}


def _is_punct(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in CJK_RANGES)


def basic_words(text: str) -> list[str]:
    """BertNormalizer + BertPreTokenizer: the words WordPiece splits."""
    out = []
    for ch in text:
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD or (unicodedata.category(ch).startswith("C") and ch not in "\t\n\r"):
            continue
        if ch in " \t\n\r" or unicodedata.category(ch) == "Zs":
            out.append(" ")
        elif _is_cjk(cp):
            out.append(f" {ch} ")
        else:
            out.append(ch)
    text = unicodedata.normalize("NFD", "".join(out).lower())
    text = "".join(c for c in text if unicodedata.category(c) != "Mn")
    words = []
    for w in text.split():
        cur = ""
        for ch in w:
            if _is_punct(ch):
                if cur:
                    words.append(cur)
                    cur = ""
                words.append(ch)
            else:
                cur += ch
        if cur:
            words.append(cur)
    return words


class WordPiece:
    def __init__(self, vocab: dict[str, int], max_len: int, unk: str = "[UNK]", cls: str = "[CLS]",
                 sep: str = "[SEP]", pad: str = "[PAD]"):
        self.vocab, self.max_len = vocab, int(max_len)
        self.unk, self.cls, self.sep, self.pad = vocab[unk], vocab[cls], vocab[sep], vocab[pad]

    @staticmethod
    def from_file(path: str | Path, max_len: int) -> "WordPiece":
        return WordPiece(load_vocab(path), max_len)

    def pieces(self, word: str) -> list[int]:
        if len(word) > MAX_WORD_CHARS:
            return [self.unk]
        ids, start = [], 0
        while start < len(word):
            end, found = len(word), None
            while start < end:
                piece = ("##" if start > 0 else "") + word[start:end]
                if piece in self.vocab:
                    found = self.vocab[piece]
                    break
                end -= 1
            if found is None:
                return [self.unk]
            ids.append(found)
            start = end
        return ids

    def token_ids(self, text: str) -> list[int]:
        """The prompt's pieces without [CLS]/[SEP] or padding."""
        return [i for w in basic_words(text) for i in self.pieces(w)]

    def count_tokens(self, text: str) -> int:
        """Tokens the encoder would read, [CLS] and [SEP] included."""
        return len(self.token_ids(text)) + 2

    def encode(self, text: str) -> tuple[list[int], list[int]]:
        """(input_ids, attention_mask), each max_len long; pieces beyond max_len - 2 are cut (HF truncation)."""
        ids = [self.cls] + self.token_ids(text)[: self.max_len - 2] + [self.sep]
        mask = [1] * len(ids) + [0] * (self.max_len - len(ids))
        return ids + [self.pad] * (self.max_len - len(ids)), mask
