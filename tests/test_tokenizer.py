"""The phone-side tokenizer.json port (ditskip_edge/runtime/tokenizer/) against `transformers` itself, on tiny
tokenizers of the real styles (FLUX's CLIP and T5, SANA's Gemma-2) that ditskip_edge/models/tiny_tokenizers.py
trains here.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ditskip_edge.models import tiny_tokenizers as tt
from ditskip_edge.runtime.tokenizer import HFTokenizer
from ditskip_edge.runtime.tokenizer.normalizers import Precompiled
from ditskip_edge.runtime.tokenizer.unicode import graphemes

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


@pytest.fixture(scope="module")
def built():
    """style -> (transformers tokenizer as the pipeline calls it, its tokenizer.json as a dict)."""
    out = {}
    for style, (build, _) in STYLES.items():
        tok = build()
        tok.padding_side = "right"              # SanaPipeline.encode_prompt sets this (Gemma's class pads left)
        out[style] = (tok, json.loads(tok.backend_tokenizer.to_str()))
    return out


def _mismatches(tok, port: HFTokenizer, texts: list[str], max_len: int) -> list[str]:
    ref = tok(texts, padding="max_length", max_length=max_len, truncation=True)
    bad = []
    for text, ids, mask in zip(texts, ref["input_ids"], ref["attention_mask"]):
        got = port.encode(text)
        if got != (ids, mask):
            bad.append(f"{text[:80]!r}: transformers {ids[:24]}... port {got[0][:24]}...")
    return bad


@pytest.mark.parametrize("style", list(STYLES))
def test_port_gives_the_transformers_ids_and_mask_on_every_prompt(built, style):
    tok, doc = built[style]
    max_len = STYLES[style][1]
    texts = prompts()
    assert len(texts) >= 300
    bad = _mismatches(tok, HFTokenizer.from_json(doc, max_len=max_len), texts, max_len)
    assert not bad, f"{len(bad)} of {len(texts)} prompts differ:\n" + "\n".join(bad[:10])


@pytest.mark.parametrize("style", list(STYLES))
def test_truncation_keeps_the_special_tokens_and_fills_max_len(built, style):
    tok, doc = built[style]
    max_len = STYLES[style][1]
    port = HFTokenizer.from_json(doc, max_len=max_len)
    ids, mask = port.encode(LONG)
    assert port.count_tokens(LONG) > max_len and len(ids) == max_len and all(mask)
    if style == "clip":
        assert ids[0] == tok.bos_token_id and ids[-1] == tok.eos_token_id
    if style == "t5":
        assert ids[-1] == tok.eos_token_id
    if style == "gemma":
        assert ids[0] == tok.bos_token_id


@pytest.mark.parametrize("style", list(STYLES))
def test_count_tokens_is_the_untruncated_transformers_length(built, style):
    tok, doc = built[style]
    port = HFTokenizer.from_json(doc, max_len=STYLES[style][1])
    texts = prompts()
    ref = tok(texts)["input_ids"]
    assert [port.count_tokens(t) for t in texts] == [len(ids) for ids in ref]


def test_padding_false_returns_the_unpadded_ids(built):
    tok, doc = built["clip"]
    port = HFTokenizer.from_json(doc, max_len=77, padding=False)
    text = "a photo of sks dog"
    assert port.encode(text) == (tok(text)["input_ids"], tok(text)["attention_mask"])


def test_from_file_reads_a_saved_tokenizer_json(built, tmp_path):
    tok, _ = built["t5"]
    tok.save_pretrained(tmp_path)
    port = HFTokenizer.from_file(tmp_path / "tokenizer.json", max_len=512)
    assert _mismatches(tok, port, tt.training_prompts()[:20] + HELD_OUT[:20], 512) == []


def older_t5_layout(doc: dict) -> dict:
    """T5's tokenizer.json as an older converter wrote it: Sequence[Precompiled, Strip(right), Replace(" {2,}" ->
    "▁")] and Metaspace with add_prefix_space=true and no prepend_scheme / split."""
    from tokenizers import Regex, Tokenizer, normalizers
    backend = Tokenizer.from_str(json.dumps(doc))
    backend.normalizer = normalizers.Sequence([backend.normalizer, normalizers.Strip(left=False, right=True),
                                               normalizers.Replace(Regex(" {2,}"), "▁")])
    old = json.loads(backend.to_str())
    meta = old["pre_tokenizer"]["pretokenizers"][1]
    del meta["prepend_scheme"], meta["split"]
    meta["add_prefix_space"] = True
    return old


def older_clip_layout(doc: dict) -> dict:
    """CLIP's tokenizer.json as CLIPConverter of older transformers wrote it: the Split regex without the
    <|startoftext|> / <|endoftext|> alternatives."""
    old = json.loads(json.dumps(doc))
    old["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = \
        r"""'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""
    return old


