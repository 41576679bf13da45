"""Fallback (no optimum): torch.export of the MiniLM encoder -> ExecuTorch (portable, XNNPACK) and
torch.onnx.export (TorchScript exporter, opset 16 / 17) -> onnxruntime. Compares with the project's encoder.
usage: python fallback_export.py OUTDIR [attn_impl]"""
import sys, time, os
import torch
import onnx, onnxruntime as ort
sys.path.insert(0, os.path.dirname(__file__))
from minilm_common import PROMPTS, load, tokenize, reference, maxdiff

out = sys.argv[1]; os.makedirs(out, exist_ok=True)
attn = sys.argv[2] if len(sys.argv) > 2 else None
import transformers, executorch
print("torch", torch.__version__, "transformers", transformers.__version__, "onnx", onnx.__version__,
      "onnxruntime", ort.__version__, "attn", attn)
MODEL_DIR, tok, enc = load(attn)
print("attn_implementation in use:", enc.bert.config._attn_implementation)
refs = {p: reference(tok, enc.bert, p) for p in PROMPTS}
# the project's own class as a cross-check (PYTHONPATH=/work/main)
try:
    from ditskip_edge.models.loading import resolve_spec
    from ditskip_edge.models.text import MiniLMTextEncoder
    c = MiniLMTextEncoder(resolve_spec("flux-testbed")).encode_batch([PROMPTS[0]])
    print("project MiniLMTextEncoder vs restated reference: txt", maxdiff(c["txt"], refs[PROMPTS[0]][0]),
          "pooled", maxdiff(c["pooled"], refs[PROMPTS[0]][1]))
except Exception as e:
    print("project encoder not importable:", type(e).__name__, e)
example = tokenize(tok, PROMPTS[0])          # has padding: the mask must stay an input, not a constant

# ---- ExecuTorch
from executorch.exir import to_edge, to_edge_transform_and_lower
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer
t = time.time()
with torch.no_grad():
    ep = torch.export.export(enc, example, strict=False)
print(f"torch.export ok ({time.time()-t:.1f}s)")
for backend in ("portable", "xnnpack"):
    t = time.time()
    try:
        edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]) if backend == "xnnpack" else to_edge(ep)
        prog = edge.to_executorch()
        path = os.path.join(out, f"minilm_{backend}.pte")
        open(path, "wb").write(prog.buffer)
        m = _load_for_executorch_from_buffer(prog.buffer)
        worst = [0.0, 0.0]
        for p in PROMPTS:
            txt, pooled = m.forward(tokenize(tok, p))
            worst = [max(worst[0], maxdiff(txt, refs[p][0])), max(worst[1], maxdiff(pooled, refs[p][1]))]
        print(f"ExecuTorch {backend}: {os.path.getsize(path)/1e6:.1f} MB, {time.time()-t:.1f}s, "
              f"max|diff| txt {worst[0]:.2e} pooled {worst[1]:.2e} over {len(PROMPTS)} prompts")
    except Exception as e:
        print(f"ExecuTorch {backend} FAILED: {type(e).__name__}: {str(e)[:600]}")

# ---- ONNX (TorchScript exporter; the dynamo exporter needs onnxscript)
for opset in (16, 17):
    path = os.path.join(out, f"minilm_opset{opset}.onnx")
    t = time.time()
    try:
        with torch.no_grad():
            torch.onnx.export(enc, example, path, dynamo=False, opset_version=opset,
                              input_names=["input_ids", "attention_mask"], output_names=["txt", "pooled"])
        mp = onnx.load(path); onnx.checker.check_model(mp)
        s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        worst = [0.0, 0.0]
        for p in PROMPTS:
            ids, mask = tokenize(tok, p)
            txt, pooled = s.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
            worst = [max(worst[0], maxdiff(txt, refs[p][0])), max(worst[1], maxdiff(pooled, refs[p][1]))]
        print(f"ONNX opset {opset}: IR {mp.ir_version}, opsets {[(o.domain, o.version) for o in mp.opset_import]}, "
              f"{os.path.getsize(path)/1e6:.1f} MB, {time.time()-t:.1f}s, ORT max|diff| txt {worst[0]:.2e} "
              f"pooled {worst[1]:.2e}")
    except Exception as e:
        print(f"ONNX opset {opset} FAILED: {type(e).__name__}: {str(e)[:600]}")
try:
    import onnxscript  # noqa
    print("onnxscript present")
except ImportError as e:
    print("dynamo=True exporter unavailable here:", e)
