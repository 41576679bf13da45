"""Train a bundle with a device runtime: open it, pick the program, run the loop."""

from __future__ import annotations

from pathlib import Path

from .bundle import Bundle
from .contract import RUNTIMES
from .errors import UserError
from .inputs import StepInputs
from .loop import RunConfig, StepAdapter, train


def device_adapter(bundle: Bundle, runtime: str, precision: str | None = None) -> StepAdapter:
    if runtime == "executorch":
        from .executorch import ExecutorchStep
        return ExecutorchStep(bundle, precision)
    if runtime == "ort":
        from .ort import OrtStep
        return OrtStep(bundle, precision)
    raise UserError(f"runtime {runtime!r}: expected one of {', '.join(RUNTIMES)}")


def train_bundle(bundle_dir: str | Path, runtime: str, cfg: RunConfig, precision: str | None = None,
                 device_preprocess: bool = False, keep_blocks: bool | None = None) -> dict:
    """keep_blocks: an x0-only / cache-free bundle's block programs stay loaded between steps (None, False: one
    block program at a time)."""
    bundle = Bundle.open(bundle_dir)          # refuses an edited manifest or any file that does not match it
    adapter = device_adapter(bundle, runtime, precision)
    x0_from = None
    if device_preprocess:
        if runtime != "executorch":
            raise UserError("--device-preprocess needs --runtime executorch (the preprocessing programs are .pte)")
        from .executorch import Preprocessor
        x0_from = Preprocessor(bundle)
    summary = train(bundle, adapter, cfg, StepInputs(bundle, x0_from, keep_blocks=keep_blocks))
    summary["cache_mode"] = bundle.cache_mode
    summary["device_preprocess"] = device_preprocess
    return summary
