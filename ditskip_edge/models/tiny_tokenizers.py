"""Tiny tokenizers of the three real text-encoder styles, trained here on a prompt-like corpus (no downloads).

Each is the `transformers` fast tokenizer class the real pipeline loads, built from a vocabulary the way that class
builds it, so its tokenizer.json (`tok.backend_tokenizer.to_str()`) has the real file's component types and settings:

    clip_style_tokenizer()   FLUX `tokenizer` (CLIP): NFC + Replace(\\s+ -> " ") + Lowercase; Split(letters / digits /
                             other runs, Removed, inverted) + ByteLevel; BPE with "</w>" on a word's last symbol,
                             every byte char present alone and with "</w>" (CLIP's vocabulary layout);
                             RobertaProcessing <|startoftext|> $A <|endoftext|>; pad <|endoftext|>
    t5_style_tokenizer()     FLUX `tokenizer_2` (T5 v1.1): a SentencePiece unigram model trained with nmt_nfkc,
                             converted as T5Converter does: Precompiled charsmap; WhitespaceSplit + Metaspace(always,
                             split); Unigram (<pad> </s> <unk> first, <extra_id_99..0> last); TemplateProcessing
                             $A </s>; pad <pad>
    gemma_style_tokenizer()  SANA `tokenizer` (Gemma-2): Replace(" " -> "▁"); BPE with byte_fallback and fuse_unk,
                             <0x00>..<0xFF> in the vocabulary; TemplateProcessing <bos> $A; pad <pad>
                             (Gemma's class pads on the left; SanaPipeline sets padding_side = "right")

Deterministic: two builds give the same tokenizer.json. That is why the BPE merges come from `learn_bpe` here and
the unigram from SentencePiece: `tokenizers`' BpeTrainer breaks count ties by hash-map ids and its UnigramTrainer
sums floats in parallel, so their vocabularies change from build to build.
"""

from __future__ import annotations

import io
import re

SUBJECTS = ["a photo of sks dog", "a corgi puppy", "an old fisherman", "a red sports car", "the Eiffel Tower",
            "a cup of café au lait", "a naïve robot", "two cats", "a bowl of ramen", "my grandmother's teapot",
            "a castle made of glass", "an astronaut", "a golden retriever", "a vintage camera", "the city of 東京",
            "a smiling child", "a wooden sailboat", "a bouquet of tulips", "a Fennec fox", "a crème brûlée"]
PLACES = ["on a sunny beach", "in a misty forest", "at night, under neon lights", "on the moon", "in Paris",
          "near a mountain lake", "inside a cozy kitchen", "in the year 2049", "on a busy street in New York",
          "at the Zürich train station", "in a field of flowers", "beside a waterfall"]
STYLES = ["oil painting", "watercolor", "studio lighting, 85mm", "pixel art", "cinematic, 4k, highly detailed",
          "in the style of Van Gogh", "isometric 3D render", "black-and-white photograph", "anime style",
          "soft pastel colors 🌸"]
TEMPLATES = ["{s} {p}, {st}", "A picture of {s} {p}. {st}!", "{s}, {st}", "{S} {p} ({st})"]
N_PROMPTS = 200


