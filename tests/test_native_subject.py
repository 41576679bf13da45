"""The subject stage in the native core (`ditskip-run personalize`, ditskip_personalize; issue 56) against the Python
runtime's (ditskip_edge/runtime/subject.py), the oracle.

Properties protected:
- for the same model bundle, photos and prompt, the native stage writes the Python runtime's subject/schedule.json,
  cache shards and cache_index.json byte for byte, on a bundle whose codec spec mixes int4 (groups of 32), fp16 and
  int8 per residual (x0 is fp32), and the subject_stage record with the same fields and values (timings aside);
- a run stopped after two entries (stop_after) leaves the Python runtime's journal and open shard byte for byte;
- the subject bundle opens verified in the Python runtime and the native trainer trains it (personalize without
  --no-train); an x0-only and a cache-free bundle train to the Python runtime's losses (their residuals computed each
  step by the native forward programs), the x0-only cache byte for byte the Python runtime's;
- a run killed with SIGKILL at several points, then the same command, gives the one-shot run's bytes with nothing
  computed twice (resumed_entries + computed_entries == num_samples, resumed == the entries journalled at the kill);
- Ctrl-C stops after the current entry (exit 1, one "stopped" line) with the journal kept, and the same command
  continues it;
- bad input is the Python runtime's one-line refusal, exit 2, and leaves nothing: an unreadable photo, too few
  photos, a subject bundle for a model bundle, a program of another model, a data file that does not match its
  program, a prompt the bundle lacks;
- the codecs (subject_check encode) equal codecs.py's bytes and relative errors on edge cases: rounding ties, zero
  groups (MIN_SCALE), fp16 overflow and subnormals, ragged groups (a group size that does not divide its axis), every
  codec kind; the journal writer's shard roll-over and resume equal cache.py's CacheWriter; the crop
  (patches.py) and the tiled encode's blend (tiling.py encode_tiled) are numpy's bit for bit;
- arm64 under qemu: one run's cache within 1e-5 relative of x86-64's (ExecuTorch's arm64 kernels fuse
  multiply-adds; int codes within one step), and one refusal as on x86-64.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, compile_tiny
from device_tests.native_runtime import popen, run

CHECK = ROOT / "build/native/subject_check"
CODEC = "int4-g32,front.txt=fp16,back.img=int8-channel"
PROMPTS = ("a photo of sks toy", "a sks toy on a beach")
STEPS, ACCUM = 3, 2                    # 6 samples


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """flux-tiny model bundle, portable block programs with their weights in .ptd data files, a mixed codec."""
    from export.executorch_stage import ExecutorchPrograms
    from export.executorch_subject import SubjectPrograms
    return compile_tiny(tmp_path_factory.mktemp("nsm") / "model", "flux-tiny", steps=STEPS, grad_accum=ACCUM,
                        images=None, prompt=PROMPTS[0], more_prompts=[PROMPTS[1]], cache_codec=CODEC,
                        programs=[ExecutorchPrograms(("fp32",), preprocess=False)],
                        subject_programs=SubjectPrograms("fp32", backend="portable", external_weights=True))


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    """Four photos of sizes the schedule clamps and places differently, one resized (short side 280 > 256: Lanczos)."""
    from PIL import Image
    d = tmp_path_factory.mktemp("nsp") / "photos"
    d.mkdir()
    rs = np.random.RandomState(7)
    for i, (w, h) in enumerate([(240, 200), (300, 280), (180, 240), (256, 192)]):
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        img = np.stack([127 + 100 * np.sin(xx / (9 + 3 * c + i) + yy / (13 + c)) for c in range(3)], -1)
        img += rs.uniform(-20, 20, img.shape)
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(d / f"toy_{i}.png")
    return d


def _python_stage(model: Path, photos: Path, out: Path, **cfg) -> dict:
    from ditskip_edge.runtime.subject import SubjectConfig, personalize
    return personalize(model, photos, out, SubjectConfig(progress=False, **cfg))


@pytest.fixture(scope="module")
def python_bundle(model, photos, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("nspy") / "subject"
    _python_stage(model, photos, out)
    return out


def _native(runner, model: Path, photos: Path, out: Path, *extra: str, timeout: float = 300):
    return run(runner, "personalize", model, "--photos", photos, "--out", out, *extra, timeout=timeout)


@pytest.fixture(scope="module")
def native_bundle(runner, model, photos, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("nsnat") / "subject"
    r = _native(runner, model, photos, out, "--no-train", "--json")
    assert r.returncode == 0, r.stderr
    return out, json.loads(r.stdout)["subject_stage"]


def _cache_files(bundle: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((bundle / "subject/cache").iterdir())}


TIMINGS = ("seconds", "seconds_per_sample")


def test_schedule_cache_shards_and_index_are_the_python_runtimes_byte_for_byte(native_bundle, python_bundle):
    native, summary = native_bundle
    assert (native / "subject/schedule.json").read_bytes() == (python_bundle / "subject/schedule.json").read_bytes()
    got, want = _cache_files(native), _cache_files(python_bundle)
    assert sorted(got) == sorted(want) == ["cache_index.json", "shard_00000.bin"]
    assert got["shard_00000.bin"] == want["shard_00000.bin"]
    assert got["cache_index.json"] == want["cache_index.json"]
    from ditskip_edge.runtime.bundle import read_manifest
    mn, mp = read_manifest(native), read_manifest(python_bundle)
    assert list(mn) == list(mp)
    sn = {k: v for k, v in mn["subject_stage"].items() if k not in TIMINGS}
    sp = {k: v for k, v in mp["subject_stage"].items() if k not in TIMINGS}
    assert sn == sp and list(mn["subject_stage"]) == list(mp["subject_stage"])
    # every file but the photos (PNG encoders differ: the pixels are compared) and the manifest is listed alike
    from PIL import Image
    photos_n = [k for k in mn["files"] if k.startswith("subject/photos/")]
    assert photos_n == [k for k in mp["files"] if k.startswith("subject/photos/")]
    for k in photos_n:
        assert np.array_equal(np.asarray(Image.open(native / k)), np.asarray(Image.open(python_bundle / k)))
    assert {k: v for k, v in mn["files"].items() if k not in photos_n} == \
        {k: v for k, v in mp["files"].items() if k not in photos_n}
    assert summary["computed_entries"] == STEPS * ACCUM and summary["resumed_entries"] == 0
    assert summary["cache_entry_bytes"] == json.loads(got["cache_index.json"])["entry_bytes"]
    assert set(summary) >= {"model_bundle", "bundle", "cache_mode", "prompt", "photos", "num_samples", "seconds",
                            "seconds_per_sample", "cache_entry_bytes", "resumed_entries", "computed_entries",
                            "footprint"}


def test_the_journal_of_a_stopped_run_is_the_python_runtimes(runner, model, photos, tmp_path):
    py = _python_stage(model, photos, tmp_path / "py" / "subject", stop_after=2)
    r = _native(runner, model, photos, tmp_path / "nat" / "subject", "--no-train", "--stop-after", "2", "--json")
    assert r.returncode == 0, r.stderr
    nat = json.loads(r.stdout)["subject_stage"]
    assert nat["interrupted_at_entry"] == py["interrupted_at_entry"] == 2
    cache_py = tmp_path / "py" / ".subject.partial" / "subject/cache"
    cache_nat = tmp_path / "nat" / ".subject.partial" / "subject/cache"
    files = sorted(p.name for p in cache_py.iterdir())
    assert files == sorted(p.name for p in cache_nat.iterdir()) == ["cache_journal.jsonl", "shard_00000.bin.tmp"]
    for name in files:
        assert (cache_nat / name).read_bytes() == (cache_py / name).read_bytes(), name
    assert not (tmp_path / "nat" / "subject").exists()
    # the Python runtime continues the native runtime's interrupted run (one format)
    shutil.rmtree(tmp_path / "py")
    done = _python_stage(model, photos, tmp_path / "nat" / "subject")
    assert done["resumed_entries"] == 2 and done["computed_entries"] == STEPS * ACCUM - 2


def test_the_subject_bundle_opens_verified_in_python_and_the_native_trainer_trains_it(runner, model, photos, tmp_path):
    from ditskip_edge.runtime.bundle import Bundle
    out = tmp_path / "subject"
    r = _native(runner, model, photos, out, "--steps", "2", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert list(doc) == ["subject_stage", "train"]
    assert doc["train"]["steps"] == 2 and np.isfinite(doc["train"]["final_loss"])
    assert Path(doc["train"]["lora"]).is_file()
    b = Bundle.open(out)                       # every file's size and SHA-256 checked
    assert b.kind == "subject" and b.cache_mode == "stored"
    b.cache().verify()


@pytest.mark.parametrize("mode", ["x0-only", "cache-free"])
def test_x0_only_and_cache_free_bundles_train_to_the_python_runtimes_losses(runner, model, photos, tmp_path, mode):
    """The native trainer computes an x0-only / cache-free bundle's residuals each step with the forward programs
    (subject.py CacheFreeEntries): the Python runtime's losses on the same programs, and the same x0 cache."""
    from conftest import train_device
    nat = tmp_path / "nat" / "subject"
    r = _native(runner, model, photos, nat, f"--{mode}", "--steps", "2", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["subject_stage"]["cache_mode"] == doc["train"]["cache_mode"] == mode
    py = tmp_path / "py" / "subject"
    _python_stage(model, photos, py, cache_mode=mode)
    want = train_device(py, "executorch", tmp_path / "py_run", steps=2)
    assert doc["train"]["losses"] == want["losses"]
    if mode == "x0-only":
        assert _cache_files(nat) == _cache_files(py)
    else:
        assert not (nat / "subject/cache").exists()


def _journal_entries(work: Path) -> int:
    j = work / "subject/cache/cache_journal.jsonl"
    if not j.is_file():
        return 0
    return sum(1 for line in j.read_text().split("\n") if line.startswith('{"entry"'))


def test_a_run_killed_at_any_point_resumes_to_the_same_bytes_computing_nothing_twice(runner, model, photos,
                                                                                     native_bundle, tmp_path):
    out = tmp_path / "subject"
    work = tmp_path / ".subject.partial"
    killed_at = []
    for after in (1, 3):              # kill -9 once `after` entries are journalled (mid-entry, or past it)
        p = popen(runner, "personalize", model, "--photos", photos, "--out", out, "--no-train")
        deadline = time.time() + 120
        while _journal_entries(work) < after and p.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        killed_at.append(_journal_entries(work))
        assert not out.exists()
    # a torn journal line (a kill mid-write) is cut off on resume
    with open(work / "subject/cache/cache_journal.jsonl", "a") as f:
        f.write('{"entry":{"shard":"shard_0')
    r = _native(runner, model, photos, out, "--no-train", "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)["subject_stage"]
    assert s["resumed_entries"] == killed_at[-1] and killed_at[-1] >= 3
    assert s["resumed_entries"] + s["computed_entries"] == STEPS * ACCUM
    assert _cache_files(out) == _cache_files(native_bundle[0])
    assert (out / "subject/schedule.json").read_bytes() == (native_bundle[0] / "subject/schedule.json").read_bytes()
    assert not work.exists()


def test_ctrl_c_stops_after_the_current_entry_with_the_journal_kept(runner, model, photos, tmp_path):
    out, work = tmp_path / "subject", tmp_path / ".subject.partial"
    p = popen(runner, "personalize", model, "--photos", photos, "--out", out, "--no-train")
    deadline = time.time() + 120
    while _journal_entries(work) < 1 and p.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 1 and err.strip().splitlines()[-1].startswith("ditskip-run personalize: stopped: "), err
    done = _journal_entries(work)
    assert 1 <= done < STEPS * ACCUM and not out.exists()
    r = _native(runner, model, photos, out, "--no-train", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["subject_stage"]["resumed_entries"] == done


# ---------------------------------------------------------------- refusals: the Python runtime's lines

def _python_cli(model: Path, photos: Path, out: Path, *extra: str) -> tuple[int, str]:
    from ditskip_edge.runtime.__main__ import main
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["personalize", str(model), "--photos", str(photos), "--out", str(out), "--no-train", *extra])
    return code, err.getvalue()


def _bad_cases():
    import test_subject_stage as t
    return {"unreadable_photo": t.bad_photo, "too_few_photos": t.too_few_photos,
            "program_of_another_model": t.program_of_another_model, "data_file_mismatch": t.data_file_mismatch}


@pytest.mark.parametrize("case", ["unreadable_photo", "too_few_photos", "subject_bundle", "program_of_another_model",
                                  "data_file_mismatch", "prompt_not_in_bundle"])
def test_bad_input_is_the_python_runtimes_one_line_and_leaves_nothing(runner, model, photos, python_bundle, tmp_path,
                                                                      case):
    extra: tuple[str, ...] = ()
    if case == "subject_bundle":
        m, ph = python_bundle, photos
    elif case == "prompt_not_in_bundle":
        m, ph, extra = model, photos, ("--prompt", "a sks toy in space")
    else:
        m, ph, _ = _bad_cases()[case](model, tmp_path)
        if case == "unreadable_photo":         # the helper copies the example photos: use this file's instead
            shutil.rmtree(ph)
            shutil.copytree(photos, ph)
            (ph / "toy_9.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"not really a png" * 20)
    out_py, out_nat = tmp_path / "py" / "subject", tmp_path / "nat" / "subject"
    code, err = _python_cli(m, ph, out_py, *extra)
    r = _native(runner, m, ph, out_nat, "--no-train", *extra)
    want = err.strip().removeprefix("python -m ditskip_edge.runtime personalize: error: ")
    got = r.stderr.strip().removeprefix("ditskip-run personalize: error: ")
    assert code == 2 and r.returncode == 2, r.stderr
    # the decoder's and ExecuTorch's own reasons (in the parentheses) are their words, not Pillow's / the binding's
    cut = " (" if case == "unreadable_photo" else " (ExecuTorch could not"
    assert len(r.stderr.strip().splitlines()) == 1
    assert got.split(cut)[0] == want.replace(str(out_py.parent), str(out_nat.parent)).split(cut)[0]
    assert not out_nat.parent.exists() or not any(out_nat.parent.iterdir())


# ---------------------------------------------------------------- codecs and the journal writer

def _py_entry(spec: str, tensors: dict[str, np.ndarray]) -> tuple[bytes, dict[str, float]]:
    from ditskip_edge.runtime.cache import NP_DTYPES
    from ditskip_edge.runtime.cache_format import X0, CacheCodec, entry_layout
    from ditskip_edge.runtime.codecs import decode_entry, encode_entry, relative_error
    codec = CacheCodec.parse(spec)
    layout, size = entry_layout(codec, {k: tuple(v.shape) for k, v in tensors.items()})
    parts = encode_entry(codec, tensors)
    buf = bytearray(size)
    for name, info in layout.items():
        raw = np.ascontiguousarray(parts[name], dtype=NP_DTYPES[info["dtype"]]).tobytes()
        buf[info["offset"]:info["offset"] + len(raw)] = raw
    res = {k: v for k, v in tensors.items() if k != X0}
    dec = decode_entry(codec, parts, {k: tuple(v.shape) for k, v in res.items()})
    return bytes(buf), {k: relative_error(dec[k], res[k]) for k in res}


def _native_entry(spec: str, tensors: dict[str, np.ndarray], tmp: Path) -> tuple[bytes, dict[str, float]]:
    np.concatenate([v.ravel() for v in tensors.values()]).astype(np.float32).tofile(tmp / "in.bin")
    shapes = {k: list(v.shape) for k, v in tensors.items()}
    r = subprocess.run([CHECK, "encode", spec, json.dumps(shapes), tmp / "in.bin", tmp / "out.bin"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return (tmp / "out.bin").read_bytes(), json.loads(r.stdout)["rel_error"]


def _edge_tensors() -> dict[str, np.ndarray]:
    rs = np.random.RandomState(3)
    a = (rs.randn(1, 24, 70) * np.linspace(0.01, 4, 70)).astype(np.float32)   # 70: ragged for g32 / g64
    a[0, 0] = 0                                                               # a zero group: MIN_SCALE
    a[0, 1, :14] = np.float32(127 / 14) * np.arange(14, dtype=np.float32) / np.float32(2)   # ties at x.5 steps
    a[0, 1, 14] = np.float32(127)
    a[0, 2, :8] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 7]                  # int4 ties (scale 1)
    a[0, 2, 8:] = 0
    b = (rs.randn(1, 10, 40) * 3e4).astype(np.float32)
    b[0, 0, :6] = [7e4, -1e5, 65504, 65520, -65519.9, np.float32(6e-8)]       # fp16 overflow, clip, subnormal
    b[0, 1, :6] = [1e-7, 3e-8, -2.9e-8, 5.96e-8, 6.1e-5, 1e-9]                # subnormals, underflow to zero
    c = (rs.randn(1, 33, 64) * 1e-3).astype(np.float32)                      # 33 tokens: ragged token groups
    return {"x0": rs.randn(1, 4, 6, 6).astype(np.float32), "front.img": a, "front.txt": b, "back.img": c}


@pytest.mark.parametrize("spec", ["fp32", "fp16", "int8-token", "int8-channel", "int8-g32", "int8-t16", "int4-g32",
                                  "int4-t8", "int4-g2", "int4-g64,front.txt=fp16,back.img=int8-t32"])
def test_codecs_are_numpys_bit_for_bit_with_its_relative_errors(spec, tmp_path):
    t = _edge_tensors()
    want, want_rel = _py_entry(spec, t)
    got, got_rel = _native_entry(spec, t, tmp_path)
    assert got == want
    assert got_rel == want_rel             # float64, numpy's float32 norms (OpenBLAS sdot) recomputed exactly


def test_a_lowrank_codec_is_refused_with_one_line(tmp_path):
    t = _edge_tensors()
    np.concatenate([v.ravel() for v in t.values()]).tofile(tmp_path / "in.bin")
    r = subprocess.run([CHECK, "encode", "lowrank-r4", json.dumps({k: list(v.shape) for k, v in t.items()}),
                        tmp_path / "in.bin", tmp_path / "out.bin"], capture_output=True, text=True)
    assert r.returncode == 2 and "does not encode lowrank caches" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("n", [7, 32, 33, 100, 1000, 4103, 20001])
def test_norms_are_numpys_float32_norms(n, tmp_path):
    x = (np.random.RandomState(n).randn(n) * np.float32(2.5)).astype(np.float32)
    x.tofile(tmp_path / "x.bin")
    r = subprocess.run([CHECK, "norm", tmp_path / "x.bin"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    from ditskip_edge.runtime.codecs import relative_error
    assert json.loads(r.stdout) == [relative_error(np.zeros_like(x), x), relative_error(x, np.zeros_like(x))]


def test_the_journal_writer_rolls_shards_and_resumes_as_cache_py(tmp_path):
    """Small shards (3 entries each) and a stop after 4 entries, then a resume: journal, shards and index equal
    cache.py's CacheWriter fed the same entries."""
    from ditskip_edge.runtime.cache import CacheWriter
    from ditskip_edge.runtime.cache_format import CacheCodec, entry_layout
    from ditskip_edge.runtime.codecs import encode_entry
    spec = "int8-channel,back.img=fp16"
    shapes = {"x0": [1, 2, 4, 4], "front.img": [1, 8, 16], "back.img": [1, 8, 16]}
    values = np.random.RandomState(1).randn(sum(int(np.prod(s)) for s in shapes.values())).astype(np.float32)
    values.tofile(tmp_path / "in.bin")
    entry = entry_layout(CacheCodec.parse(spec), {k: tuple(v) for k, v in shapes.items()})[1]
    shard = 3 * entry
    py_dir, nat_dir = tmp_path / "py", tmp_path / "nat"

    def tensors(k):
        out, at = {}, 0
        for name, s in shapes.items():
            n = int(np.prod(s))
            out[name] = (values[at:at + n] + np.float32(k)).reshape(s)
            at += n
        return out
    for stop in (4, None):
        w = CacheWriter(py_dir, {"t": 1}, spec, shard_bytes=shard, resumable=True, run="r")
        w.set_shapes(shapes)
        added = 0
        for k in range(w.next_index, 8):
            w.add(k, encode_entry(CacheCodec.parse(spec), tensors(k)), {"k": k})
            added += 1
            if stop and added >= stop:
                w.close()
                break
        else:
            w.finish({"note": "done"})
        args = [CHECK, "cache", nat_dir, spec, json.dumps(shapes), tmp_path / "in.bin", "8", str(stop or 0),
                str(shard)]
        r = subprocess.run(args, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert sorted(p.name for p in nat_dir.iterdir()) == sorted(p.name for p in py_dir.iterdir())
        for p in py_dir.iterdir():
            assert (nat_dir / p.name).read_bytes() == p.read_bytes(), p.name


@pytest.mark.parametrize("hw,box,out", [((240, 320), (10, 20, 160), 64), ((100, 120), (17, 9, 32), 32),
                                        ((77, 91), (5, 7, 64), 32), ((64, 80), (3, 5, 48), 128)])
def test_the_crop_is_numpys_bit_for_bit(hw, box, out, tmp_path):
    from ditskip_edge.runtime.patches import crop_patch
    img = np.random.RandomState(sum(hw)).uniform(-1, 1, (3, *hw)).astype(np.float32)
    img.tofile(tmp_path / "img.bin")
    r = subprocess.run([CHECK, "crop", tmp_path / "img.bin", *map(str, (*hw, *box, out)), tmp_path / "out.bin"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.bin").read_bytes() == crop_patch(img, box, out).tobytes()


@pytest.mark.parametrize("hw,tile,stride,scale", [((64, 64), 32, 24, 8), ((96, 80), 48, 32, 8), ((64, 64), 64, 64, 8),
                                                   ((40, 56), 16, 8, 4)])
def test_the_tiled_encode_blends_as_tiling_py(hw, tile, stride, scale, tmp_path):
    """runtime/tiling.py encode_tiled (by shape, diffusers' blend) with a stand-in encoder, bit for bit."""
    from ditskip_edge.runtime.tiling import encode_tiled
    x = np.random.RandomState(tile).randn(1, 3, *hw).astype(np.float32)
    x.tofile(tmp_path / "x.bin")
    r = subprocess.run([CHECK, "tiled", tmp_path / "x.bin", "3", *map(str, (*hw, tile, stride, scale)),
                        tmp_path / "out.bin"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    want = encode_tiled(x, lambda t: t[:, :, ::scale, ::scale] * np.float32(0.5), tile, stride, scale)
    assert (tmp_path / "out.bin").read_bytes() == np.ascontiguousarray(want, np.float32).tobytes()


def test_the_schedule_is_pythons_for_other_configs(tmp_path):
    from ditskip_edge.runtime.schedule import ScheduleConfig, make_schedule
    sizes = [[200, 300], [256, 256], [90, 350], [512, 400], [130, 131]]
    for cfg in ({"steps": 7, "grad_accum": 3, "s_min_px": 64, "s_max_px": 512, "multiple_px": 16, "seed": 5,
                 "t_sampling": "logit_normal"},
                {"steps": 4, "s_min_px": 32, "s_max_px": 96, "multiple_px": 8, "seed": 2 ** 62, "dynamic_patches": False}):
        r = subprocess.run([CHECK, "schedule", json.dumps(cfg), json.dumps(sizes)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        want = make_schedule(ScheduleConfig(**cfg), [tuple(s) for s in sizes], [f"p{i}" for i in range(len(sizes))])
        assert r.stdout.rstrip("\n") == json.dumps(want.to_json())


# ---------------------------------------------------------------- arm64 under qemu

def _unpacked(part: str, v: np.ndarray, codec) -> np.ndarray:
    """Stored codes as integers (int4: both nibbles)."""
    if v.dtype == np.uint8 and codec.for_name(part.rsplit(".", 1)[0]).kind == "int4":
        return np.stack([v % 16, v // 16], -1).astype(np.int32)
    return v.astype(np.int32)


def test_arm64_runs_the_stage_within_bounds_of_x86_and_refuses_alike(arm64_runner, runner, model, photos,
                                                                      native_bundle, tmp_path):
    from ditskip_edge.runtime.bundle import Bundle
    from ditskip_edge.runtime.codecs import decode_entry
    out = tmp_path / "subject"
    r = _native(arm64_runner, model, photos, out, "--no-train", "--json", timeout=600)
    assert r.returncode == 0, r.stderr
    assert (out / "subject/schedule.json").read_bytes() == (native_bundle[0] / "subject/schedule.json").read_bytes()
    a, b = Bundle.open(out).cache(), Bundle.open(native_bundle[0]).cache()
    assert len(a) == len(b) == STEPS * ACCUM
    for k in range(len(b)):
        ea, eb = a.read_encoded(k), b.read_encoded(k)
        x0 = np.linalg.norm((ea["x0"] - eb["x0"]).ravel()) / np.linalg.norm(eb["x0"].ravel())
        assert x0 <= 1e-5, (k, x0)
        for part in eb:
            if part.endswith(".codes"):          # int8 / int4 codes within one step
                assert np.abs(_unpacked(part, ea[part], b.codec) - _unpacked(part, eb[part], b.codec)).max() <= 1
        da, db = decode_entry(a.codec, ea, a.shapes), decode_entry(b.codec, eb, b.shapes)
        for name in db:                          # measured <= 6.6e-6 (fp16 front.txt); a code one step apart moves
            rel = np.linalg.norm((da[name] - db[name]).ravel()) / np.linalg.norm(db[name].ravel())   # one element
            assert rel <= 1e-3, (k, name, rel)
    args = ("--no-train", "--prompt", "no such prompt")
    bad = _native(arm64_runner, model, photos, tmp_path / "a" / "subject", *args)
    ref = _native(runner, model, photos, tmp_path / "a" / "subject", *args)
    assert bad.returncode == ref.returncode == 2 and bad.stderr == ref.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
