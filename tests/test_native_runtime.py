"""The native device runtime (device_runtime/, `ditskip-run`) is the Python ExecuTorch runtime, bit for bit.

Properties protected, on x86-64 and (tiny bundles) on arm64 under qemu:
- `ditskip-run train` gives the Python ExecuTorch runtime's LoRA file and checkpoint byte for byte, and its losses
  exactly, on flux-tiny (fp32, int8; portable kernels), flux-tiny int4 on XNNPACK, sana-tiny (int8, int4) and the
  flux-testbed bundle `make demo` compiles (int8), all with block remat and mapped weights; with
  --device-preprocess too (x0 from the photos by the bundle's preprocess programs);
- its LoRA loads into the full diffusers model (load_lora_adapter) and changes its output;
- a run killed with SIGKILL at any point resumes to the uninterrupted run's LoRA, bit for bit;
- a damaged bundle is refused with the Python runtime's message, one line, exit 2, the run's checkpoint and LoRA
  untouched; bad input likewise; over the footprint budget: exit 3, one line, checkpoint untouched;
- the arm64 build, run under emulation, gives the x86-64 build's LoRA to float32 rounding (relative 1e-6 after 20
  steps; ExecuTorch's arm64 kernels fuse multiply-adds: see ARM64_RTOL).

A missing compiler, cmake, cross compiler or qemu is a failure, not a skip (.ci/run installs them).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import compile_tiny, train_device
from device_tests import native_runtime
from ditskip_edge.runtime.checkpoint import CHECKPOINT

pytest.importorskip("executorch")


# ------------------------------------------------------------------------------------------------- bundles

@pytest.fixture(scope="module")
def flux_xnnpack(tmp_path_factory) -> Path:
    """flux-tiny, int4 frozen weights on XNNPACK; 20 steps of one sample (the arm64 bound is stated after 20 steps).
    int8 is covered by the portable-kernel bundles, --device-preprocess by sana_programs: XNNPACK lowering is the
    suite's slowest export (about 75 s a program here)."""
    from export.executorch_stage import ExecutorchPrograms
    return compile_tiny(tmp_path_factory.mktemp("n_flux_xnn") / "bundle", "flux-tiny", steps=20,
                        programs=[ExecutorchPrograms(("int4",), backend="xnnpack", preprocess=False)])


@pytest.fixture(scope="module")
def sana_programs(tmp_path_factory) -> Path:
    """sana-tiny, int8 and int4 (portable kernels), preprocess programs; 3 steps x 2 samples."""
    from export.executorch_stage import ExecutorchPrograms
    return compile_tiny(tmp_path_factory.mktemp("n_sana") / "bundle", "sana-tiny", steps=3, grad_accum=2,
                        programs=[ExecutorchPrograms(("int8", "int4"), preprocess=True)])


@pytest.fixture(scope="module")
def demo_bundle(tmp_path_factory) -> Path:
    """`make demo`'s bundle (examples/demo.py's compile request: flux-testbed, BlockSkip 50%, per-photo captions,
    a LoRA on every linear layer) with the ExecuTorch training program, at 3 steps x 4 samples."""
    from compiler.cli import main as cli_main
    from examples.demo import PHOTOS, SUBJECT
    from examples.recipe import compile_args
    from testbed.scenes import SUBJECTS, subject_prompt, write_reference_photos
    base = tmp_path_factory.mktemp("n_demo")
    subject = SUBJECTS[SUBJECT]
    write_reference_photos(subject, base / "photos", PHOTOS, captions=True, described=True)
    args = compile_args(subject_prompt(subject, described=True), base / "photos", base / "bundle", jobs=1, steps=3,
                        generation=False) + ["--runtime", "executorch", "--backend", "portable"]
    assert cli_main(args) == 0
    return base / "bundle"


def _sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _native_train(runner, bundle: Path, run_dir: Path, *extra) -> dict:
    r = native_runtime.run(runner, "train", bundle, "--run-dir", run_dir, "--json", *extra, check=True)
    return json.loads(r.stdout)


def _same_run(native: dict, python: dict, native_dir: Path, python_dir: Path) -> None:
    assert native["losses"] == python["losses"], (native["losses"], python["losses"])
    assert native["steps"] == python["steps"] and native["trainable_params"] == python["trainable_params"]
    lora_n, lora_p = Path(native["lora"]), Path(python["lora"])
    assert lora_n.name == lora_p.name
    assert _sha(lora_n) == _sha(lora_p), "LoRA files differ"
    assert _sha(native_dir / CHECKPOINT) == _sha(python_dir / CHECKPOINT), "checkpoints differ"


