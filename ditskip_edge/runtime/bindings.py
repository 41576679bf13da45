"""Import the runtimes' on-device halves only.

On the host, both runtimes' Python packages mix runtime and compiler:
- `executorch.extension.training` / `pybindings` import `executorch.exir._warnings`, whose package `__init__`
  loads the whole ExecuTorch compiler (torch.export, torchao, coremltools ...) for one decorator;
- `onnxruntime/training/__init__.py` imports `artifacts` and `optim` (onnx, torch), although the on-device API
  is `onnxruntime.training.api` (Module, CheckpointState) alone.
So both parent packages are entered bare (their `__init__` not run) and only the runtime modules are loaded.
ExecuTorch's bindings exchange `torch.Tensor`s, so the ExecuTorch runtime loads torch (the tensor library; no
autograd or torch.optim is used); the ORT runtime loads no torch.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import types
import warnings


def bare_package(name: str) -> None:
    """Enter package `name` in sys.modules with its real __path__ but without running its __init__."""
    if name in sys.modules:
        return
    parent, _, child = name.rpartition(".")
    if parent:
        bare_package(parent)
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
    """-> the module holding `_load_for_executorch_for_training` (ExecuTorch's C++ TrainingModule bindings)."""
    bare_package("executorch.exir")          # only executorch.exir._warnings gets loaded from it
    return importlib.import_module("executorch.extension.training")


def training_module(program_module):
    """ExecuTorch's TrainingModule over a loaded program. Its class is marked experimental: constructing it warns
    "This API is experimental" (an ExperimentalWarning, a DeprecationWarning) every time; the device runtime uses
    it on purpose, so that notice is left out here and nowhere else."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"This API is experimental", category=DeprecationWarning)
        return executorch_training().TrainingModule(program_module)


def executorch_inference():
    """-> ExecuTorch's inference bindings (`_load_for_executorch`)."""
    bare_package("executorch.exir")
    return importlib.import_module("executorch.extension.pybindings.portable_lib")


def ort_training_api():
    """-> onnxruntime.training.api (Module, CheckpointState), without onnx or torch. (`onnxruntime/tools/__init__`
    imports torch-based helpers whenever torch is installed: it is hidden while onnxruntime is first imported.)"""
    if "onnxruntime" not in sys.modules and "torch" not in sys.modules:
        sys.modules["torch"] = None                 # find_spec("torch") -> None while onnxruntime loads
        try:
            import onnxruntime
        finally:
            del sys.modules["torch"]
    import onnxruntime
    onnxruntime.set_default_logger_severity(3)      # no per-initializer warnings on stderr
    bare_package("onnxruntime.training")
    return importlib.import_module("onnxruntime.training.api")


def runtime_version(runtime: str) -> str:
    from importlib.metadata import PackageNotFoundError, version
    dist = {"executorch": "executorch", "ort": "onnxruntime-training-cpu"}.get(runtime, runtime)
    try:
        return f"{dist} {version(dist)}"
    except PackageNotFoundError:
        return runtime


def set_executorch_threads(threads: int) -> None:
    """The CPU threads ExecuTorch's kernels and XNNPACK run on (its process-wide pool; `ditskip-run --threads`
    resizes the same pool through the C API). Before any program is loaded: XNNPACK keeps the pool it was given."""
    if not 1 <= threads <= 1024:
        from .errors import UserError
        raise UserError(f"argument --threads: expected a number of CPU threads from 1 to 1024, got '{threads}'")
    executorch_inference()._unsafe_reset_threadpool(threads)
