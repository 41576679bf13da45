"""optimum-onnx 0.1.0 Python API (onnx_export_from_model + its diffusers text-encoder OnnxConfigs, which the CLI
refuses) on the tiny FLUX CLIP / T5 encoders and the tiny Gemma-2; ORT run vs references made under
transformers 5.24.0. Runs in the separate venv3 (transformers 4.57.6). usage: python oo_tiny_api.py OUTDIR"""
import os, sys
from pathlib import Path
import torch, onnx, onnxruntime as ort
from safetensors.torch import load_file
sys.path.insert(0, os.path.dirname(__file__))
from minilm_common import maxdiff
import transformers
from transformers import CLIPTextConfig, CLIPTextModel, T5EncoderModel, Gemma2Model
from optimum.exporters.onnx import onnx_export_from_model
from optimum.exporters.onnx.model_configs import CLIPTextOnnxConfig, T5EncoderOnnxConfig, Gemma2TextEncoderOnnxConfig
print("transformers", transformers.__version__, "onnx", onnx.__version__, "ort", ort.__version__)
out = Path(sys.argv[1]); flux = out / "tiny_flux"; refs = torch.load(out / "tiny_refs.pt"); grefs = torch.load(out / "tiny_gemma2_refs.pt")

# CLIP: transformers 5 saved the weights without the 'text_model.' prefix; 4.57.6 leaves them randomly initialised
clip = CLIPTextModel(CLIPTextConfig.from_pretrained(flux / "text_encoder")).eval()
sd = load_file(flux / "text_encoder" / "model.safetensors")
res = clip.load_state_dict({"text_model." + k: v for k, v in sd.items()}, strict=False)
print("CLIP load (prefixed):", res)
t5 = T5EncoderModel.from_pretrained(flux / "text_encoder_2").eval()
gem = Gemma2Model.from_pretrained(out / "tiny_gemma2").eval()
with torch.no_grad():
    print("eager in 4.57.6 vs 5.24 refs: clip pooled", maxdiff(clip(refs["clip_ids"]).pooler_output, refs["clip_pooled"]),
          "t5", maxdiff(t5(refs["t5_ids"])[0], refs["t5_hidden"]),
          "gemma2", maxdiff(gem(grefs["ids"], attention_mask=grefs["mask"])[0], grefs["hidden"]))

cases = [("clip", clip, CLIPTextOnnxConfig, {"input_ids": refs["clip_ids"]}, "pooler_output", refs["clip_pooled"]),
         ("t5", t5, T5EncoderOnnxConfig, {"input_ids": refs["t5_ids"]}, "last_hidden_state", refs["t5_hidden"]),
         ("gemma2", gem, Gemma2TextEncoderOnnxConfig, {"input_ids": grefs["ids"], "attention_mask": grefs["mask"]},
          "last_hidden_state", grefs["hidden"])]
for name, model, cfg_cls, feed, out_name, ref in cases:
    d = out / f"oo_api_{name}"
    try:
        cfg = cfg_cls(model.config, task="feature-extraction")
        onnx_export_from_model(model, d, opset=17, task="feature-extraction", custom_onnx_configs={"model": cfg},
                               do_validation=True)
        path = d / "model.onnx"
        mp = onnx.load(str(path))
        s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        names = [i.name for i in s.get_inputs()]
        outs = dict(zip([o.name for o in s.get_outputs()], s.run(None, {k: v.numpy() for k, v in feed.items() if k in names})))
        print(f"optimum-onnx API tiny {name}: IR {mp.ir_version} opset {mp.opset_import[0].version} inputs {names} "
              f"outputs {list(outs)} | ORT max|diff| {out_name} vs 5.24 ref {maxdiff(outs[out_name], ref):.2e}")
    except Exception as e:
        print(f"optimum-onnx API tiny {name} FAILED: {type(e).__name__}: {str(e)[:800]}")