CASES = {"flux_fp32": ("device_bundle", "fp32", ()), "flux_int8": ("device_bundle", "int8", ()),
         "flux_int4_xnnpack": ("flux_xnnpack", "int4", ()),
         "sana_int8": ("sana_programs", "int8", ()), "sana_int4_preprocess": ("sana_programs", "int4",
                                                                             ("--device-preprocess",)),
         "testbed_demo_int8": ("demo_bundle", "int8", ())}


@pytest.mark.parametrize("case", list(CASES))
def test_native_train_gives_the_python_runtimes_lora_and_checkpoint_bit_for_bit(case, runner, request, tmp_path):
    fixture, precision, extra = CASES[case]
    bundle = request.getfixturevalue(fixture)
    python = train_device(bundle, "executorch", tmp_path / "python", precision, resume=False) if not extra else \
        _python_preprocessed(bundle, precision, tmp_path / "python")
    native = _native_train(runner, bundle, tmp_path / "native", "--precision", precision, *extra)
    assert native["implementation"] == "native" and native["device_preprocess"] == bool(extra)
    _same_run(native, python, tmp_path / "native", tmp_path / "python")
    assert native["losses"][0] != native["losses"][-1]


def _python_preprocessed(bundle: Path, precision: str, run_dir: Path) -> dict:
    from ditskip_edge.runtime.loop import RunConfig
    from ditskip_edge.runtime.run import train_bundle
    return train_bundle(bundle, "executorch", RunConfig(run_dir=run_dir, resume=False, progress=False), precision,
                        device_preprocess=True)


