"""Hugging Face tokenizer.json run without `tokenizers`: the subset the real text encoders of FLUX.1 (CLIP, T5) and
SANA (Gemma-2) use, numpy-free and stdlib-only, so the phone tokenizes a prompt exactly as the host's `transformers`
tokenizer(text, padding="max_length", max_length=max_len, truncation=True) does.

What `tokenizers`' Tokenizer.encode does, in order, and the module of this port that reads each step from the JSON
(its docstring lists the component types and settings it supports):

    added tokens     added_tokens.py    `added_tokens` found literally in the text become whole tokens first,
                                        leftmost-longest (normalized=false in the raw text, normalized=true in the
                                        normalized text of what is left)
    normalizer       normalizers.py     Sequence, NFC/NFD/NFKC/NFKD, Lowercase, Replace, Prepend, Strip,
                                        StripAccents, Precompiled (SentencePiece's charsmap)
    pre-tokenizer    pre_tokenizers.py  Sequence, Split, ByteLevel, Metaspace, Whitespace, WhitespaceSplit, Digits
    model            models.py          BPE, Unigram, WordLevel
    post-processor   processors.py      TemplateProcessing, RobertaProcessing, BertProcessing, ByteLevel, Sequence
    truncation       hf.py              pieces cut to max_len minus the post-processor's special tokens, so the
                                        specials survive
    padding          hf.py              right, with pad_id: the `padding.pad_id` of the JSON, else the first of
                                        <pad>, <|endoftext|>, [PAD] found in added_tokens, then in the model's
                                        vocabulary; attention mask 0 on pads

unicode.py holds what the steps share: character classes, the regex translation, grapheme clusters.

Any other component type raises ValueError naming its path in the JSON ("normalizer.normalizers[0]: type
'BertNormalizer' is not supported"); so do regexes with constructs Python's `re` cannot express the same way.

Approximations (exact on the tested prompts, tests/test_tokenizer.py):
  - Regexes are Oniguruma's (Rust `regex` for Whitespace) and run on Python `re`: \\p{L}, \\p{N}, \\s, \\w become
    explicit classes built from `unicodedata` (Unicode 14 in Python 3.11; `tokenizers` may ship newer tables, so
    characters assigned after Unicode 14 can class differently); \\w is L + Nl + M + Nd + Pc + ZWNJ/ZWJ (Rust's
    Alphabetic adds a few So characters such as circled letters). (unicode.py)
  - Precompiled: grapheme clusters are found by a short rule set (CR LF, controls, combining/extending marks,
    spacing marks, ZWJ emoji sequences, regional-indicator pairs, Hangul syllables), not the full UAX #29 tables.
    (unicode.py)
  - NFC/NFKC/lowercasing use Python's `unicodedata`, whose version can differ from the Rust crates'. (normalizers.py)
  - Metaspace prepend_scheme "first" treats a piece as the text's first when it starts the normalized text of the
    first added-token split; `tokenizers` asks for original offset 0, which differs only when a normalizer drops
    leading characters. (pre_tokenizers.py)
"""

from .hf import HFTokenizer

__all__ = ["HFTokenizer"]