def test_older_t5_layout_normalizer_and_metaspace_fields_tokenize_the_same(built):
    """FLUX's tokenizer_2/tokenizer.json may come from an older converter: Sequence[Precompiled, Strip(right),
    Replace(" {2,}" -> "▁")] and Metaspace written as add_prefix_space=true without prepend_scheme."""
    _, doc = built["t5"]
    assert_port_equals_tokenizers(older_t5_layout(doc), 512, 0, "<pad>")


def assert_port_equals_tokenizers(doc: dict, max_len: int, pad_id: int, pad_token: str) -> None:
    """HFTokenizer on `doc` gives `tokenizers`' own ids and mask (truncated and padded to max_len) on every prompt."""
    from tokenizers import Tokenizer
    backend = Tokenizer.from_str(json.dumps(doc))
    backend.enable_truncation(max_len)
    backend.enable_padding(length=max_len, pad_id=pad_id, pad_token=pad_token)
    port = HFTokenizer.from_json(doc, max_len=max_len)
    for text in prompts():
        ref = backend.encode(text)
        assert port.encode(text) == (ref.ids, ref.attention_mask), text


def test_gemma_file_without_pre_tokenizer_tokenizes_like_tokenizers(built):
    """The real Gemma-2 tokenizer.json has pre_tokenizer null (the class built here adds a no-op Split)."""
    _, doc = built["gemma"]
    doc = dict(doc, pre_tokenizer=None)
    assert_port_equals_tokenizers(doc, 300, 0, "<pad>")


def test_older_clip_layout_split_pattern_tokenizes_the_same(built):
    """CLIPConverter (older transformers, likely what FLUX's tokenizer/tokenizer.json was saved with) writes the Split
    regex without the <|startoftext|>/<|endoftext|> alternatives."""
    tok, doc = built["clip"]
    assert_port_equals_tokenizers(older_clip_layout(doc), 77, tok.pad_token_id, tok.pad_token)


def test_added_tokens_match_as_tokenizers_matches_them(built):
    """Normalized (lower-cased) added tokens, lstrip/rstrip and single_word behave as in `tokenizers`."""
    from tokenizers import AddedToken, Tokenizer
    _, doc = built["clip"]
    backend = Tokenizer.from_str(json.dumps(doc))
    backend.add_tokens([AddedToken("Sks Dog", normalized=True), AddedToken("toy", single_word=True, normalized=False)])
    backend.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True, normalized=False)])
    port = HFTokenizer.from_json(json.loads(backend.to_str()), max_len=77, padding=False)
    texts = ["a photo of SKS DOG and sks dog", "a toy, toys, my_toy, toy", "left   <mask>   right", "<mask><mask>",
             "x <mask>", "sks dogs <|endoftext|><mask> toy"] + HELD_OUT[:30]
    for text in texts:
        assert port.encode(text)[0] == backend.encode(text).ids[:77], text


@pytest.mark.parametrize("fuse_unk,byte_fallback", [(False, False), (True, False), (True, True)])
def test_unknown_characters_become_unk_or_bytes_as_tokenizers_does(fuse_unk, byte_fallback):
    """A BPE whose alphabet lacks the prompt's characters: unk per character, fused runs, or <0xNN> bytes."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    t = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=fuse_unk, byte_fallback=byte_fallback))
    t.normalizer = normalizers.Replace(" ", "▁")
    t.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    specials = ["<pad>", "<unk>"] + ([f"<0x{b:02X}>" for b in range(0x80, 0x100)] if byte_fallback else [])
    ascii_only = [p.encode("ascii", "ignore").decode() for p in tt.training_prompts()]
    t.train_from_iterator(ascii_only, trainers.BpeTrainer(vocab_size=300, show_progress=False,
                                                          special_tokens=specials))
    port = HFTokenizer.from_json(json.loads(t.to_str()), max_len=64, padding=False)
    for text in ["café 東京 🌸🌸 naïve", "ZEBRA QUIXOTIC", "x東y", "東京東京", "é" * 5, "a photo of sks dog"]:
        assert port.encode(text)[0] == t.encode(text).ids[:64], text


def test_bpe_merges_lowest_rank_first_and_leftmost_on_ties():
    """Runs of a repeated pair merge from the left ("aaa" -> aa a); a lower-ranked merge wins over an earlier one."""
    from tokenizers import Tokenizer, models
    vocab = {"<unk>": 0, "a": 1, "b": 2, "aa": 3, "ab": 4, "aab": 5, "aaaa": 6, "ba": 7}
    t = Tokenizer(models.BPE(vocab, [("a", "b"), ("a", "a"), ("aa", "aa"), ("b", "a"), ("a", "ab")],
                             unk_token="<unk>"))
    port = HFTokenizer.from_json(json.loads(t.to_str()), max_len=32, padding=False)
    for word in ["aaa", "aaaaa", "aab", "abab", "baab", "aaaab", "babababa", "aacab"]:
        assert port.encode(word)[0] == t.encode(word).ids, word


def test_wordlevel_whitespace_tokenizer_of_older_tiny_folders():
    """The word-level tokenizers tiny FLUX folders were first written with (WordLevel + Whitespace) keep working."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    words = "<pad> <unk> </s> <s> a photo of sks toy dog cat on the table red blue".split()
    t = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=t, pad_token="<pad>", unk_token="<unk>", eos_token="</s>",
                                  model_max_length=16)
    port = HFTokenizer.from_json(json.loads(tok.backend_tokenizer.to_str()), max_len=16)
    texts = ["a photo of sks toy", "A red dog, on the table!", "", "unknown words here", "dog " * 20,
             "naïve café_x don't 12.5 東京"]
    assert _mismatches(tok, port, texts, 16) == []