def test_the_native_lora_of_make_demos_bundle_loads_into_diffusers_and_changes_the_model(runner, demo_bundle,
                                                                                        tmp_path):
    import torch

    from ditskip_edge.bundle_model import open_bundle
    from ditskip_edge.models.loading import build_transformer
    from ditskip_edge.models.views import full_model_forward
    native = _native_train(runner, demo_bundle, tmp_path / "run")
    b = open_bundle(demo_bundle)
    transformer = build_transformer(b.spec)
    manifest = json.loads((demo_bundle / "manifest.json").read_text())
    _, _, h, w = manifest["subject_stage"]["entry_shapes"]["x0"]
    x = torch.randn(1, (h // 2) * (w // 2), transformer.config.in_channels,      # packed 2x2 latent tokens
                    generator=torch.Generator().manual_seed(0))
    cond = b.cond                                                                 # the first photo's caption
    t = torch.tensor([0.5])
    with torch.no_grad():
        base = full_model_forward("flux", transformer, x, t, cond)
        transformer.load_lora_adapter(str(Path(native["lora"]).parent), weight_name=Path(native["lora"]).name,
                                      prefix="transformer")
        tuned = full_model_forward("flux", transformer, x, t, cond)
    assert not torch.allclose(base, tuned)


# ------------------------------------------------------------------------------------------- resume, kill -9

@pytest.mark.parametrize("arch", ["x86_64", "arm64"])
def test_a_native_run_killed_at_any_point_resumes_to_the_uninterrupted_lora(arch, request, device_bundle, tmp_path):
    runner = request.getfixturevalue("runner" if arch == "x86_64" else "arm64_runner")
    whole = _native_train(runner, device_bundle, tmp_path / "whole", "--precision", "int8", "--checkpoint-every", "1")
    for delay_s in ((0.0, 0.15, 0.4) if arch == "x86_64" else (0.5,)):
        run_dir = tmp_path / f"killed_{delay_s}"
        p = native_runtime.popen(runner, "train", device_bundle, "--precision", "int8", "--run-dir", run_dir,
                                 "--checkpoint-every", "1", "--json")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (run_dir / CHECKPOINT).is_file() and p.poll() is None:
            time.sleep(0.005)
        time.sleep(delay_s)
        p.send_signal(signal.SIGKILL)
        p.communicate()
        resumed = _native_train(runner, device_bundle, run_dir, "--precision", "int8", "--checkpoint-every", "1")
        assert resumed["losses"] == whole["losses"]
        assert _sha(resumed["lora"]) == _sha(whole["lora"])


def test_native_and_python_runs_resume_each_others_checkpoints(runner, device_bundle, tmp_path):
    """One checkpoint format and identity: a run begun by the Python runtime and finished by the native core (and
    the reverse) ends with the uninterrupted run's LoRA."""
    whole = _native_train(runner, device_bundle, tmp_path / "whole", "--precision", "int8")
    train_device(device_bundle, "executorch", tmp_path / "py_then_native", "int8", stop_after=2, checkpoint_every=1)
    finished = _native_train(runner, device_bundle, tmp_path / "py_then_native", "--precision", "int8")
    assert finished["resumed_from_step"] == 2 and _sha(finished["lora"]) == _sha(whole["lora"])
    _native_train(runner, device_bundle, tmp_path / "native_then_py", "--precision", "int8", "--steps", "3")
    done = train_device(device_bundle, "executorch", tmp_path / "native_then_py", "int8")
    assert done["resumed_from_step"] == 3 and _sha(done["lora"]) == _sha(whole["lora"])


# ------------------------------------------------------------------------------------- refusals, bad input

def _refusal_cases():
    from test_runtime import DAMAGE
    return DAMAGE


@pytest.fixture(scope="module")
def other_bundle(tmp_path_factory) -> Path:
    """Same model and plan, another schedule (seed): its cache is foreign to device_bundle."""
    return compile_tiny(tmp_path_factory.mktemp("n_other") / "bundle", "flux-tiny", grad_accum=2, seed=1)


DAMAGE_CASES = [("x86_64", d) for d in ("flip", "truncate", "swap", "foreign_cache", "edited_manifest")] + \
    [("arm64", d) for d in ("flip", "swap", "foreign_cache")]


@pytest.mark.parametrize("arch,damage", DAMAGE_CASES)
def test_a_damaged_bundle_is_refused_by_the_native_core_as_by_the_python_runtime(arch, damage, request,
                                                                                 device_bundle, other_bundle,
                                                                                 tmp_path):
    runner = request.getfixturevalue("runner" if arch == "x86_64" else "arm64_runner")
    bundle = tmp_path / "bundle"
    shutil.copytree(device_bundle, bundle, ignore=shutil.ignore_patterns("runs"))
    run_dir = tmp_path / "run"
    argv = ["train", bundle, "--run-dir", run_dir, "--checkpoint-every", "1"]
    assert native_runtime.run(runner, *argv, "--steps", "1").returncode == 0
    checkpoint = (run_dir / CHECKPOINT).read_bytes()
    lora = {p.name: p.read_bytes() for p in (run_dir / "lora").iterdir()}
    expect = _refusal_cases()[damage](bundle, "executorch", other_bundle)
    r = native_runtime.run(runner, *argv)
    assert r.returncode == 2 and expect in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("ditskip-run train: error: "), r.stderr
    assert (run_dir / CHECKPOINT).read_bytes() == checkpoint
    assert {p.name: p.read_bytes() for p in (run_dir / "lora").iterdir()} == lora


def _python_error(argv: list, capsys) -> tuple[int, str]:
    from ditskip_edge.runtime.__main__ import main
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err.strip()


def _fp32_checkpoint(bundle: Path, tmp: Path) -> Path:
    """A run folder holding the fp32 program's checkpoint: training it with --precision int8 is refused as another
    program's run."""
    run_dir = tmp / "fp32_run"
    train_device(bundle, "executorch", run_dir, "fp32", steps=1)
    return run_dir


BAD_INPUT = {   # argv after `train`, given the bundle and a scratch folder
    "steps_zero": lambda b, t: [b, "--steps", "0"],
    "steps_past_the_schedule": lambda b, t: [b, "--steps", "999"],
    "checkpoint_every_zero": lambda b, t: [b, "--checkpoint-every", "0"],
    "threads_zero": lambda b, t: [b, "--threads", "0"],
    "no_such_folder": lambda b, t: [t / "nowhere"],
    "not_a_bundle": lambda b, t: [t],
    "precision_without_program": lambda b, t: [b, "--precision", "int4"],
    "another_programs_checkpoint": lambda b, t: [b, "--precision", "int8", "--run-dir", _fp32_checkpoint(b, t)],
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_gets_the_python_runtimes_one_line_refusal_from_the_native_core(case, runner, device_bundle,
                                                                                   tmp_path, capsys):
    argv = ["train", *BAD_INPUT[case](device_bundle, tmp_path)]
    if "--run-dir" not in argv:
        argv += ["--run-dir", tmp_path / "run"]
    py_code, py_err = _python_error(argv + ["--runtime", "executorch"], capsys)
    r = native_runtime.run(runner, *argv)
    assert py_code == 2 and r.returncode == 2, (py_err, r.stderr)
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("ditskip-run train: error: "), err
    assert err.split(": error: ", 1)[1] == py_err.split(": error: ", 1)[1], (err, py_err)


def test_a_corrupt_checkpoint_is_refused_in_one_line_and_left_alone(runner, device_bundle, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    junk = b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "
    (run_dir / CHECKPOINT).write_bytes(junk)
    r = native_runtime.run(runner, "train", device_bundle, "--run-dir", run_dir)
    err = r.stderr.strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1, err
    assert "unreadable checkpoint" in err and err.endswith("delete it or pass --no-resume"), err
    assert (run_dir / CHECKPOINT).read_bytes() == junk


def test_over_the_footprint_budget_the_native_run_stops_with_exit_3_and_keeps_the_checkpoint(runner, device_bundle,
                                                                                            tmp_path):
    run_dir = tmp_path / "run"
    assert native_runtime.run(runner, "train", device_bundle, "--run-dir", run_dir, "--steps", "1").returncode == 0
    before = (run_dir / CHECKPOINT).read_bytes()
    r = native_runtime.run(runner, "train", device_bundle, "--run-dir", run_dir, "--budget-mib", "1")
    assert r.returncode == 3, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "budget" in r.stderr and "MiB" in r.stderr, r.stderr
    assert (run_dir / CHECKPOINT).read_bytes() == before


# --------------------------------------------------------------------------------------------- arm64 (qemu)
# The arm64 run is the x86-64 run to float32 rounding, not bit for bit: ExecuTorch's arm64 optimized kernels
# (libexecutorch_kernels_optimized of the arm64 wheel) contract multiply-adds into FMAs where the x86-64 build does
# not. device_runtime/scripts/op_diff.sh (ditskip-op-trace, -DDITSKIP_OP_TRACE=ON) finds the first differing
# operator: aten::native_layer_norm.out on the XNNPACK int8 program (every XNNPACK delegate call before it is identical),
# aten::bmm.out then aten::mm.out on the portable one. Our own code (inputs, noise, AdamW, accumulation) gives the
# same bits on both (the inputs dumped on x86-64 give the arm64 kernels' loss; AdamW over 200 steps is identical).
# The bounds (relative L2 difference of every LoRA tensor, and of each loss), measured: on XNNPACK programs (one
# layer_norm kernel differs) within 1e-6 after 20 steps; on portable-kernel programs (every bmm / mm differs) within
# 1e-5 after 2 steps (sana-tiny int4: 6.9e-6; AdamW's first steps turn a last-bit difference of a near-zero gradient
# into a visible one of its LoRA element).
ARM64_RTOL = {"xnnpack": 1e-6, "portable": 1e-5}


def _lora_tensors(path) -> dict:
    from safetensors.numpy import load_file
    return load_file(str(path))


def _assert_close_runs(arm: dict, x86: dict, rtol: float) -> None:
    la, lx = np.array(arm["losses"]), np.array(x86["losses"])
    assert len(la) == len(lx) and np.all(np.abs(la - lx) <= rtol * np.abs(lx)), (la, lx)
    ta, tx = _lora_tensors(arm["lora"]), _lora_tensors(x86["lora"])
    assert set(ta) == set(tx)
    worst = max(float(np.linalg.norm(ta[k] - tx[k]) / max(np.linalg.norm(tx[k]), 1e-30)) for k in tx)
    assert worst <= rtol, worst


@pytest.mark.parametrize("case", ["flux_int4_xnnpack_20_steps", "sana_int4_preprocess"])
def test_the_arm64_build_under_emulation_gives_the_x86_64_builds_lora_to_float32_rounding(case, runner, arm64_runner,
                                                                                         request, tmp_path):
    if case == "flux_int4_xnnpack_20_steps":
        bundle, args = request.getfixturevalue("flux_xnnpack"), ("--precision", "int4")
    else:
        bundle, args = request.getfixturevalue("sana_programs"), ("--precision", "int4", "--steps", "2",
                                                                  "--device-preprocess")
    x86 = _native_train(runner, bundle, tmp_path / "x86", *args)
    arm = _native_train(arm64_runner, bundle, tmp_path / "arm64", *args)
    assert arm["implementation"] == "native" and arm["steps"] == x86["steps"]
    _assert_close_runs(arm, x86, ARM64_RTOL[x86["backend"]])