def training_prompts() -> list[str]:
    """The 200 prompts the tiny vocabularies are learned from: subjects x places x styles, four templates."""
    out = []
    for i in range(N_PROMPTS):
        s, p, st = SUBJECTS[i % len(SUBJECTS)], PLACES[(i * 7) % len(PLACES)], STYLES[(i * 3 + i // 20) % len(STYLES)]
        out.append(TEMPLATES[i % len(TEMPLATES)].format(s=s, S=s.upper(), p=p, st=st))
    return out


def learn_bpe(words: list[list[str]], n_merges: int) -> list[tuple[str, str]]:
    """Classic BPE learning: merge the most frequent adjacent pair, n_merges times (ties: the smaller pair in string
    order; pairs seen once are not merged). `tokenizers`' BpeTrainer breaks ties by hash-map ids, so two builds could
    differ; this one cannot."""
    counts: dict[tuple[str, ...], int] = {}
    for w in words:
        counts[tuple(w)] = counts.get(tuple(w), 0) + 1
    merges: list[tuple[str, str]] = []
    for _ in range(n_merges):
        pairs: dict[tuple[str, str], int] = {}
        for w, c in counts.items():
            for pair in zip(w, w[1:]):
                pairs[pair] = pairs.get(pair, 0) + c
        if not pairs:
            break
        best = min(pairs, key=lambda pair: (-pairs[pair], pair))
        if pairs[best] < 2:
            break
        merges.append(best)
        merged: dict[tuple[str, ...], int] = {}
        for w, c in counts.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + c
        counts = merged
    return merges


def _add_merged(vocab: dict[str, int], merges: list[tuple[str, str]]) -> dict[str, int]:
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return vocab


def clip_style_tokenizer(vocab_size: int = 800):
    """CLIPTokenizer (what FluxPipeline loads as `tokenizer`) over a BPE learned here; model_max_length 77.
    Vocabulary laid out as CLIP's: 256 byte chars, the same with "</w>", merged tokens, <|startoftext|>,
    <|endoftext|> (bos = vocab - 2, eos = pad = vocab - 1)."""
    from tokenizers import Regex, normalizers, pre_tokenizers
    from transformers import CLIPTokenizerFast
    normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "),
                                       normalizers.Lowercase()])
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"""'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""),
                             behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False)])
    words = [list(w[:-1]) + [w[-1] + "</w>"] for p in training_prompts()
             for w, _ in pre.pre_tokenize_str(normalizer.normalize_str(p))]
    alphabet = [chr(c) for c in range(ord("!"), ord("~") + 1)] + [chr(c) for c in range(0xA1, 0xAD)] + \
        [chr(c) for c in range(0xAE, 0x100)] + [chr(256 + n) for n in range(68)]    # GPT-2 bytes_to_unicode
    vocab = {ch: i for i, ch in enumerate(alphabet + [ch + "</w>" for ch in alphabet])}
    merges = learn_bpe(words, vocab_size - len(vocab) - 2)
    vocab = _add_merged(vocab, merges)
    vocab.update({"<|startoftext|>": len(vocab), "<|endoftext|>": len(vocab) + 1})
    return CLIPTokenizerFast(vocab=vocab, merges=merges, model_max_length=77)


def t5_sentencepiece_model(vocab_size: int = 800):
    """A SentencePiece unigram model trained here as T5's spiece.model was: nmt_nfkc normalization,
    <pad>=0 </s>=1 <unk>=2, no <s> (SentencePiece's trainer is deterministic, `tokenizers`' UnigramTrainer sums
    floats in parallel). The corpus is small: the vocabulary stops near 180 pieces."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(training_prompts()), model_writer=buf,
                                   vocab_size=vocab_size, hard_vocab_limit=False, model_type="unigram",
                                   normalization_rule_name="nmt_nfkc", character_coverage=1.0, pad_id=0, eos_id=1,
                                   unk_id=2, bos_id=-1, num_threads=1, minloglevel=2)
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(buf.getvalue())
    return proto


def nmt_nfkc_charsmap() -> bytes:
    """SentencePiece's nmt_nfkc rules as the precompiled charsmap a T5 tokenizer.json carries."""
    return t5_sentencepiece_model().normalizer_spec.precompiled_charsmap


def t5_style_tokenizer(extra_ids: int = 100):
    """T5Tokenizer (FluxPipeline's `tokenizer_2`) over the SentencePiece unigram above, converted as T5Converter
    does (pieces and scores, then <extra_id_99..0>); model_max_length 512."""
    from transformers import T5TokenizerFast
    proto = t5_sentencepiece_model()
    vocab = [(p.piece, p.score) for p in proto.pieces]
    vocab += [(f"<extra_id_{i}>", 0.0) for i in range(extra_ids - 1, -1, -1)]
    return T5TokenizerFast(vocab=vocab, extra_ids=extra_ids,
                           _spm_precompiled_charsmap=proto.normalizer_spec.precompiled_charsmap, model_max_length=512)


def gemma_style_tokenizer(vocab_size: int = 700):
    """GemmaTokenizer (SanaPipeline's `tokenizer`) over a byte-fallback BPE learned here; model_max_length 300.
    Vocabulary: <pad> <eos> <bos> <unk> <mask>, <0x00>..<0xFF>, the corpus's characters, merged tokens; words
    start at each "▁" while learning (SentencePiece's split_by_whitespace), the text is one piece when encoding."""
    from transformers import GemmaTokenizerFast
    words = [list(w) for p in training_prompts() for w in re.findall(r"▁?[^▁]+|▁", p.replace(" ", "▁"))]
    vocab = {t: i for i, t in enumerate(["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
                                        + [f"<0x{b:02X}>" for b in range(256)])}
    for ch in sorted({ch for w in words for ch in w}):
        vocab.setdefault(ch, len(vocab))
    merges = learn_bpe(words, vocab_size - len(vocab))
    vocab = _add_merged(vocab, merges)
    return GemmaTokenizerFast(vocab=vocab, merges=merges, add_bos_token=True, model_max_length=300,
                              additional_special_tokens=["<start_of_turn>", "<end_of_turn>"])
