"""HFTokenizer: tokenizer.json -> (input_ids, attention_mask), the steps of this package in `tokenizers`' order,
then truncation and padding as `transformers` does them (see the package docstring)."""

from __future__ import annotations

import json
from pathlib import Path

from .added_tokens import AddedTokens
from .models import build_model, model_vocab
from .normalizers import build_normalizer
from .pre_tokenizers import build_pre_tokenizer
from .processors import build_post_processor


PAD_NAMES = ("<pad>", "<|endoftext|>", "[PAD]")


class HFTokenizer:
    """tokenizer.json -> (input_ids, attention_mask) as `transformers` returns them with padding="max_length",
    truncation=True. See the package docstring for the pipeline and the supported component types."""

    def __init__(self, doc: dict, max_len: int, padding: bool = True, pad_id: int | None = None):
        self.normalize = build_normalizer(doc.get("normalizer"))
        self.pre_tokenize = build_pre_tokenizer(doc.get("pre_tokenizer"))
        self.model = build_model(doc["model"])
        self.before, self.after = build_post_processor(doc.get("post_processor"))
        self.added = AddedTokens(doc.get("added_tokens") or [], self.normalize)
        self.max_len, self.padding = int(max_len), padding
        if self.max_len < len(self.before) + len(self.after):
            raise ValueError(f"max_len {max_len} leaves no room next to the post-processor's "
                             f"{len(self.before) + len(self.after)} special tokens")
        self.pad_id = pad_id if pad_id is not None else self._default_pad_id(doc)

    def _default_pad_id(self, doc: dict) -> int | None:
        if doc.get("padding"):
            return doc["padding"]["pad_id"]
        added = {e["content"]: e["id"] for e in doc.get("added_tokens") or []}
        vocab = model_vocab(self.model)
        for table in (added, vocab):
            for name in PAD_NAMES:
                if name in table:
                    return table[name]
        if self.padding:
            raise ValueError(f"no pad token: the JSON has no `padding` and none of {PAD_NAMES} is in the "
                             "vocabulary; pass pad_id")
        return None

    @classmethod
    def from_json(cls, doc: dict, max_len: int, padding: bool = True, pad_id: int | None = None) -> "HFTokenizer":
        return cls(doc, max_len, padding, pad_id)

    @classmethod
    def from_file(cls, path: str | Path, max_len: int, padding: bool = True,
                  pad_id: int | None = None) -> "HFTokenizer":
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        try:
            return cls(doc, max_len, padding, pad_id)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None

    def token_ids(self, text: str) -> list[int]:
        """The prompt's ids before the post-processor's special tokens, truncation and padding."""
        ids: list[int] = []
        for a, b, tid in self.added.split(text, self.added.raw_re, self.added.raw):
            if tid is not None:
                ids.append(tid)
                continue
            part = self.normalize(text[a:b])
            for c, d, tid2 in self.added.split(part, self.added.normed_re, self.added.normed):
                if tid2 is not None:
                    ids.append(tid2)
                elif d > c:                              # empty splits are dropped, as in `tokenizers`
                    for word, _ in self.pre_tokenize([(part[c:d], a == 0 and c == 0)]):
                        ids += self.model.tokenize(word)
        return ids

    def count_tokens(self, text: str) -> int:
        """Tokens the encoder would read without truncation, special tokens included."""
        return len(self.before) + len(self.token_ids(text)) + len(self.after)

    def encode(self, text: str) -> tuple[list[int], list[int]]:
        """(input_ids, attention_mask): pieces cut so that the specials fit in max_len, then padded to max_len."""
        room = self.max_len - len(self.before) - len(self.after)
        ids = self.before + self.token_ids(text)[:room] + self.after
        mask = [1] * len(ids)
        if self.padding:
            n_pad = self.max_len - len(ids)
            ids, mask = ids + [self.pad_id] * n_pad, mask + [0] * n_pad
        return ids, mask
