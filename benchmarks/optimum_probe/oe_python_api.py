"""optimum-executorch 1.1.0 Python API for an encoder it has no task for: hand its recipe (`export_to_executorch`)
a module that has what the recipes read (.export() -> {name: ExportedProgram}, .config, .metadata).
usage: python oe_python_api.py OUTDIR REFS.pt [recipe]"""
import os, sys, time
import torch
sys.path.insert(0, os.path.dirname(__file__))
from minilm_common import PROMPTS, load, tokenize, reference, maxdiff

out, refs_path = sys.argv[1], sys.argv[2]
recipe = sys.argv[3] if len(sys.argv) > 3 else "xnnpack"
os.makedirs(out, exist_ok=True)
import transformers, optimum.executorch
from optimum.exporters.executorch import export_to_executorch
print("transformers", transformers.__version__)
MODEL_DIR, tok, enc = load()

# transformers 5.0.0rc1 (this venv) vs 5.24.0 (the project's env): same MiniLM numbers?
refs = torch.load(refs_path)
mine = {p: reference(tok, enc.bert, p) for p in PROMPTS}
print("this transformers vs 5.24.0 refs: max|diff| txt",
      max(maxdiff(mine[p][0], refs[p][0]) for p in PROMPTS), "pooled", max(maxdiff(mine[p][1], refs[p][1]) for p in PROMPTS))


class ExportableMiniLM(torch.nn.Module):
    def __init__(self, enc, tok):
        super().__init__()
        self.enc, self.config = enc, enc.bert.config
        self.metadata = {"get_max_seq_len": 16}            # constant methods written into the .pte

    def forward(self, input_ids, attention_mask):
        return self.enc(input_ids, attention_mask)

    def export(self):
        with torch.no_grad():
            return {"model": torch.export.export(self.enc, tokenize(tok, PROMPTS[0]), strict=False)}


t = time.time()
progs = export_to_executorch(ExportableMiniLM(enc, tok), task="feature-extraction", recipe=recipe, output_dir=out)
path = os.path.join(out, "model.pte")
print(f"export_to_executorch({recipe}) -> {path} {os.path.getsize(path)/1e6:.1f} MB in {time.time()-t:.1f}s")
from executorch.extension.pybindings.portable_lib import _load_for_executorch
m = _load_for_executorch(path)
print("methods", m.method_names())
w = [0.0, 0.0]
for p in PROMPTS:
    txt, pooled = m.forward(tokenize(tok, p))
    w = [max(w[0], maxdiff(txt, refs[p][0])), max(w[1], maxdiff(pooled, refs[p][1]))]
print(f"ExecuTorch via optimum-executorch recipe: max|diff| vs project (tf 5.24) txt {w[0]:.2e} pooled {w[1]:.2e}")
