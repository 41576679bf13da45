"""The runtime package: what a phone runs, one floor for every runtime.

Properties protected:
- its boundary is its folder: under the device import guard it imports no compiler, exporter, diffusers, peft,
  torchao or onnx module, and its source imports nothing outside `ditskip_edge.runtime` but numpy, safetensors,
  Pillow and the runtime bindings; the ORT path loads no torch at all;
- one bundle carries both runtimes' programs (same inputs, same LoRA keys) and trains on each;
- a corrupt or foreign bundle is refused the same way whichever runtime trains: one line, exit 2, the checkpoint
  untouched (flipped byte, truncated program, swapped cache entries, another bundle's cache, an edited manifest);
- a checkpoint belongs to one runtime, program and bundle.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, compile_tiny
from compiler.cli import main
from ditskip_edge.runtime.bundle import MANIFEST, read_manifest, sha256_file, write_manifest
from ditskip_edge.runtime.checkpoint import CHECKPOINT

RUNTIMES = ["eager", "executorch", "ort"]
RUNTIME_DIR = ROOT / "ditskip_edge" / "runtime"
THIRD_PARTY = {"numpy", "safetensors", "PIL", "executorch", "onnxruntime", "torch", "tokenizers"}


def test_runtime_sources_import_only_the_runtime_package_and_runtime_libraries():
    for path in sorted(RUNTIME_DIR.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level == 0:
                    top = node.module.split(".")[0]
                    assert top in THIRD_PARTY or top in sys.stdlib_module_names, (path.name, node.module)
                else:
                    assert node.level == 1, (path.name, "imports outside the runtime package", node.module)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    top = alias.name.split(".")[0]
                    assert top in THIRD_PARTY or top in sys.stdlib_module_names, (path.name, alias.name)
    # importlib strings are imports too: only the runtimes' own packages are named that way
    for path in sorted(RUNTIME_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module":
                arg = node.args[0]
                assert isinstance(arg, ast.Constant) and arg.value.split(".")[0] in ("executorch", "onnxruntime")


GUARDED = """
import json, sys
from device_tests.runtime_imports import forbid_host_modules, host_modules_loaded
forbid_host_modules()
from ditskip_edge.runtime.__main__ import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "host": host_modules_loaded(), "torch": "torch" in sys.modules}))
"""


@pytest.mark.parametrize("runtime", ["executorch", "ort"])
def test_the_device_stand_in_trains_under_the_import_guard(device_bundle, tmp_path, runtime):
    out = subprocess.run([sys.executable, "-c", GUARDED, "train", str(device_bundle), "--runtime", runtime,
                          "--steps", "1", "--run-dir", str(tmp_path), "--json"], capture_output=True, text=True,
                         cwd=str(ROOT), env={"PYTHONPATH": str(ROOT), "DITSKIP_PROGRESS": "0"}, timeout=300)
    assert out.returncode == 0 and out.stdout.strip(), out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    doc = json.loads(lines[-1])
    assert doc["code"] == 0 and doc["host"] == [], (doc, out.stderr[-2000:])
    assert doc["torch"] is (runtime == "executorch")      # ORT's path loads no torch at all
    summary = json.loads("\n".join(lines[:-1]))
    assert summary["runtime"] == runtime and len(summary["losses"]) == 1 and Path(summary["lora"]).is_file()


def test_one_bundle_carries_both_runtimes_programs_and_trains_on_each(device_bundle, tmp_path, capsys):
    m = read_manifest(device_bundle)
    progs = {(p["runtime"], p["precision"]): p for p in m["programs"] if p["name"] == "train_step"}
    assert set(progs) == {(r, p) for r in ("executorch", "ort") for p in ("fp32", "int8")}
    assert progs["executorch", "int8"]["inputs"] == progs["ort", "int8"]["inputs"]
    assert set(progs["executorch", "int8"]["trainable"].values()) == set(m["lora_file"]["keys"])
    summaries = {}
    for runtime in ("executorch", "ort"):
        assert main(["train", str(device_bundle), "--runtime", runtime, "--precision", "int8", "--steps", "2",
                     "--run-dir", str(tmp_path / runtime), "--json"]) == 0
        summaries[runtime] = json.loads(capsys.readouterr().out)
    a, b = summaries["executorch"]["losses"], summaries["ort"]["losses"]
    assert all(abs(x - y) <= 1e-4 * abs(x) for x, y in zip(a, b)), (a, b)   # the same int8 step, two runtimes


# ---------------------------------------------------------------------------------------------- corruption

def resign(bundle: Path) -> None:
    """Recompute the manifest's file list and digest, as if the bundle had been written so: only the checks
    below the manifest (the cache reader's) can then catch the damage."""
    m = read_manifest(bundle, verify=False)
    for rel in m["files"]:
        m["files"][rel] = {"sha256": sha256_file(bundle / rel), "bytes": (bundle / rel).stat().st_size}
    write_manifest(bundle / MANIFEST, m)


def _program_file(bundle: Path, runtime: str) -> str:
    if runtime == "eager":
        return "model/kept_weights.safetensors"
    m = read_manifest(bundle, verify=False)
    return next(p["path"] for p in m["programs"] if p["runtime"] == runtime and p["name"] == "train_step")


def flip(bundle: Path, runtime: str, other: Path) -> str:
    shard = bundle / "subject/cache/shard_00000.bin"
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    shard.write_bytes(bytes(raw))
    return "SHA-256 does not match the manifest"


def truncate(bundle: Path, runtime: str, other: Path) -> str:
    program = bundle / _program_file(bundle, runtime)
    program.write_bytes(program.read_bytes()[:-100])
    return "bytes, manifest says"


def swap(bundle: Path, runtime: str, other: Path) -> str:
    index = json.loads((bundle / "subject/cache/cache_index.json").read_text())
    e0, e1 = index["entries"][0], index["entries"][1]
    shard = bundle / "subject/cache" / e0["shard"]
    raw = bytearray(shard.read_bytes())
    a, b = raw[e0["offset"]:e0["offset"] + e0["bytes"]], raw[e1["offset"]:e1["offset"] + e1["bytes"]]
    raw[e0["offset"]:e0["offset"] + e0["bytes"]], raw[e1["offset"]:e1["offset"] + e1["bytes"]] = b, a
    shard.write_bytes(bytes(raw))
    resign(bundle)
    return "entry 0 (bytes"


def foreign_cache(bundle: Path, runtime: str, other: Path) -> str:
    shutil.rmtree(bundle / "subject/cache")
    shutil.copytree(other / "subject/cache", bundle / "subject/cache")
    resign(bundle)
    return "cache was made for another model, plan or schedule"


def edited_manifest(bundle: Path, runtime: str, other: Path) -> str:
    path = bundle / MANIFEST
    path.write_bytes(path.read_bytes().replace(b'"lr": 0.001', b'"lr": 0.002', 1))
    return "contents do not match manifest_sha256"


DAMAGE = {"flip": flip, "truncate": truncate, "swap": swap, "foreign_cache": foreign_cache,
          "edited_manifest": edited_manifest}


@pytest.fixture(scope="module")
def other_bundle(tmp_path_factory) -> Path:
    """Same model and plan, another schedule (seed): its cache is foreign to device_bundle."""
    return compile_tiny(tmp_path_factory.mktemp("other") / "bundle", "flux-tiny", grad_accum=2, seed=1)


@pytest.mark.parametrize("damage", list(DAMAGE))
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_damaged_bundles_are_refused_alike_by_every_runtime(device_bundle, other_bundle, tmp_path, capsys, runtime,
                                                             damage):
    bundle = tmp_path / "bundle"
    shutil.copytree(device_bundle, bundle, ignore=shutil.ignore_patterns("runs"))
    run_dir = tmp_path / "run"
    argv = ["train", str(bundle), "--runtime", runtime, "--run-dir", str(run_dir), "--checkpoint-every", "1"]
    assert main(argv + ["--steps", "1"]) == 0
    capsys.readouterr()
    checkpoint = (run_dir / CHECKPOINT).read_bytes()
    lora = {p.name: p.read_bytes() for p in (run_dir / "lora").iterdir()}
    expect = DAMAGE[damage](bundle, runtime, other_bundle)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and expect in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert (run_dir / CHECKPOINT).read_bytes() == checkpoint
    assert {p.name: p.read_bytes() for p in (run_dir / "lora").iterdir()} == lora


def test_any_one_byte_change_to_the_manifest_is_refused(device_bundle, tmp_path):
    from ditskip_edge.runtime.errors import BundleError
    raw = (device_bundle / MANIFEST).read_bytes()
    fields = list(json.loads(raw))
    for field in fields:
        at = raw.index(f'"{field}":'.encode()) + len(field) + 4          # a byte of the field's value
        bad = bytearray(raw)
        bad[at] = ord("1") if bad[at] != ord("1") else ord("2")
        copy = tmp_path / field
        copy.mkdir()
        (copy / MANIFEST).write_bytes(bytes(bad))
        with pytest.raises(BundleError, match="manifest"):
            read_manifest(copy, verify=False)


def test_a_checkpoint_belongs_to_one_runtime_and_program(device_bundle, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["train", str(device_bundle), "--runtime", "executorch", "--steps", "1", "--run-dir",
                 str(run_dir)]) == 0
    capsys.readouterr()
    before = (run_dir / CHECKPOINT).read_bytes()
    for other in (["--runtime", "ort"], ["--runtime", "executorch", "--precision", "int8"]):
        assert main(["train", str(device_bundle), *other, "--run-dir", str(run_dir)]) == 2
        assert "checkpoint belongs to another" in capsys.readouterr().err
    assert (run_dir / CHECKPOINT).read_bytes() == before
