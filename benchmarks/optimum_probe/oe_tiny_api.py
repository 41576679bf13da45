"""optimum-executorch 1.1.0 recipe (export_to_executorch, xnnpack) on the tiny FLUX CLIP / T5 encoders and tiny
Gemma-2 through a thin wrapper (no task of its own fits); compare with transformers 5.24.0 refs. venv2."""
import os, sys
from pathlib import Path
import torch
sys.path.insert(0, os.path.dirname(__file__))
from minilm_common import maxdiff
import transformers
from transformers import CLIPTextModel, T5EncoderModel, Gemma2Model
from optimum.exporters.executorch import export_to_executorch
from executorch.extension.pybindings.portable_lib import _load_for_executorch
print("transformers", transformers.__version__)
out = Path(sys.argv[1]); flux = out / "tiny_flux"; refs = torch.load(out / "tiny_refs.pt"); grefs = torch.load(out / "tiny_gemma2_refs.pt")


class Wrap(torch.nn.Module):
    def __init__(self, m, fn, example):
        super().__init__(); self.m, self.fn, self.example = m, fn, example
        self.config, self.metadata = m.config, {}
    def forward(self, *a): return self.fn(self.m, *a)
    def export(self):
        with torch.no_grad():
            return {"model": torch.export.export(self, self.example, strict=False)}


cases = [("clip", CLIPTextModel.from_pretrained(flux / "text_encoder"), lambda m, i: m(i).pooler_output,
          (refs["clip_ids"],), refs["clip_pooled"]),
         ("t5", T5EncoderModel.from_pretrained(flux / "text_encoder_2"), lambda m, i: m(i)[0],
          (refs["t5_ids"],), refs["t5_hidden"]),
         ("gemma2", Gemma2Model.from_pretrained(out / "tiny_gemma2"), lambda m, i, a: m(i, attention_mask=a)[0],
          (grefs["ids"], grefs["mask"]), grefs["hidden"])]
for name, model, fn, ex, ref in cases:
    try:
        model.eval()
        with torch.no_grad():
            e = maxdiff(fn(model, *ex), ref)
        d = out / f"oe_api_{name}"; d.mkdir(exist_ok=True)
        export_to_executorch(Wrap(model, fn, ex).eval(), task="feature-extraction", recipe="xnnpack", output_dir=d)
        y = _load_for_executorch(str(d / "model.pte")).forward(ex)[0]
        print(f"optimum-executorch recipe tiny {name}: eager(5.0.0rc1) vs ref {e:.2e}; .pte max|diff| {maxdiff(y, ref):.2e}")
    except Exception as e:
        print(f"optimum-executorch recipe tiny {name} FAILED: {type(e).__name__}: {str(e)[:800]}")
