"""Tiny random Gemma-2 text encoder (SANA's text_encoder is a Gemma2Model; SanaPipeline.encode_prompt reads
text_encoder(ids, attention_mask=mask)[0]): build, save folder + reference, fallback export to ExecuTorch XNNPACK
and ONNX opset 17. usage: python tiny_gemma.py OUTDIR"""
import os, sys
from pathlib import Path
import torch, onnx, onnxruntime as ort
sys.path.insert(0, os.path.dirname(__file__))
from minilm_common import maxdiff
from transformers import Gemma2Config, Gemma2Model
out = Path(sys.argv[1]); folder = out / "tiny_gemma2"
torch.manual_seed(0)
g = Gemma2Model(Gemma2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=64,
                             pad_token_id=0)).eval()
g.save_pretrained(folder)
ids = torch.tensor([[2, 10, 11, 12, 13, 14, 0, 0]]); mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0, 0]])
with torch.no_grad():
    ref = g(ids, attention_mask=mask)[0]
torch.save({"ids": ids, "mask": mask, "hidden": ref}, out / "tiny_gemma2_refs.pt")
print("saved tiny Gemma-2 + ref", tuple(ref.shape))


class Enc(torch.nn.Module):
    def __init__(self, m): super().__init__(); self.m = m
    def forward(self, ids, mask): return self.m(ids, attention_mask=mask)[0]


enc = Enc(g).eval()
from executorch.exir import to_edge_transform_and_lower
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer
try:
    with torch.no_grad():
        ep = torch.export.export(enc, (ids, mask), strict=False)
    prog = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
    y = _load_for_executorch_from_buffer(prog.buffer).forward((ids, mask))[0]
    print(f"fallback ExecuTorch xnnpack tiny gemma2: max|diff| {maxdiff(y, ref):.2e}")
except Exception as e:
    print(f"fallback ExecuTorch tiny gemma2 FAILED: {type(e).__name__}: {str(e)[:800]}")
try:
    path = out / "tiny_gemma2_opset17.onnx"
    with torch.no_grad():
        torch.onnx.export(enc, (ids, mask), str(path), dynamo=False, opset_version=17,
                          input_names=["input_ids", "attention_mask"], output_names=["hidden"])
    y = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
    print(f"fallback ONNX opset 17 tiny gemma2: IR {onnx.load(str(path)).ir_version} max|diff| {maxdiff(y, ref):.2e}")
except Exception as e:
    print(f"fallback ONNX tiny gemma2 FAILED: {type(e).__name__}: {str(e)[:800]}")
