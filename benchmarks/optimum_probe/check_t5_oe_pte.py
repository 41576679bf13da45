"""Run the 'encoder' method of an optimum-executorch text2text-generation .pte; compare with the tiny T5 ref."""
import sys, os, torch
sys.path.insert(0, os.path.dirname(__file__))
from minilm_common import maxdiff
from executorch.extension.pybindings.portable_lib import _load_for_executorch
m = _load_for_executorch(sys.argv[1]); refs = torch.load(sys.argv[2])
print("methods:", m.method_names())
y = m.run_method("encoder", (refs["t5_ids"],))[0]
print("encoder out", tuple(y.shape), f"max|diff| vs T5EncoderModel (tf 5.24) {maxdiff(y, refs['t5_hidden']):.2e}")
