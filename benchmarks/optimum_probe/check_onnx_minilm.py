"""Load an ONNX MiniLM (optimum's feature-extraction export: inputs input_ids/attention_mask/token_type_ids,
output last_hidden_state) in onnxruntime, apply the project's masking + pooling in numpy, compare with the
project's encoder (refs saved under transformers 5.24.0). usage: python check_onnx_minilm.py MODEL.onnx REFS.pt"""
import sys, os
import numpy as np, onnx, onnxruntime as ort, torch
from tokenizers import Tokenizer
sys.path.insert(0, os.path.dirname(__file__))
from minilm_common import PROMPTS, SEQ_LEN, maxdiff

path, refs = sys.argv[1], torch.load(sys.argv[2])
mp = onnx.load(path)
print("onnx", onnx.__version__, "ort", ort.__version__, "| IR", mp.ir_version, "opsets",
      [(o.domain or "ai.onnx", o.version) for o in mp.opset_import], "| producer", mp.producer_name, mp.producer_version)
s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
print("inputs", [(i.name, i.shape) for i in s.get_inputs()], "outputs", [(o.name, o.shape) for o in s.get_outputs()])
tok = Tokenizer.from_file(os.path.join(os.path.dirname(path), "tokenizer.json"))
tok.enable_padding(length=SEQ_LEN, pad_id=0); tok.enable_truncation(SEQ_LEN)
w = [0.0, 0.0]
for p in PROMPTS:
    e = tok.encode(p)
    feed = {"input_ids": np.array([e.ids], np.int64), "attention_mask": np.array([e.attention_mask], np.int64),
            "token_type_ids": np.array([e.type_ids], np.int64)}
    feed = {k: v for k, v in feed.items() if k in {i.name for i in s.get_inputs()}}
    hidden = s.run(None, feed)[0]
    m = feed["attention_mask"].astype(np.float32)
    txt = hidden * m[..., None]
    mean = txt.sum(1) / m.sum(1, keepdims=True)
    pooled = mean / np.maximum(np.linalg.norm(mean, axis=-1, keepdims=True), 1e-12)
    w = [max(w[0], maxdiff(txt, refs[p][0])), max(w[1], maxdiff(pooled, refs[p][1]))]
print(f"ORT max|diff| vs project: txt {w[0]:.2e} pooled {w[1]:.2e} over {len(PROMPTS)} prompts")
