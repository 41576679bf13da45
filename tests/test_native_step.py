"""The native core's raw-program entry (ditskip_program_* in ditskip.h; `ditskip-run step` and `ditskip-run footprint`):
what benchmarks/device_footprint.py's native rows and handset speed checks run.

Properties protected:
- `ditskip-run step` on a training program the project's exporter writes (one FLUX double block, int8 frozen weights
  in a mapped .ptd, XNNPACK) gives the loss ExecuTorch's Python bindings give, bit for bit, and the same loss at
  every step (no optimizer);
- it reports this process's RssAnon / RssFile at start, with the inputs read, loaded and after every step, and wall
  and CPU seconds per step (present, never timed here);
- `--threads N` sizes the pool the kernels and XNNPACK run on (reported back), without changing the loss's bits;
  a thread count that is not 1 .. 1024 is refused in one line, exit 2;
- a malformed inputs folder is refused with one line naming the file, exit 2;
- `ditskip-run footprint` reports the runtime's fixed cost: positive RssAnon and RssFile;
- the C header, with the raw-program declarations, still compiles as plain C99 (-pedantic -Werror).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("executorch")

from device_tests import native_runtime               # noqa: E402
from device_tests.native_ptd import write_inputs      # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
STEPS = 3


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> dict:
    """A tiny exported training program (benchmarks/ptd_loader.py export_wide_step, 2 heads), its inputs as
    `ditskip-run step --inputs` reads them and as the Python bindings' runner loads them."""
    import torch
    from benchmarks.ptd_loader import export_wide_step
    folder = tmp_path_factory.mktemp("step_prog")
    pte, ptd, inputs = export_wide_step(folder, heads=2)
    torch.save([torch.from_numpy(a) for a in inputs], folder / "inputs.pt")
    return {"pte": pte, "ptd": ptd, "inputs_dir": write_inputs(folder / "inputs", inputs),
            "inputs_pt": folder / "inputs.pt"}


def _step(runner, program, *extra) -> dict:
    r = native_runtime.run(runner, "step", program["pte"], "--data", program["ptd"], "--inputs",
                           program["inputs_dir"], "--steps", STEPS, "--json", *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _bits(x: float) -> int:
    return int(np.float32(x).view(np.uint32))


def test_step_gives_the_python_bindings_loss_bit_for_bit(runner, program):
    from export.executorch_footprint import measure_program
    native = _step(runner, program)
    python = measure_program(program["pte"], program["inputs_pt"], data=program["ptd"], steps=2)
    assert np.isfinite(native["loss"]) and native["loss"] > 0
    assert _bits(native["loss"]) == _bits(python["loss"]), (native["loss"], python["loss"])
    assert len(native["outputs0"]) == STEPS and len(set(native["outputs0"])) == 1   # no optimizer: every step alike


def test_step_reports_its_processs_footprint_and_step_times(runner, program):
    out = _step(runner, program)
    fp = out["footprint"]
    assert fp["start"]["rss_anon_bytes"] > 0 and fp["start"]["rss_file_bytes"] > 0
    assert fp["loaded"]["rss_anon_bytes"] > fp["start"]["rss_anon_bytes"]       # the method's arena, the delegates
    assert len(fp["after_steps"]) == STEPS and all(r["rss_anon_bytes"] > 0 for r in fp["after_steps"])
    assert len(out["step_seconds"]) == len(out["step_cpu_seconds"]) == STEPS
    assert out["seconds_per_step"] in out["step_seconds"] and out["cpu_seconds_per_step"] in out["step_cpu_seconds"]
    assert out["data"] == str(program["ptd"]) and out["method"] == "forward"


def test_threads_flag_sizes_the_pool_and_keeps_the_loss_bits(runner, program):
    one, two = _step(runner, program, "--threads", "1"), _step(runner, program, "--threads", "2")
    assert (one["threads"], two["threads"]) == (1, 2)
    assert _bits(one["loss"]) == _bits(two["loss"])


@pytest.mark.parametrize("value", ["0", "-3", "two", "5000"])
def test_threads_flag_refuses_a_bad_count_in_one_line(runner, program, value):
    r = native_runtime.run(runner, "step", program["pte"], "--inputs", program["inputs_dir"], "--threads", value)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == ("ditskip-run step: error: argument --threads: expected a number of "
                                                 f"CPU threads from 1 to 1024, got '{value}'"), r.stderr


def test_measure_sees_the_whole_step_process(runner, program):
    m = native_runtime.measure(runner, "step", program["pte"], "--data", program["ptd"], "--inputs",
                               program["inputs_dir"], "--steps", STEPS, "--json", sample_s=0.001)
    assert m.returncode == 0, m.stderr
    assert m.timeline and m.peak_anon_bytes > 0 and m.peak_file_bytes > 0
    assert m.json["loss"] > 0                      # the verb's own JSON comes back with the samples


@pytest.mark.parametrize("damage", ["no_spec", "short_bin", "bad_dtype"])
def test_step_refuses_a_malformed_inputs_folder_in_one_line(runner, program, tmp_path, damage):
    bad = tmp_path / "inputs"
    shutil.copytree(program["inputs_dir"], bad)
    if damage == "no_spec":
        (bad / "inputs.txt").unlink()
    elif damage == "short_bin":
        (bad / "input_0.bin").write_bytes((bad / "input_0.bin").read_bytes()[:-4])
    else:
        lines = (bad / "inputs.txt").read_text().splitlines()
        (bad / "inputs.txt").write_text("\n".join(["complex64" + lines[0][len("float32"):]] + lines[1:]) + "\n")
    r = native_runtime.run(runner, "step", program["pte"], "--data", program["ptd"], "--inputs", bad, "--json")
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ditskip-run step: error: ") and str(bad) in lines[0], r.stderr


def test_footprint_verb_reports_the_runtimes_fixed_cost(runner):
    r = native_runtime.run(runner, "footprint", "--json", check=True)
    out = json.loads(r.stdout)
    assert out["rss_anon_bytes"] > 0 and out["rss_file_bytes"] > 0


def test_c_header_compiles_as_plain_c99(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed (apt-get install gcc)"
    r = subprocess.run([cc, "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "-c",
                        "-I", ROOT / "device_runtime/include", ROOT / "device_runtime/tests/c_header_check.c",
                        "-o", tmp_path / "c_header_check.o"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
