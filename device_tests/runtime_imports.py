"""The device process's import guard: a phone has the runtime package and the runtime libraries, nothing else.

`forbid_host_modules()` installs an import hook (first on sys.meta_path) that raises `ForbiddenImport` for the
compiler (`compiler` and every `ditskip_edge` module outside `ditskip_edge.runtime`), the exporters (`export`), the
libraries only the host has (diffusers, peft, transformers, torchao, onnx), the runtimes' compiler halves
(executorch.exir beyond its `_warnings` decorator module, executorch.backends, onnxruntime.training's offline
tooling) and torch's training and compilation machinery (torch.optim's optimizers are never imported by the runtime
package; autograd is torch-internal and cannot be kept out of `import torch`, which ExecuTorch's bindings need for
their tensors).
`host_modules_loaded()` lists any that got in anyway (checked at the end of every child run and by tests).

The runtimes' own imports (`ditskip_edge/runtime/bindings.py`) enter the mixed runtime/compiler packages bare.
"""

from __future__ import annotations

import sys

from ditskip_edge.runtime import bindings

FORBIDDEN = (
    "ditskip_edge", "compiler", "export", "diffusers", "peft", "transformers", "torchao", "onnx", "executorch.exir",
    "executorch.backends", "onnxruntime.training.artifacts", "onnxruntime.training.optim",
    "onnxruntime.training.ortmodule", "onnxruntime.training.onnxblock", "torch._dynamo", "torch._inductor",
    "torch.onnx",
)
# What a device process may import under those prefixes: the runtime package itself, and the `@experimental`
# decorator module the ExecuTorch bindings import.
ALLOWED = ("ditskip_edge", "ditskip_edge.runtime", "executorch.exir", "executorch.exir._warnings")
ALLOWED_PREFIXES = ("ditskip_edge.runtime.",)


def is_forbidden(name: str) -> bool:
    if name in ALLOWED or name.startswith(ALLOWED_PREFIXES):
        return False
    return any(name == p or name.startswith(p + ".") for p in FORBIDDEN)


class ForbiddenImport(ImportError):
    pass


class _Guard:
    """A meta-path finder that refuses FORBIDDEN modules (it sits first on sys.meta_path)."""

    def find_spec(self, name, path=None, target=None):
        if is_forbidden(name):
            raise ForbiddenImport(f"device process must not import {name!r} (host-side compiler / training code)")
        return None


def forbid_host_modules() -> None:
    loaded = host_modules_loaded()
    if loaded:
        raise ForbiddenImport(f"host-side modules already imported before the guard: {loaded[:5]}")
    sys.meta_path.insert(0, _Guard())


def host_modules_loaded() -> list[str]:
    return sorted(m for m in sys.modules if is_forbidden(m))


executorch_training = bindings.executorch_training
executorch_inference = bindings.executorch_inference
ort_training_api = bindings.ort_training_api
runtime_version = bindings.runtime_version
