"""Shared fixtures. The repo root goes first on sys.path so a git worktree tests its own code."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PHOTOS = ROOT / "examples" / "photos"


def compile_tiny(out: Path, model: str = "flux-tiny", n_front: int = 1, n_back: int = 2, steps: int = 6,
                 grad_accum: int = 1, **kw) -> Path:
    """A tiny bundle through the compiler's API. kw: CompileRequest fields (programs=[ExecutorchPrograms(...)],
    cache_codec, ...), and seed / images."""
    from ditskip_edge.compile import CompileRequest, compile_bundle
    from ditskip_edge.lora import LoraSpec
    from ditskip_edge.models.loading import resolve_spec
    from ditskip_edge.runtime.bundle import OptimizerSpec
    from ditskip_edge.runtime.schedule import ScheduleConfig
    spec = resolve_spec(model)
    sched = ScheduleConfig(steps=steps, grad_accum=grad_accum, s_min_px=spec.train_px, s_max_px=spec.data_px,
                           multiple_px=spec.pixel_multiple, seed=kw.pop("seed", 0))
    compile_bundle(CompileRequest(model=model, images=str(kw.pop("images", PHOTOS)), prompt="a photo of sks toy",
                                  out=str(out), n_front=n_front, n_back=n_back, schedule=sched,
                                  lora=LoraSpec(rank=4, alpha=4.0), optimizer=OptimizerSpec(lr=1e-3), **kw))
    return out


def train_eager(bundle_dir: Path, run_dir: Path | None, **cfg) -> dict:
    """The eager step under the runtime's loop (what `ditskip-edge train` runs); cfg: RunConfig fields."""
    from ditskip_edge.eager import EagerStep
    from ditskip_edge.runtime.bundle import Bundle
    from ditskip_edge.runtime.loop import RunConfig, train
    bundle = Bundle.open(bundle_dir)
    return train(bundle, EagerStep(bundle), RunConfig(run_dir=run_dir, progress=False, **cfg))


def train_device(bundle_dir: Path, runtime: str, run_dir: Path | None, precision: str | None = None,
                 **cfg) -> dict:
    """A device runtime's adapter under the same loop (the runtime package alone)."""
    from ditskip_edge.runtime.loop import RunConfig
    from ditskip_edge.runtime.run import train_bundle
    return train_bundle(bundle_dir, runtime, RunConfig(run_dir=run_dir, progress=False, **cfg), precision)


@pytest.fixture(scope="session")
def flux_bundle(tmp_path_factory) -> Path:
    """flux-tiny bundle: front 1, back 2 of 6 blocks, 6 steps."""
    return compile_tiny(tmp_path_factory.mktemp("flux") / "bundle", "flux-tiny")


@pytest.fixture(scope="session")
def sana_bundle(tmp_path_factory) -> Path:
    """sana-tiny bundle: front 1, back 2 of 6 blocks, 6 steps."""
    return compile_tiny(tmp_path_factory.mktemp("sana") / "bundle", "sana-tiny")


@pytest.fixture(scope="session")
def device_bundle(tmp_path_factory) -> Path:
    """flux-tiny bundle with both runtimes' fp32 and int8 train_step programs (no preprocessing programs), 6 steps,
    grad_accum 2: the one bundle every runtime trains."""
    from export.executorch_stage import ExecutorchPrograms
    from export.ort_stage import OrtPrograms
    return compile_tiny(tmp_path_factory.mktemp("device") / "bundle", "flux-tiny", grad_accum=2,
                        programs=[ExecutorchPrograms(("fp32", "int8"), preprocess=False),
                                  OrtPrograms(("fp32", "int8"))])
