"""Import the phone-side runtimes *without* their host-side halves, and forbid the compiler in this process.

A device has only the runtime library. On the host, the Python packages mix runtime and compiler:
- `executorch.extension.training` imports `executorch.exir` (the ExecuTorch compiler, which pulls torch.export,
  torchao, coremltools ...) only for an `@experimental` decorator in `executorch.exir._warnings`;
- `onnxruntime.training/__init__` imports `artifacts` and `optim` (onnx, torch) although the on-device API is
  `onnxruntime.training.api` (Module, Optimizer, CheckpointState) alone.
So both parents are entered as bare namespace packages (their `__init__` not run) and only the runtime modules are
loaded. ExecuTorch's Python bindings exchange `torch.Tensor`s, so `torch` itself (the tensor library) is loaded for
ExecuTorch; the device loop never uses autograd or torch.optim (AdamW is numpy, see device_loop.py). The ORT child
loads no torch at all.

`forbid_host_modules()` installs an import hook that raises on the compiler and the torch training code
(FORBIDDEN); `host_modules_loaded()` lists any that got in anyway (checked at the end of every child run).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path

# Prefixes that must never be imported by a device-side process: the host compiler (model adapters, skip model,
# LoRA injection, quantizer, exporters), the eager trainer, and the libraries only the host has.
FORBIDDEN = (
    "ditskip_edge.compile", "ditskip_edge.trainer", "ditskip_edge.skip_model", "ditskip_edge.bundle_model",
    "ditskip_edge.models", "ditskip_edge.lora", "ditskip_edge.quantize", "ditskip_edge.training_step",
    "ditskip_edge.patch_sampling", "ditskip_edge.selection", "ditskip_edge.commands",
    "export.executorch_program", "export.executorch_export", "export.executorch_memory", "export.graph_passes",
    "export.contract", "export.ort_export", "export.ort_graph", "export.ort_artifacts",
    "diffusers", "peft", "transformers", "torchao", "onnx", "executorch.exir", "executorch.backends",
    "onnxruntime.training.artifacts", "onnxruntime.training.optim", "onnxruntime.training.ortmodule",
    "torch._dynamo", "torch._inductor", "torch.onnx",
)
# Runtime modules that live under a forbidden prefix: the `@experimental` decorator the ExecuTorch bindings import.
ALLOWED = ("executorch.exir", "executorch.exir._warnings")


def _is_forbidden(name: str) -> bool:
    if name in ALLOWED:
        return False
    return any(name == p or name.startswith(p + ".") for p in FORBIDDEN)


class ForbiddenImport(ImportError):
    pass


class _Guard:
    """A meta-path finder that refuses FORBIDDEN modules (it sits first on sys.meta_path)."""

    def find_spec(self, name, path=None, target=None):
        if _is_forbidden(name):
            raise ForbiddenImport(f"device process must not import {name!r} (host-side compiler / training code)")
        return None


def forbid_host_modules() -> None:
    loaded = host_modules_loaded()
    if loaded:
        raise ForbiddenImport(f"host-side modules already imported before the guard: {loaded[:5]}")
    sys.meta_path.insert(0, _Guard())


def host_modules_loaded() -> list[str]:
    return sorted(m for m in sys.modules if _is_forbidden(m))


def _bare_package(name: str) -> None:
    """Enter package `name` in sys.modules with its real __path__ but without running its __init__."""
    if name in sys.modules:
        return
    parent, _, child = name.rpartition(".")
    if parent:
        _bare_package(parent)
        search = sys.modules[parent].__path__
    else:
        search = None
    spec = importlib.util.find_spec(name) if not parent else importlib.machinery.PathFinder.find_spec(name, search)
    if spec is None or spec.submodule_search_locations is None:
        raise ImportError(f"runtime package {name} is not installed")
    mod = types.ModuleType(name)
    mod.__path__ = list(spec.submodule_search_locations)
    mod.__spec__ = spec
    mod.__package__ = name
    sys.modules[name] = mod
    if parent:
        setattr(sys.modules[parent], child, mod)


def executorch_training():
    """-> the module holding `_load_for_executorch_for_training` (ExecuTorch's C++ TrainingModule pybindings)."""
    _bare_package("executorch.exir")          # only executorch.exir._warnings gets loaded from it
    return importlib.import_module("executorch.extension.training")


def ort_training_api():
    """-> onnxruntime.training.api (Module, Optimizer, CheckpointState), without onnx or torch."""
    importlib.import_module("onnxruntime")
    _bare_package("onnxruntime.training")
    return importlib.import_module("onnxruntime.training.api")


def runtime_version(runtime: str) -> str:
    try:
        if runtime == "executorch":
            from importlib.metadata import version
            return "executorch " + version("executorch")
        import onnxruntime
        return "onnxruntime-training " + onnxruntime.__version__
    except Exception:  # noqa: BLE001 - informational only
        return runtime


def package_root() -> Path:
    return Path(__file__).resolve().parent
