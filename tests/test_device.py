"""Device tests: a bundle trained in a separate runtime-only process under a footprint cap (device_tests/runner.py).

Properties protected:
- a tiny bundle trains under the cap derived from its own memory prediction, the child imports nothing but the
  runtime package and its runtime, its dirty anonymous memory (RssAnon) stays within the budget, and it writes a LoRA;
- under a cap well below the prediction the run stops cleanly (exit code 3, one line naming the cap: the child's
  RLIMIT_DATA allocation failure, or the parent's footprint watch) and leaves the previous checkpoint byte-identical
  and usable;
- a run killed (SIGKILL) mid-schedule resumes from its checkpoint and ends with the same LoRA, bit for bit, as an
  uninterrupted run.
Both Python runtimes train the same bundle (conftest.device_bundle), under the runtime package's one loop; the native
core (`ditskip-run train`, runtime "native") trains it too, its figures the whole process (nothing subtracted), its
cap enforced by the core's own budget and the parent's watch.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import pytest

from device_tests.runner import file_appeared, run_device
from ditskip_edge.runtime.checkpoint import CHECKPOINT

RUNTIMES = ["executorch", "ort", "native"]


@pytest.fixture
def bundles(device_bundle):
    return lambda runtime: device_bundle


def _lora(run) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file
    return load_file(run.summary["lora"])


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_tiny_bundle_trains_under_its_predicted_cap(bundles, tmp_path, runtime):
    run = run_device(bundles(runtime), runtime, tmp_path / "run")
    assert run.status == "ok", run.message
    if runtime == "native":
        assert run.baseline_anon_bytes == 0          # the whole process counts
    else:
        assert run.result["host_modules_loaded"] == []
        assert run.result["rlimit_data_bytes"] > run.baseline["data_bytes"]
    if runtime == "ort":
        assert run.result["torch_loaded"] is False
    assert run.footprint_within_budget, (run.peak_anon_bytes, run.baseline_anon_bytes, run.budget_bytes)
    assert run.prediction["bytes"] > 0 and run.prediction["source"] in ("estimate", "memory_report")
    assert len(run.timeline) >= 2 and run.peak_anon_bytes > 0
    assert run.peak_anon_bytes >= run.baseline_anon_bytes and (run.baseline_anon_bytes > 0 or runtime == "native")
    assert run.peak_file_bytes > 0                 # mapped libraries and programs: reported apart, not counted
    losses = run.summary["losses"]
    assert len(losses) == 6 and all(math.isfinite(x) for x in losses)
    lora = _lora(run)
    assert lora and all(k.startswith("transformer.") and ".lora_" in k for k in lora)
    assert (Path(run.run_dir) / "device_run.json").is_file()


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_cap_far_below_prediction_fails_cleanly_and_keeps_the_checkpoint(bundles, tmp_path, runtime):
    device_bundle = bundles(runtime)
    run_dir = tmp_path / "run"
    first = run_device(device_bundle, runtime, run_dir, steps=2)
    assert first.status == "ok", first.message
    ckpt = run_dir / CHECKPOINT
    before = _sha(ckpt)

    starved = run_device(device_bundle, runtime, run_dir, budget_bytes=int(first.prediction["bytes"] * 0.1),
                         reserve=False)
    assert starved.status in ("out_of_memory", "over_budget"), starved.message
    assert starved.exit_code == 3 and "\n" not in starved.message
    assert "RLIMIT_DATA" in starved.message or "over budget" in starved.message
    assert _sha(ckpt) == before, "the failed run changed the checkpoint"
    assert not list(run_dir.glob("*.tmp")), "the failed run left a half-written file"

    resumed = run_device(device_bundle, runtime, run_dir)
    assert resumed.status == "ok", resumed.message
    assert resumed.summary["resumed_from_step"] == 2 and len(resumed.summary["losses"]) == 6


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_footprint_watch_stops_a_run_over_budget_and_keeps_the_checkpoint(bundles, tmp_path, runtime):
    """With RLIMIT_DATA out of the way, the parent's RssAnon watch alone stops a run that passes its budget, as a
    phone's memory killer would: exit code 3, one line, the checkpoint whole."""
    device_bundle = bundles(runtime)
    run_dir = tmp_path / "run"
    assert run_device(device_bundle, runtime, run_dir, steps=1, uncapped=True).status == "ok"
    before = _sha(run_dir / CHECKPOINT)
    # a budget of one byte over the loaded runtime: with the frozen weights mapped (file-backed), a tiny program's
    # dirty memory stays near 1 MiB through a step, so a MiB budget let it write a checkpoint before the watch fired
    over = run_device(device_bundle, runtime, run_dir, budget_bytes=1, extra_data_bytes=1 << 40)
    assert over.status == "over_budget" and over.exit_code == 3, over.message
    assert "RssAnon" in over.message and "\n" not in over.message
    assert _sha(run_dir / CHECKPOINT) == before


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_killed_run_resumes_to_the_same_lora(bundles, tmp_path, runtime):
    device_bundle = bundles(runtime)
    whole = run_device(device_bundle, runtime, tmp_path / "whole")
    assert whole.status == "ok", whole.message

    run_dir = tmp_path / "killed"
    killed = run_device(device_bundle, runtime, run_dir, kill_when=file_appeared(CHECKPOINT))
    assert killed.status == "killed" and killed.returncode == -9, (killed.status, killed.message)
    assert not (run_dir / "lora").exists()

    resumed = run_device(device_bundle, runtime, run_dir)
    assert resumed.status == "ok", resumed.message
    assert 1 <= resumed.summary["resumed_from_step"] < 6
    assert resumed.summary["losses"] == whole.summary["losses"]
    a, b = _lora(whole), _lora(resumed)
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k], b[k]), k
