"""Tiny bundles with device programs, compiled once per test session and shared by test_device.py and
test_bundle_contract.py (a plain module cache: both files import it, so each runtime's bundle is compiled once).

One bundle per runtime: the ExecuTorch and ORT stages' manifest layouts cannot share a bundle yet
(docs/bundle_contract.md, known gaps). The ExecuTorch bundle skips the preprocessing programs (they take most of
the export time and are not what these tests check)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from conftest import compile_tiny

TRAINER_MODULES = {"ort": "export.ort_trainer", "executorch": "export.executorch_trainer"}
_BUNDLES: dict[str, Path] = {}


def available(runtime: str) -> bool:
    return importlib.util.find_spec(TRAINER_MODULES[runtime]) is not None


def bundle_for(runtime: str, tmp_path_factory) -> Path:
    """flux-tiny, front 1 / back 2 of 6 blocks, 6 steps, with `runtime`'s programs."""
    if runtime not in _BUNDLES:
        opts = {"runtime_options": {"executorch": {"preprocess": False}}} if runtime == "executorch" else {}
        _BUNDLES[runtime] = compile_tiny(tmp_path_factory.mktemp(f"device-{runtime}") / "bundle", "flux-tiny",
                                         runtimes=[runtime], **opts)
    return _BUNDLES[runtime]
