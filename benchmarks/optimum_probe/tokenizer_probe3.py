"""pytorch_tokenizers on the other encoders' tokenizer kinds, built here (no downloads):
 - CLIP-like tokenizer.json (the components of openai/clip-vit-large-patch14's: NFC+Replace+Lowercase normalizer,
   Split(regex)+ByteLevel pre-tokenizer, BPE with '</w>' suffix, BPEDecoder) -> CppHFTokenizer
 - a tiny SentencePiece unigram model (T5's kind: spiece.model) -> CppSPTokenizer vs sentencepiece
 - the tiny pipeline's word-level tokenizer.json -> CppHFTokenizer"""
import io, os, sys
import pytorch_tokenizers as pt
from tokenizers import Tokenizer, Regex, models, normalizers, pre_tokenizers, decoders, trainers
out = sys.argv[1]
text = ["a photo of sks toy on the table", "a red cube and a blue sphere", "the dog runs on the grass"] * 50

def try_load(name, path):
    t = pt.CppHFTokenizer()
    try:
        t.load(path); print(f"{name}: loaded; encode -> {t.encode('a photo of sks toy', 0, 0)}")
    except Exception as e:
        print(f"{name}: {type(e).__name__}: {e}")

clip = Tokenizer(models.BPE(unk_token="<|endoftext|>", end_of_word_suffix="</w>"))
clip.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()])
clip.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r"'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"), "removed", invert=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
clip.decoder = decoders.BPEDecoder(suffix="</w>")
clip.train_from_iterator(text, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|startoftext|>", "<|endoftext|>"], end_of_word_suffix="</w>"))
p = os.path.join(out, "clip_like_tokenizer.json"); clip.save(p)
print("CLIP-like via tokenizers:", clip.encode("a photo of sks toy").ids)
try_load("CLIP-like tokenizer.json", p)
clip.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " ")])
p2 = os.path.join(out, "clip_like_nolower.json"); clip.save(p2)
try_load("CLIP-like without Lowercase", p2)

sys.path.insert(0, "/work/main")
wl = os.path.join(out, "tiny_flux", "tokenizer_2", "tokenizer.json")
if os.path.exists(wl):
    try_load("tiny pipeline word-level tokenizer.json", wl)

import sentencepiece as spm
buf = io.BytesIO()
spm.SentencePieceTrainer.train(sentence_iterator=iter(text), model_writer=buf, vocab_size=30, model_type="unigram", minloglevel=2)
sp_path = os.path.join(out, "tiny_spiece.model"); open(sp_path, "wb").write(buf.getvalue())
ref = spm.SentencePieceProcessor(model_file=sp_path)
cpp = pt.CppSPTokenizer(); cpp.load(sp_path)
for s in ["a photo of sks toy", "the red dog on the table"]:
    print(f"SentencePiece {s!r}: sentencepiece {ref.encode(s)} | CppSPTokenizer {cpp.encode(s, 0, 0)}")
