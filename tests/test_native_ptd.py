"""The .ptd loader a native runtime uses (device_tests/native/ptd_loader_check.cpp, built with g++ against the
executorch wheel; benchmarks/results/ptd_loader.md has the numbers).

ExecuTorch's Android TrainingModule.load(model, data) JNI reads the .ptd with FileDataLoader, which copies every frozen
weight into heap memory; MmapDataLoader with MlockConfig::NoMlock keeps them in clean file-backed pages.

Properties protected, on a training program the project's exporter writes with external weights (one FLUX double
block 384 wide, int8 frozen weights, a .ptd of about 5 MiB):
- the mapped .ptd gives the same first output (the loss) as the copied one, bit for bit
- mapped, the process's RssAnon above its baseline is lower than copied by at least 70% of the .ptd's size, and its
  RssFile is higher (the weights are in file-backed pages instead)

g++ is required: without it the checker cannot be built and the tests fail (CI installs g++).
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

pytest.importorskip("executorch")

from benchmarks.ptd_loader import export_wide_step    # noqa: E402
from device_tests import native_ptd                   # noqa: E402

STEPS = 2


@pytest.fixture(scope="module")
def readings(tmp_path_factory) -> dict:
    """loader -> the checker's JSON reading; {"error": message} when the checker cannot be built (the tests then
    fail with that message: a missing g++ is a failure, not a skip)."""
    if shutil.which("g++") is None:
        return {"error": "g++ not found: device_tests/native/build.sh needs a C++17 compiler to build "
                         "ptd_loader_check (apt-get install g++)"}
    try:
        checker = native_ptd.build(tmp_path_factory.mktemp("ptd_bin"))
    except native_ptd.NativeBuildError as e:
        return {"error": str(e)}
    pte, ptd, inputs = export_wide_step(tmp_path_factory.mktemp("ptd_prog"))
    assert ptd.suffix == ".ptd" and ptd.stat().st_size > 4 * 2**20        # a few MiB: the difference is visible
    return {loader: native_ptd.run(checker, pte, ptd, loader, "forward", STEPS, inputs)
            for loader in native_ptd.LOADERS}


def _built(readings) -> dict:
    if "error" in readings:
        pytest.fail(readings["error"], pytrace=False)
    return readings


def test_mapped_ptd_gives_the_copied_ptds_loss_bit_for_bit(readings):
    readings = _built(readings)
    file, mmap = readings["file"]["outputs0"], readings["mmap"]["outputs0"]
    assert file is not None and np.isfinite(file) and file > 0, readings
    assert np.float32(mmap).view(np.uint32) == np.float32(file).view(np.uint32), (file, mmap)


def test_mapped_ptd_keeps_frozen_weights_out_of_anonymous_memory(readings):
    readings = _built(readings)
    file, mmap = readings["file"], readings["mmap"]
    ptd_kib = file["ptd_bytes"] / 1024
    anon_file = file["rss_anon_kib"] - file["baseline_rss_anon_kib"]
    anon_mmap = mmap["rss_anon_kib"] - mmap["baseline_rss_anon_kib"]
    assert anon_file - anon_mmap >= 0.7 * ptd_kib, (anon_file, anon_mmap, ptd_kib, readings)
    assert mmap["rss_file_kib"] > file["rss_file_kib"], readings