def test_precompiled_charsmap_port_equals_tokenizers_normalizer():
    """SentencePiece's nmt_nfkc charsmap (read from the trie, applied per grapheme) gives `tokenizers`' output,
    including where it differs from plain NFKC (controls, zero-width spaces, fullwidth tilde)."""
    from tokenizers import normalizers
    charsmap = tt.nmt_nfkc_charsmap()
    ref, port = normalizers.Precompiled(charsmap), Precompiled(charsmap)
    singles = [chr(c) for c in range(0x3100)] + [chr(c) for c in range(0xFF00, 0xFFFF)]
    assert [port(c) for c in singles] == [ref.normalize_str(c) for c in singles]
    tricky = ["e\u0301", "a\u0308\u0301", "ｶﾞ", "ﾊﾟﾝ", "👨‍👩‍👧", "👍🏽", "❤️", "🇫🇷🇩🇪", "\u1100\u1161\u11a8", "\r\n",
              "x\u200by", "～~", "#\ufe0f\u20e3", "🏳️‍🌈"] + HELD_OUT
    assert [port(t) for t in tricky] == [ref.normalize_str(t) for t in tricky]
    assert graphemes("ｶﾞ👍🏽e\u0301\r\n🇫🇷🇩🇪") == ["ｶﾞ", "👍🏽", "e\u0301", "\r\n", "🇫🇷", "🇩🇪"]


@pytest.mark.parametrize("path,patch,needle", [
    ("normalizer", {"normalizer": {"type": "Sequence", "normalizers": [{"type": "BertNormalizer"}]}},
     "normalizer.normalizers[0]: type 'BertNormalizer' is not supported"),
    ("pre_tokenizer", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "WhitespaceSplit"}, {"type": "UnicodeScripts"}]}},
     "pre_tokenizer.pretokenizers[1]: type 'UnicodeScripts' is not supported"),
    ("regex class", {"pre_tokenizer": {"type": "Split", "pattern": {"Regex": r"\p{Han}+|\p{L}+"},
                                       "behavior": "Isolated", "invert": False}},
     r"pre_tokenizer: regex '\\p{Han}+|\\p{L}+': \p{Han} is not supported"),
    ("model", {"model": {"type": "WordPiece", "vocab": {"a": 0}}}, "model: type 'WordPiece' is not supported"),
    ("post_processor", {"post_processor": {"type": "Foo"}}, "post_processor: type 'Foo' is not supported"),
])
def test_unsupported_component_raises_value_error_naming_its_path(built, path, patch, needle):
    _, doc = built["t5"]
    with pytest.raises(ValueError) as err:
        HFTokenizer.from_json(dict(doc, **patch), max_len=512)
    assert needle in str(err.value)


def test_from_file_errors_name_the_file(built, tmp_path):
    _, doc = built["clip"]
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(dict(doc, normalizer={"type": "BertNormalizer"})), encoding="utf-8")
    with pytest.raises(ValueError, match=r"tokenizer\.json: normalizer: type 'BertNormalizer'"):
        HFTokenizer.from_file(path, max_len=77)


@pytest.mark.parametrize("style", list(STYLES))
def test_tiny_tokenizer_builds_are_deterministic(style):
    """Other code (tiny model folders) sizes embeddings by these vocabularies: a rebuild must be the same file."""
    build = STYLES[style][0]
    assert build().backend_tokenizer.to_str() == build().backend_tokenizer.to_str()


def test_port_imports_nothing_but_the_standard_library():
    code = ("import sys, ditskip_edge.runtime.tokenizer as m; "
            "print(sorted({n.split('.')[0] for n in sys.modules} & "
            "{'torch', 'numpy', 'regex', 'tokenizers', 'transformers', 'sentencepiece'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parent.parent))
    assert out.stdout.strip() == "[]"
