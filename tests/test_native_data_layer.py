"""The native core's data layer (device_runtime/src/util, src/bundle) against the Python runtime it reproduces.

Properties protected, each compared byte for byte with ditskip_edge/runtime:
- py_dumps is json.dumps (floats as repr, ensure_ascii escapes, uint64, sort_keys, separators, indent), so the cache
  identity's SHA-256 computed natively is the one the cache index carries;
- the schedule is re-serialized as Schedule.from_json(...).to_json() (t as float, config defaults), and refused
  with Schedule.load's messages;
- rng.normal gives the same float32 bits for any seed (x86-64 and, cross-built, arm64 under qemu);
- entry_layout is cache_format.entry_layout for every codec, and refuses what TensorCodec / CacheCodec refuse;
- a bundle opens, its fields read as bundle.py reads them, every cache entry reads as CacheReader.read_encoded; a
  damaged bundle or cache is refused with the Python runtime's message, exit code 2;
- safetensors files are written as safetensors_io.safetensors_bytes writes them, and any valid file reads back;
- a photo's pixels are Pillow's convert("RGB") / 127.5 - 1 in float32, for RGB, grey, RGBA, LA and palette PNGs.

The checker (device_runtime/tests/data_layer_check.cpp) is the CMake target `make native` / `make native-arm64` build.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, compile_tiny
from ditskip_edge.runtime.bundle import MANIFEST, Bundle, read_manifest, sha256_file, write_manifest
from ditskip_edge.runtime.cache_format import CacheCodec, entry_layout, identity_digest
from ditskip_edge.runtime.errors import UserError
from test_runtime import swap                      # the damage table's entry swap (it re-signs the manifest)

@pytest.fixture(scope="module")
def checker(runner) -> Path:
    """device_runtime/tests/data_layer_check.cpp as `make native` builds it (CMake target data_layer_check: the
    library's own data-layer objects)."""
    return runner.binary.parent / "data_layer_check"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """flux-tiny, front 1 / back 2 of 6 blocks, 6 steps x grad_accum 2, a stored cache (int8-channel with
    front.txt=lowrank-r16), no device programs."""
    return compile_tiny(tmp_path_factory.mktemp("bundle") / "flux", "flux-tiny", grad_accum=2)


def run(checker: Path, *args, ok: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([str(checker), *map(str, args)], capture_output=True, timeout=120)
    if ok:
        assert out.returncode == 0, out.stderr.decode(errors="replace")
    return out


def refusal(checker: Path, *args) -> str:
    """The checker's one-line refusal (exit code 2)."""
    out = run(checker, *args, ok=False)
    err = out.stderr.decode()
    assert out.returncode == 2, (out.returncode, err)
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


def python_refusal(fn) -> str:
    with pytest.raises(UserError) as e:
        fn()
    return str(e.value)


def copy_bundle(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def resign(bundle: Path, manifest: dict | None = None) -> None:
    """Rewrite the manifest as the compiler would have for the files there now (so only the checks below it see the
    damage)."""
    m = manifest if manifest is not None else read_manifest(bundle, verify=False)
    m["files"] = {rel: {"sha256": sha256_file(bundle / rel), "bytes": (bundle / rel).stat().st_size}
                  for rel in m["files"] if (bundle / rel).is_file()}
    write_manifest(bundle / MANIFEST, m)


# ------------------------------------------------------------------------------------------------ json.dumps

TRICKY = {
    "floats": [1e-05, 1e16, 0.1, 100.0, 1e-4, 5e-324, 1.7976931348623157e308, -0.0, 0.0, 1e15, 123456789012345.6,
               0.30000000000000004, 2.5e-05, 1e22, 9999999999999998.0, 1e-07, 0.001, 0.0001234, 1.5, -2.5e300],
    "ints": [0, -1, 2 ** 64 - 1, 2 ** 63 - 1, -(2 ** 63), 9007199254740993],
    "strings": ["plain", "caf\u00e9 photo.png", "\u65e5\u672c\u8a9e.png", "emoji \U0001F600 and \U00010348",
                "quote \" backslash \\ slash /", "tab\t nl\n cr\r bs\b ff\f", "\x01\x1f\x7f\x80\u00a0\u2028",
                ""],
    "nested": {"z": [True, False, None], "a": {}, "m": [], "\u00e9": {"b": 1, "a": [1, {"y": 2.0, "x": 0.5}]}},
    "noise_seed": 18446744073709551615,
}

LAYOUTS = [dict(), dict(sort_keys=True), dict(separators=(",", ":")), dict(indent=1), dict(indent=0),
           dict(indent=2, sort_keys=True)]


def _checker_args(how: dict) -> list[str]:
    args = ["sort"] if how.get("sort_keys") else []
    if "separators" in how:
        args.append("compact")
    if "indent" in how:
        args.append(f"indent={how['indent']}")
    return args


@pytest.mark.parametrize("how", LAYOUTS, ids=lambda h: ",".join(f"{k}={v}" for k, v in h.items()) or "default")
def test_py_dumps_writes_what_json_dumps_writes(checker, tmp_path, how):
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(TRICKY, ensure_ascii=False), encoding="utf-8")   # read back from UTF-8 text
    out = run(checker, "dumps", path, *_checker_args(how)).stdout.decode()
    assert out == json.dumps(json.loads(path.read_text(encoding="utf-8")), **how) + "\n"


def test_float_repr_is_pythons_for_random_doubles(checker, tmp_path):
    rnd = random.Random(0)
    values = [struct.unpack("<d", struct.pack("<Q", rnd.getrandbits(64)))[0] for _ in range(3000)]
    values += [rnd.uniform(-1, 1) * 10.0 ** rnd.randint(-30, 30) for _ in range(3000)]
    values += [float(i) for i in range(-50, 50)] + [10.0 ** e for e in range(-20, 25)] + [2.0 ** e for e in range(-60, 70)]
    values = [v for v in values if math.isfinite(v)]
    path = tmp_path / "floats.json"
    path.write_text(json.dumps(values))
    assert run(checker, "dumps", path).stdout.decode() == json.dumps(values) + "\n"


# --------------------------------------------------------------------------------------- the bundle and its cache

def _python_open(bundle_dir: Path) -> dict:
    b = Bundle.open(bundle_dir)
    identity = b.cache_identity
    return {"manifest_sha256": b.manifest_sha256, "kind": b.kind, "identity_sha256": identity_digest(identity),
            "identity": identity, "cache_mode": b.cache_mode, "text_rows": b.text_rows,
            "num_samples": b.schedule.num_samples,
            "optimizer": b.optimizer.to_json(), "programs": b.programs}


def test_the_cache_identity_digest_is_the_one_the_cache_index_carries(checker, bundle):
    native = json.loads(run(checker, "open", bundle).stdout)
    python = _python_open(bundle)
    index = json.loads((bundle / "subject/cache/cache_index.json").read_text())
    assert native["identity_sha256"] == python["identity_sha256"] == index["identity_sha256"]
    assert json.dumps(native["identity"], sort_keys=True) == json.dumps(python["identity"], sort_keys=True)
    for key in ("manifest_sha256", "kind", "cache_mode", "text_rows", "num_samples", "optimizer"):
        assert native[key] == python[key], key


def test_a_schedule_is_hashed_as_from_json_then_to_json(checker, bundle, tmp_path):
    """t written as an integer, a config without its later fields, unicode photo names and the largest seeds: the
    identity hashes what Schedule.to_json gives, not the file's text."""
    from ditskip_edge.runtime.schedule import Schedule
    b = copy_bundle(bundle, tmp_path / "b")
    path = b / "subject/schedule.json"
    d = json.loads(path.read_text())
    del d["config"]["dynamic_patches"], d["clamped_samples"]
    d["photo_names"] = ["caf\u00e9.png", "\u65e5\u672c.png", "\U0001F600.png", "a\"b.png"][:len(d["photo_names"])]
    d["samples"][0][2] = 1
    d["samples"][1][2] = 0
    d["samples"][2][2] = 1e-05
    d["samples"][3][4] = 2 ** 63 - 1
    d["samples"][4][4] = 12.0
    d = {k: d[k] for k in reversed(list(d))}                 # key order of the file does not matter
    path.write_text(json.dumps(d))
    out = run(checker, "schedule", path).stdout.decode()
    assert out == json.dumps(Schedule.load(path).to_json()) + "\n"
    resign(b)
    native = json.loads(run(checker, "open", b).stdout)
    python = Bundle.open(b)
    assert native["identity_sha256"] == identity_digest(python.cache_identity)


def _bad_schedule(name: str, d: dict) -> dict:
    if name == "sample_fields":
        d["sample_fields"] = ["index", "photo", "t"]
    elif name == "algorithm":
        d["algorithm"] = 1
    elif name == "algorithm_quote":
        d["algorithm"] = "it's"
    elif name == "count":
        d["samples"] = d["samples"][:-1]
    elif name == "config_key":
        d["config"]["speed"] = 3
    elif name == "no_samples":
        del d["samples"]
    elif name == "short_sample":
        d["samples"][0] = d["samples"][0][:3]
    return d


@pytest.mark.parametrize("name", ["sample_fields", "algorithm", "algorithm_quote", "count", "config_key", "no_samples",
                                  "short_sample", "missing"])
def test_a_bad_schedule_is_refused_with_schedule_loads_message(checker, bundle, tmp_path, name):
    from ditskip_edge.runtime.schedule import Schedule
    path = tmp_path / "schedule.json"
    if name != "missing":
        path.write_text(json.dumps(_bad_schedule(name, json.loads((bundle / "subject/schedule.json").read_text()))))
    assert refusal(checker, "schedule", path) == python_refusal(lambda: Schedule.load(path))


def test_every_cache_entry_reads_as_read_encoded(checker, bundle):
    native = json.loads(run(checker, "cache", bundle).stdout)
    b = Bundle.open(bundle)
    reader = b.cache()
    python = [{k: hashlib.sha256(a.tobytes()).hexdigest() for k, a in reader.read_encoded(i).items()}
              for i in range(len(reader))]
    assert len(python) == b.schedule.num_samples
    assert native == python
    assert [list(e) for e in native] == [list(e) for e in python]           # parts in the index's layout order


def _flip_listed_file(b: Path) -> None:
    shard = b / "subject/cache/shard_00000.bin"
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    shard.write_bytes(bytes(raw))


def _truncate_listed_file(b: Path) -> None:
    p = b / "model/kept_weights.safetensors"
    p.write_bytes(p.read_bytes()[:-100])


def _edit_manifest(b: Path) -> None:
    p = b / MANIFEST
    raw = p.read_bytes()
    assert b'"lr": 0.001' in raw
    p.write_bytes(raw.replace(b'"lr": 0.001', b'"lr": 0.002', 1))


def _break_first_line(b: Path) -> None:
    p = b / MANIFEST
    p.write_bytes(p.read_bytes().replace(b'"manifest_sha256": "', b'"manifest_sha256":  "', 1))


def _rewrite(b: Path, **fields) -> None:
    m = read_manifest(b, verify=False)
    m.update(fields)
    write_manifest(b / MANIFEST, m)


def _edit_index(b: Path, edit) -> None:
    p = b / "subject/cache/cache_index.json"
    index = json.loads(p.read_text())
    edit(index)
    p.write_text(json.dumps(index, indent=1))
    resign(b)


def _foreign_cache(index: dict) -> None:
    index["identity"]["schedule"]["config"]["seed"] = 1
    index["identity_sha256"] = identity_digest(index["identity"])


def _edited_identity(index: dict) -> None:
    index["identity"]["plan"] = [6, 2, 2]


def _bad_layout(index: dict) -> None:
    first = next(iter(index["layout"]))
    index["layout"][first]["offset"] = 64


def _wrong_count(index: dict) -> None:
    index["num_entries"] += 1


def _entry_outside(index: dict) -> None:
    index["entries"][3]["offset"] += 10 ** 9


def _other_format(index: dict) -> None:
    index["format_version"] = 2


def _missing_key(index: dict) -> None:
    del index["shards"]


def _truncate_shard(b: Path) -> None:
    shard = b / "subject/cache/shard_00000.bin"
    shard.write_bytes(shard.read_bytes()[:-64])
    resign(b)


def _without_subject_stage(b: Path, kind: str) -> None:
    m = read_manifest(b, verify=False)
    del m["subject_stage"]
    m["bundle_kind"] = kind
    write_manifest(b / MANIFEST, m)


def _remove(rel: str):
    def damage(b: Path) -> None:
        (b / rel).unlink()
        resign(b)
    return damage


DAMAGE = {
    "flipped_byte": (_flip_listed_file, "SHA-256 does not match the manifest (file changed or corrupt)"),
    "truncated_file": (_truncate_listed_file, "bytes, manifest says"),
    "missing_file": (lambda b: (b / "subject/photos/000.png").unlink(), "listed in the manifest but missing"),
    "edited_manifest": (_edit_manifest, "contents do not match manifest_sha256"),
    "first_line": (_break_first_line, "first line is not"),
    "format": (lambda b: _rewrite(b, format="other-bundle"), "format is 'other-bundle', expected"),
    "format_version": (lambda b: _rewrite(b, format_version=2), "format_version 2 is not supported"),
    "no_manifest": (lambda b: (b / MANIFEST).unlink(), "not a bundle (no manifest.json)"),
    "swapped_entries": (lambda b: swap(b, "executorch", None), "entry 0 (bytes"),
    "foreign_cache": (lambda b: _edit_index(b, _foreign_cache), "cache was made for another model, plan or schedule"),
    "edited_identity": (lambda b: _edit_index(b, _edited_identity), "field identity does not match identity_sha256"),
    "layout": (lambda b: _edit_index(b, _bad_layout), "field layout does not match codec"),
    "entry_count": (lambda b: _edit_index(b, _wrong_count), "entries, expected"),
    "entry_outside": (lambda b: _edit_index(b, _entry_outside), "an entry points outside its shard"),
    "cache_format": (lambda b: _edit_index(b, _other_format), "format 'ditskip-edge-residual-cache' version 2"),
    "index_key": (lambda b: _edit_index(b, _missing_key), "malformed cache index (KeyError: 'shards')"),
    "truncated_shard": (_truncate_shard, "(truncated or overwritten)"),
    "no_index": (_remove("subject/cache/cache_index.json"), "residual cache index missing"),
    "no_shard": (_remove("subject/cache/shard_00000.bin"), "residual cache shard missing"),
    "model_bundle": (lambda b: _without_subject_stage(b, "model"), "a model bundle (no photos, no schedule, no cache)"),
    "bundle_kind": (lambda b: _without_subject_stage(b, "photos"), "bundle_kind 'photos', expected 'model' or 'subject'"),
    "bad_cache_mode": (lambda b: _rewrite(b, subject_stage={**read_manifest(b, verify=False)["subject_stage"],
                                                             "cache_mode": "sometimes"}),
                       "subject_stage.cache_mode 'sometimes', expected one of stored, x0-only, cache-free"),
}


def _python_cache_read(b: Path) -> None:
    bundle = Bundle.open(b)
    reader = bundle.cache()
    for i in range(len(reader)):
        reader.read_encoded(i)


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_bundle_is_refused_with_the_python_runtimes_message(checker, bundle, tmp_path, damage):
    b = copy_bundle(bundle, tmp_path / "b")
    fn, expect = DAMAGE[damage]
    fn(b)
    python = python_refusal(lambda: _python_cache_read(b))
    native = refusal(checker, "cache", b)
    assert expect in python, python
    assert native == python


def test_a_path_that_is_not_a_folder_is_refused_as_python_refuses_it(checker, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    assert refusal(checker, "open", f) == python_refusal(lambda: Bundle.open(f))
    assert refusal(checker, "open", tmp_path / "nothing") == python_refusal(lambda: Bundle.open(tmp_path / "nothing"))


PROGRAMS = [
    {"name": "train_step", "runtime": "executorch", "path": "programs/executorch/train_step_int8.pte",
     "inputs": [{"name": "x0", "shape": [1, 16, 16, 16], "dtype": "float32"},
                {"name": "entry.front.img.codes", "shape": [1, 64, 32], "dtype": "int8"}],
     "outputs": [{"name": "loss", "shape": [], "dtype": "float32"}], "method": "forward",
     "trainable": {"step.a.lora_A.default.weight": "transformer.a.lora_A.weight"},
     "trainable_shapes": {"step.a.lora_A.default.weight": [4, 32]}, "precision": "int8", "backend": "xnnpack",
     "data": ["programs/executorch/train_step_int8.ptd"], "remat": "blocks", "block": None, "memory": {"x": 1}},
    {"name": "train_step", "runtime": "ort", "path": "programs/ort/train.onnx", "inputs": [], "outputs": [],
     "precision": "fp32"},
    {"name": "preprocess", "runtime": "executorch", "path": "programs/executorch/preprocess_256x256.pte",
     "inputs": [{"name": "photo", "shape": [1, 3, 256, 256]}], "outputs": []},
]


@pytest.mark.parametrize("query", [("train_step", "executorch", None), ("train_step", "executorch", "int8"),
                                   ("train_step", "ort", None), ("preprocess", "executorch", None),
                                   ("train_step", "executorch", "fp32"), ("train_step", "ort", "int4"),
                                   ("encode", "executorch", None), ("train_step", "tflite", None),
                                   ("train_step", "executorch", "bf16")])
def test_find_program_picks_or_refuses_as_contract_find_program(checker, bundle, tmp_path, query):
    from ditskip_edge.runtime.contract import find_program
    b = copy_bundle(bundle, tmp_path / "b")
    _rewrite(b, programs=PROGRAMS)
    name, runtime, precision = query
    python_bundle = Bundle.open(b, verify=False)
    args = ["program", b, name, runtime] + ([precision] if precision else [])
    try:
        expect = find_program(python_bundle.programs, name, runtime, precision, str(python_bundle.root))
    except UserError as e:
        assert refusal(checker, *args) == str(e)
        return
    got = json.loads(run(checker, *args).stdout)
    for key in ("name", "runtime", "path", "inputs", "outputs", "trainable", "trainable_shapes", "data"):
        want = expect.get(key, {"trainable": {}, "trainable_shapes": {}, "data": []}.get(key))
        if key in ("inputs", "outputs"):
            want = [{"dtype": "float32", **s} for s in want]
        assert got[key] == want, key
    for key, default in (("method", "forward"), ("precision", "fp32"), ("backend", "portable"), ("remat", "none")):
        assert got[key] == expect.get(key, default), key


@pytest.mark.parametrize("optimizer", [{"lr": 0.001, "betas": [0.9, 0.999], "eps": 1e-08, "weight_decay": 0.0001},
                                       {"lr": 1, "betas": [0.5, 0.75], "eps": 1e-06, "weight_decay": 0,
                                        "lr_schedule": "linear"},
                                       {"lr": 0.1, "betas": [0.9], "eps": 1e-08, "weight_decay": 0.0},
                                       {"betas": [0.9, 0.999], "eps": 1e-08, "weight_decay": 0.0},
                                       {"lr": 0.1, "betas": [0.9, 0.99], "eps": 1e-08, "weight_decay": 0.0,
                                        "lr_schedule": "cosine"}])
def test_the_optimizer_reads_or_is_refused_as_optimizer_spec_from_json(checker, bundle, tmp_path, optimizer):
    b = copy_bundle(bundle, tmp_path / "b")
    _rewrite(b, optimizer=optimizer)
    try:
        expect = Bundle.open(b).optimizer.to_json()
    except UserError as e:
        assert refusal(checker, "open", b) == str(e)
        return
    assert json.loads(run(checker, "open", b).stdout)["optimizer"] == expect


# ---------------------------------------------------------------------------------------------------- the rng

@pytest.mark.parametrize("seed", [0, 1, 12345, 980875101213047373, 2 ** 63 - 1, 2 ** 64 - 1])
def test_rng_normal_gives_pythons_float32_bits(checker, seed):
    from ditskip_edge.runtime import rng
    n = 20000
    native = run(checker, "rng", seed, n).stdout.decode().split()
    python = [f"{v:08x}" for v in rng.normal(seed, (n,)).view(np.uint32)]
    assert native == python


# ------------------------------------------------------------------------------------------ the cache layout

SHAPES = {"x0": [1, 16, 16, 16], "front.img": [1, 64, 32], "front.txt": [1, 8, 32], "back.img": [1, 60, 30]}
CODECS = ["fp32", "fp16", "int8-token", "int8-channel", "int8-g32", "int8-t32", "int4-g32", "int4-t32", "int8-g2",
          "int4-t4", "lowrank-r8", "lowrank-r64", "int8-channel,front.txt=lowrank-r16",
          " int4-g32 , back.img=fp16,front.img=int8-t32", "fp16,front.txt=lowrank-r8,front.txt=fp32"]


@pytest.mark.parametrize("codec", CODECS)
def test_entry_layout_is_cache_formats_for_every_codec(checker, codec):
    layout, entry_bytes = entry_layout(CacheCodec.parse(codec), {k: tuple(v) for k, v in SHAPES.items()})
    got = json.loads(run(checker, "layout", codec, json.dumps(SHAPES)).stdout)
    assert got["entry_bytes"] == entry_bytes and entry_bytes % 64 == 0
    assert list(got["layout"]) == list(layout)
    assert got["layout"] == layout


@pytest.mark.parametrize("codec,shapes", [("int9-g32", SHAPES), ("int8-g3", SHAPES), ("int8-g0", SHAPES),
                                          ("lowrank-r0", SHAPES), ("lowrank-r5000", SHAPES), ("fp32,fp16", SHAPES),
                                          ("front.img=fp16", SHAPES), ("int4-g32", {"a": [1, 4, 7]}),
                                          ("fp32", {"a": [4, 7]}), ("int8-token,a=bogus", {"a": [1, 2, 2]})])
def test_entry_layout_refuses_what_the_python_codecs_refuse(checker, codec, shapes):
    expect = python_refusal(lambda: entry_layout(CacheCodec.parse(codec), {k: tuple(v) for k, v in shapes.items()}))
    assert refusal(checker, "layout", codec, json.dumps(shapes)) == expect


# ------------------------------------------------------------------------------------------------ safetensors

def test_safetensors_written_natively_are_the_python_writers_bytes(checker, bundle, tmp_path):
    """The compiler's text conditioning (written by the safetensors package: its own header order and padding) and
    a file with F16, metadata and keys that sort unlike their insertion: read natively, written natively, the bytes
    are safetensors_io.safetensors_bytes of the same tensors."""
    from ditskip_edge.runtime.safetensors_io import read_safetensors, safetensors_bytes
    from safetensors.numpy import save_file
    rnd = np.random.default_rng(0)
    made = tmp_path / "made.safetensors"
    tensors = {"b.weight": rnd.standard_normal((3, 5)).astype(np.float32), "B": np.arange(7, dtype=np.float16),
               "_x": np.array(2.5, np.float32), "\u00e9t\u00e9": rnd.standard_normal((2, 1, 2)).astype(np.float32),
               "a.lora_A.weight": np.zeros((0, 4), np.float32)}
    save_file(tensors, str(made), metadata={"z": "1", "format": "pt", "\u00fcber": "caf\u00e9 \"q\""})
    for src in [bundle / "subject/text_conditioning.safetensors", bundle / "model/kept_weights.safetensors", made]:
        out = tmp_path / "out" / (src.stem + ".safetensors")
        run(checker, "safetensors-roundtrip", src, out)
        assert out.read_bytes() == safetensors_bytes(*read_safetensors(src)), src
        assert not out.with_name(out.name + ".tmp").exists()
        run(checker, "safetensors-roundtrip", out, out)                    # rewriting a file in place: same bytes
        assert out.read_bytes() == safetensors_bytes(*read_safetensors(src)), src


@pytest.mark.parametrize("damage", ["short", "header_length", "offsets", "dtype", "not_json"])
def test_a_broken_safetensors_file_is_refused_naming_it(checker, tmp_path, damage):
    from ditskip_edge.runtime.safetensors_io import safetensors_bytes
    raw = safetensors_bytes({"a": np.ones((2, 3), np.float32)}, {"k": "v"})
    n = struct.unpack("<Q", raw[:8])[0]
    header = raw[8:8 + n]
    if damage == "short":
        raw = raw[:5]
    elif damage == "header_length":
        raw = struct.pack("<Q", len(raw)) + raw[8:]
    elif damage == "offsets":
        raw = raw[:8] + header.replace(b"[0,24]", b"[0,96]") + raw[8 + n:]
    elif damage == "dtype":
        raw = raw[:8] + header.replace(b'"F32"', b'"F64"') + raw[8 + n:]
    else:
        raw = raw[:8] + header.replace(b"{", b"[", 1) + raw[8 + n:]
    src = tmp_path / "bad.safetensors"
    src.write_bytes(raw)
    err = refusal(checker, "safetensors-roundtrip", src, tmp_path / "out.safetensors")
    assert err.startswith(f"{src}: ")
    assert not (tmp_path / "out.safetensors").exists()


# ----------------------------------------------------------------------------------------------------- photos

def _pillow_pixels(path: Path) -> np.ndarray:
    from PIL import Image
    with Image.open(path) as im:
        arr = np.asarray(im.convert("RGB"), dtype=np.float32) / 127.5 - 1.0
    return np.ascontiguousarray(arr.transpose(2, 0, 1))


def test_photo_pixels_are_pillows_rgb_over_127_5_minus_1(checker, bundle, tmp_path):
    from PIL import Image
    rnd = np.random.default_rng(1)
    rgba = rnd.integers(0, 256, (37, 53, 4), dtype=np.uint8)
    def image(a: np.ndarray, mode: str):
        im = Image.fromarray(np.ascontiguousarray(a))
        assert im.mode == mode
        return im
    made = {"rgba": image(rgba, "RGBA"), "grey": image(rgba[..., 0], "L"), "grey_alpha": image(rgba[..., :2], "LA"),
            "rgb": image(rgba[..., :3], "RGB"), "palette": image(rgba[..., :3], "RGB").quantize(colors=50),
            "one_bit": image(rgba[..., 0] > 127, "1")}
    paths = sorted((bundle / "subject/photos").glob("*.png"))
    for name, im in made.items():
        p = tmp_path / f"{name}.png"
        im.save(p)
        paths.append(p)
    for p in paths:
        out = tmp_path / (p.stem + ".f32")
        h, w = map(int, run(checker, "photo", p, out).stdout.split())
        expect = _pillow_pixels(p)
        assert (3, h, w) == expect.shape, p
        assert out.read_bytes() == expect.tobytes(), p
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(40))
    assert refusal(checker, "photo", bad, tmp_path / "x").startswith(f"{bad}: not a readable PNG")


# ------------------------------------------------------------------------------------------------------ arm64

def test_arm64_build_draws_the_same_noise_and_writes_the_same_json(checker, arm64_runner, tmp_path):
    """The same sources cross-built for aarch64 (as the phone build compiles them) and run under qemu: rng.normal's
    bits and py_dumps equal the x86-64 build's (libm and to_chars of another target)."""
    from device_tests.native_runtime import QEMU
    arm = arm64_runner.binary.parent / "data_layer_check"
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps(TRICKY))
    for args in (["rng", 2 ** 63 - 1, 4000], ["rng", 7, 4000], ["dumps", doc, "sort"]):
        native = run(checker, *args).stdout
        emulated = subprocess.run([*QEMU, str(arm), *map(str, args)],
                                  capture_output=True, timeout=300)
        assert emulated.returncode == 0, emulated.stderr.decode(errors="replace")
        assert emulated.stdout == native, args
