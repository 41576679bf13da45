"""The Python runtime's tokenizers: Hugging Face `tokenizers` itself (the reference the native core's
device_runtime/src/text is checked against, tests/test_native_tokenizer.py), called as `transformers` calls it in the
diffusers pipelines: tokenizer(text, padding="max_length", max_length=max_len, truncation=True).

    TextTokenizer.from_file(tokenizer.json, max_len, pad_id)   generation.text.kind "pipeline": each encoder's file
                                                               (FLUX's CLIP and T5, SANA's Gemma-2), pad_id from the
                                                               manifest
    TextTokenizer.from_wordpiece_vocab(vocab.txt, max_len)      kind "minilm": BERT-uncased WordPiece as MiniLM's own
                                                               tokenizer.json describes it (BertNormalizer with
                                                               lower case and accents stripped, BertPreTokenizer,
                                                               [CLS] $A [SEP], the special tokens matched literally)

encode(text) -> (input_ids, attention_mask), each max_len long: the text's tokens cut so the post-processor's special
tokens fit, then padded on the right with pad_id (mask 0 there). count_tokens(text): the untruncated length with the
special tokens (generation refuses an over-long prompt with it).
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

BERT_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


class TextTokenizer:
    def __init__(self, tokenizer: Tokenizer, max_len: int, pad_id: int):
        self.max_len, self.pad_id = int(max_len), int(pad_id)
        self.full = Tokenizer.from_str(tokenizer.to_str())          # no truncation, no padding: count_tokens
        self.full.no_truncation()
        self.full.no_padding()
        self.fixed = Tokenizer.from_str(tokenizer.to_str())         # the pipelines' call
        self.fixed.enable_truncation(self.max_len)
        self.fixed.enable_padding(length=self.max_len, pad_id=self.pad_id,
                                  pad_token=self.fixed.id_to_token(self.pad_id) or "<pad>")

    @classmethod
    def from_file(cls, path: str | Path, max_len: int, pad_id: int) -> "TextTokenizer":
        """A tokenizer.json; ValueError naming the file when `tokenizers` cannot read it."""
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as err:                        # tokenizers raises its own Exception subclass
            raise ValueError(f"{path}: not a tokenizer.json `tokenizers` reads ({err})") from None
        return cls(tokenizer, max_len, pad_id)

    @classmethod
    def from_wordpiece_vocab(cls, path: str | Path, max_len: int) -> "TextTokenizer":
        """MiniLM's vocab.txt (one token a line, id = line number) as BERT-uncased WordPiece."""
        vocab = models.WordPiece.read_file(str(path))
        missing = [t for t in ("[UNK]", "[CLS]", "[SEP]", "[PAD]") if t not in vocab]
        if missing:
            raise ValueError(f"{path}: {missing[0]} is not in the vocabulary")
        tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="##",
                                         max_input_chars_per_word=100))
        tok.add_special_tokens([t for t in BERT_SPECIALS if t in vocab])
        tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                                    lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
        return cls(tok, max_len, vocab["[PAD]"])

    def encode(self, text: str) -> tuple[list[int], list[int]]:
        e = self.fixed.encode(text)
        return e.ids, e.attention_mask

    def count_tokens(self, text: str) -> int:
        return len(self.full.encode(text).ids)
