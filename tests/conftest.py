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
    from ditskip_edge.compile import CompileRequest, OptimizerSpec, compile_bundle
    from ditskip_edge.lora import LoraSpec
    from ditskip_edge.models.loading import resolve_spec
    from ditskip_edge.runtime.schedule import ScheduleConfig
    spec = resolve_spec(model)
    sched = ScheduleConfig(steps=steps, grad_accum=grad_accum, s_min_px=spec.train_px, s_max_px=spec.data_px,
                           multiple_px=spec.pixel_multiple, seed=kw.pop("seed", 0))
    compile_bundle(CompileRequest(model=model, images=str(kw.pop("images", PHOTOS)), prompt="a photo of sks toy",
                                  out=str(out), n_front=n_front, n_back=n_back, schedule=sched,
                                  lora=LoraSpec(rank=4, alpha=4.0), optimizer=OptimizerSpec(lr=1e-3), **kw))
    return out


@pytest.fixture(scope="session")
def flux_bundle(tmp_path_factory) -> Path:
    """flux-tiny bundle: front 1, back 2 of 6 blocks, 6 steps."""
    return compile_tiny(tmp_path_factory.mktemp("flux") / "bundle", "flux-tiny")


@pytest.fixture(scope="session")
def sana_bundle(tmp_path_factory) -> Path:
    """sana-tiny bundle: front 1, back 2 of 6 blocks, 6 steps."""
    return compile_tiny(tmp_path_factory.mktemp("sana") / "bundle", "sana-tiny")
