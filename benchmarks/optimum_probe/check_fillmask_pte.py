"""What the optimum-executorch fill-mask program returns (MiniLM folder): shape of its output."""
import sys, torch
from executorch.extension.pybindings.portable_lib import _load_for_executorch
m = _load_for_executorch(sys.argv[1])
print("methods:", m.method_names())
ids = torch.tensor([[101, 1037, 6302, 1997, 15315, 2015, 9121, 102]]); mask = torch.ones_like(ids)
out = m.forward((ids, mask))
print("outputs:", [tuple(o.shape) for o in out])
