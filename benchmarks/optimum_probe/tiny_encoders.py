"""Tiny FLUX text encoders (tests/tiny_pipeline.py: CLIP + T5, random weights, word-level tokenizers):
build the folder, save reference outputs, and run the no-optimum fallback (torch.export -> ExecuTorch XNNPACK,
torch.onnx.export opset 17 -> ORT). Runs in the pinned stack. usage: python tiny_encoders.py OUTDIR"""
import os, sys
import torch
import onnx, onnxruntime as ort
from pathlib import Path
sys.path.insert(0, os.path.dirname(__file__))
from minilm_common import maxdiff
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
sys.path.insert(0, "/work/main")
from tests.tiny_pipeline import save_tiny_flux_pipeline
folder = out / "tiny_flux"
if not (folder / "text_encoder_2").exists():
    save_tiny_flux_pipeline(folder)
from transformers import CLIPTextModel, T5EncoderModel, AutoTokenizer
import transformers
print("transformers", transformers.__version__)
clip = CLIPTextModel.from_pretrained(folder / "text_encoder").eval()
t5 = T5EncoderModel.from_pretrained(folder / "text_encoder_2").eval()
tk1 = AutoTokenizer.from_pretrained(folder / "tokenizer"); tk2 = AutoTokenizer.from_pretrained(folder / "tokenizer_2")
p = "a photo of sks toy on the table"
ids1 = tk1([p], padding="max_length", max_length=77, truncation=True, return_tensors="pt")["input_ids"]
ids2 = tk2([p], padding="max_length", max_length=16, truncation=True, return_tensors="pt")["input_ids"]
with torch.no_grad():       # what diffusers' FluxPipeline.encode_prompt reads (no attention masks)
    refs = {"clip_ids": ids1, "clip_pooled": clip(ids1, output_hidden_states=False).pooler_output,
            "t5_ids": ids2, "t5_hidden": t5(ids2, output_hidden_states=False)[0]}
torch.save(refs, out / "tiny_refs.pt")
print("saved refs", {k: tuple(v.shape) for k, v in refs.items()})


class ClipPooled(torch.nn.Module):
    def __init__(self, m): super().__init__(); self.m = m
    def forward(self, ids): return self.m(ids).pooler_output


class T5Hidden(torch.nn.Module):
    def __init__(self, m): super().__init__(); self.m = m
    def forward(self, ids): return self.m(ids)[0]


from executorch.exir import to_edge_transform_and_lower
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer
for name, mod, ids, ref in (("clip", ClipPooled(clip), ids1, refs["clip_pooled"]), ("t5", T5Hidden(t5), ids2, refs["t5_hidden"])):
    mod.eval()
    try:
        with torch.no_grad():
            ep = torch.export.export(mod, (ids,), strict=False)
        prog = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
        (out / f"tiny_{name}.pte").write_bytes(prog.buffer)
        y = _load_for_executorch_from_buffer(prog.buffer).forward((ids,))[0]
        print(f"fallback ExecuTorch xnnpack tiny {name}: max|diff| {maxdiff(y, ref):.2e}")
    except Exception as e:
        print(f"fallback ExecuTorch tiny {name} FAILED: {type(e).__name__}: {str(e)[:500]}")
    try:
        path = out / f"tiny_{name}_opset17.onnx"
        with torch.no_grad():
            torch.onnx.export(mod, (ids,), str(path), dynamo=False, opset_version=17, input_names=["input_ids"], output_names=["out"])
        mp = onnx.load(str(path))
        y = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"input_ids": ids.numpy()})[0]
        print(f"fallback ONNX opset 17 tiny {name}: IR {mp.ir_version}, ORT {ort.__version__} max|diff| {maxdiff(y, ref):.2e}")
    except Exception as e:
        print(f"fallback ONNX tiny {name} FAILED: {type(e).__name__}: {str(e)[:500]}")
