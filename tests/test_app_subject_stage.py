"""The Android app's subject stage (android_demo/.../CacheCodecs.kt, CacheWriter.kt, SubjectStage.kt, ModelBundle.kt,
SubjectBundle.kt, PhotoNormalise.kt), run on a plain JVM
by android_demo/hostcheck/subject/SubjectCheck.kt, against the Python device runtime.

Properties protected:
- for every codec kind the app encodes (fp32, fp16, int8 / int4 per token, channel, group; overrides), the Kotlin
  writer's residual cache is the Python runtime's (runtime/codecs.py encode_entry + runtime/cache.py CacheWriter):
  shards byte for byte (values on rounding ties, zeros, values past fp16's range and in its subnormals included),
  the index the same bytes but for the recorded coding errors (float32 norms in Python, float64 in Kotlin: to 1e-5);
- an interrupted Kotlin write (stopped after k entries, then a torn shard tail and a torn journal line, as a kill
  leaves them) resumes to the same cache without computing a journalled entry again; the journals of the two runtimes
  are interchangeable (each resumes the other's);
- the per-sample loop (crop -> encode -> noise -> embed -> blocks one at a time -> residuals -> codec -> cache) with
  stand-in programs on both sides gives subject.py write_cache's cache, with and without a back span;
- ModelBundle.kt on a model bundle folder (manifest digest, its schedule, plan, codec, entry shapes, prompt
  conditioning; run identity of subject.py run_identity) writes that same cache, and resumes it;
- lowrank is refused by name, and a journal of other inputs is refused;
- SubjectBundle.kt writes subject.py's subject bundle around that cache: Bundle.open(verify=True) takes it, every file
  but the photo PNGs (another encoder: same pixels) byte for byte, the manifest Python's but for those PNGs, the
  timings and the coding errors; an interrupted or failed assembly leaves nothing at the destination;
- PhotoNormalise.kt is photos.py normalise (Pillow's LANCZOS) bit for bit;
- Tiling.kt encodeTiled is runtime/tiling.py encode_tiled (tiles of one shape in a row, in tile_shapes' order, then
  blended row-major), and decodeTiled, now on the same runTiled, is still decode_tiled; a tiled model bundle
  (encode_tiling, encode.<h>x<w> programs) gives subject.py's cache through the Kotlin stage, each tile program loaded
  once per sample and released before the next shape; a tiled bundle missing a listed tile program is refused with
  one line naming it;
- a staged encoder (encode_tiling.stages, compile --encode-stages): Tiling.kt encodeTiledShapes is tiling.py
  encode_tiled(encode_shape=...) (one call per tile shape, its tiles row-major); a staged model bundle, tiled or not,
  gives subject.py's cache through the Kotlin stage, per sample, per tile shape, per stage one stage program loaded,
  run on every tile of the shape and released before the next loads; a missing stage program (at most 4 named) and
  stages that do not chain are refused in one line with the Python runtime's message; a staged cache-free bundle's
  entries are Python's, and its missing stage program refused likewise;
- x0-only and cache-free bundles (written by the Python runtime): TrainingBundle.kt + CacheFreeEntries.kt give, for
  every sample, subject.py CacheFreeEntries' encoded entry byte for byte (x0 from the x0 cache or the photo PNG through
  the encode program, tiled too; int8-channel + fp16, and fp32); missing forward programs and a lowrank codec are
  refused with one line;
- the Swift mirrors (uncompiled) follow the Kotlin port on the lines that carry the arithmetic and the format.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
KT_DIR = ROOT / "android_demo/app/src/main/java/org/ditskip/demo"
HOSTCHECK = ROOT / "android_demo/hostcheck"
STUBS = ["AndroidDebugStub.kt", "ExecutorchStubs.kt", "JsonStubs.kt", "TrainingModuleStubs.kt"]
APP = ["PortableRng.kt", "BundleContract.kt", "Schedule.kt", "Patches.kt", "PyJson.kt", "CacheCodecs.kt",
       "CacheWriter.kt", "SubjectStage.kt", "ModelBundle.kt", "Safetensors.kt", "SubjectBundle.kt", "PhotoNormalise.kt",
       "ResidualCache.kt", "TrainingBundle.kt", "Tiling.kt", "CacheFreeEntries.kt"]
RUN = "f" * 64
F32 = np.float32

pytestmark = pytest.mark.skipif(shutil.which("kotlinc") is None, reason="no kotlinc on this machine")


@pytest.fixture(scope="module")
def jar(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("kt") / "subject.jar"
    srcs = [HOSTCHECK / n for n in STUBS] + [KT_DIR / n for n in APP] + [HOSTCHECK / "subject/SubjectCheck.kt"]
    r = subprocess.run(["kotlinc", "-nowarn", *map(str, srcs), "-include-runtime", "-d", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def kotlin(jar: Path, *args, ok: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["java", "-cp", str(jar), "SubjectCheckKt", *map(str, args)], capture_output=True, text=True)
    if ok:
        assert r.returncode == 0, r.stderr[-3000:]
    return r


# ------------------------------------------------------------------------------------------------ residuals

SHAPES = {"x0": [1, 4, 4, 4], "front.img": [1, 16, 8], "front.txt": [1, 3, 8], "back.img": [1, 16, 8]}
IDENTITY = {"model": "stand-in", "transformer_config": {"eps": 1e-06, "dim": 8, "theta": 10000.0, "scale": 0.1,
                                                        "big": 1e16, "names": ["caf\u00e9", "a\"b\\c\n"], "ok": True,
                                                        "none": None, "empty": {}, "list": []},
            "plan": [5, 2, 2], "schedule": {"t": [0.30000000000000004, 2.5e-05, 0.0001, 123456789012345.67]}}


def residuals(k: int) -> dict[str, np.ndarray]:
    """Entry k: random values around special rows (ties for int8 / int4 at scale 1, zeros, values below the minimum
    scale, fp16 overflow, ties and subnormals)."""
    r = np.random.default_rng(100 + k)
    x0 = r.normal(size=SHAPES["x0"]).astype(F32)
    img = (r.normal(size=SHAPES["front.img"]) * 2).astype(F32)
    img[0, 0] = [127, 2.5, -3.5, 0.5, -126.5, 1.5, 0, -0.5]              # int8 per token: scale 1, exact ties
    img[0, 1] = [7, 2.5, -3.5, 0.5, -7, 6.5, -0.5, 1.5]                  # int4: every group of 4 has +-7
    img[0, 2] = 0.0
    img[0, 5] = F32(1e-13) * np.arange(8, dtype=F32)                     # absmax / qmax below MIN_SCALE
    txt = r.normal(size=SHAPES["front.txt"]).astype(F32)
    txt[0, 0] = [1e5, -7e4, 65519.0, 65520.0, 65504.5, -65505.0, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11]
    txt[0, 1] = [2.0 ** -25, 3 * 2.0 ** -25, 1e-8, 6e-8, -(2.0 ** -25), 1.5 * 2.0 ** -24, 0.0, -0.0]
    back = (r.integers(-7, 7, size=SHAPES["back.img"]) + 0.5).astype(F32)
    back[0, 0] = 127.0                                                   # int8 per channel: scale 1, ties
    back[0, 4] = back[0, 8] = back[0, 12] = 7.0                          # int4 per 4 tokens: +-7 in groups 2..4
    return {"x0": x0, "front.img": img, "front.txt": txt, "back.img": back}


def python_cache(directory: Path, codec: str, n: int, shard_bytes: int, stop_after: int | None = None) -> None:
    """What subject.py write_cache does with given residuals (resumable writer, coding errors as extras)."""
    from ditskip_edge.runtime.cache import CacheWriter
    from ditskip_edge.runtime.cache_format import CacheCodec
    from ditskip_edge.runtime.codecs import decode_entry, encode_entry, relative_error
    c = CacheCodec.parse(codec)
    w = CacheWriter(directory, IDENTITY, c, shard_bytes=shard_bytes, resumable=True, run=RUN)
    w.set_shapes({k: tuple(v) for k, v in SHAPES.items()})
    new = 0
    for k in range(w.next_index, n):
        t = residuals(k)
        res = {name: v for name, v in t.items() if name != "x0"}
        parts = encode_entry(c, t)
        dec = decode_entry(c, parts, {name: v.shape for name, v in res.items()})
        w.add(k, parts, {"rel_error": {name: relative_error(dec[name], res[name]) for name in res}})
        new += 1
        if stop_after is not None and new >= stop_after:
            w.close()
            return
    errors: dict[str, list[float]] = {}
    for extra in w.extras:
        for name, v in extra["rel_error"].items():
            errors.setdefault(name, []).append(v)
    w.finish({"rel_error": {name: {"mean": sum(v) / len(v), "max": max(v)} for name, v in errors.items()}})


def kotlin_spec(tmp: Path, codec: str, n: int, shard_bytes: int) -> Path:
    files = []
    for k in range(n):
        f = tmp / f"entry_{k}.f32"
        f.write_bytes(b"".join(v.astype("<f4").tobytes() for v in residuals(k).values()))
        files.append(str(f))
    spec = tmp / "spec.json"
    spec.write_text(json.dumps({"codec": codec, "shapes": SHAPES, "identity": IDENTITY, "shard_bytes": shard_bytes,
                                "run": RUN, "entries": files}))
    return spec


def assert_same_cache(py: Path, kt: Path) -> None:
    """Shards byte for byte; the index byte for byte once Python's coding errors replace Kotlin's (which agree to
    1e-5); no journal or temporary file left."""
    assert sorted(p.name for p in py.iterdir()) == sorted(p.name for p in kt.iterdir())
    for p in py.glob("shard_*"):
        assert p.read_bytes() == (kt / p.name).read_bytes(), p.name
    ptext, ktext = (py / "cache_index.json").read_text(), (kt / "cache_index.json").read_text()
    pidx, kidx = json.loads(ptext), json.loads(ktext)
    assert ktext == json.dumps(kidx, indent=1)                            # Python's own formatting
    for name, err in pidx["rel_error"].items():
        for stat in ("mean", "max"):
            assert kidx["rel_error"][name][stat] == pytest.approx(err[stat], rel=1e-5, abs=1e-12), (name, stat)
    kidx["rel_error"] = pidx["rel_error"]
    assert json.dumps(kidx, indent=1) == ptext


def entry_bytes(codec: str) -> int:
    from ditskip_edge.runtime.cache_format import CacheCodec, entry_layout
    return entry_layout(CacheCodec.parse(codec), {k: tuple(v) for k, v in SHAPES.items()})[1]


CODECS = ["fp32", "fp16", "int8-token", "int8-channel", "int8-g4", "int8-t4", "int4-g4", "int4-t4", "int4-g6",
          "int8-channel,front.txt=fp16,back.img=int4-g4"]


@pytest.mark.parametrize("codec", CODECS)
def test_kotlin_cache_writer_is_python_s_byte_for_byte(jar, tmp_path, codec):
    n, shard = 5, 2 * entry_bytes(codec) + 1                             # 2 entries a shard: 3 shards
    python_cache(tmp_path / "py", codec, n, shard)
    out = kotlin(jar, "cache", kotlin_spec(tmp_path, codec, n, shard), tmp_path / "kt").stdout.split()
    assert out == ["resumed", "0", "computed", str(n)]
    assert_same_cache(tmp_path / "py", tmp_path / "kt")
    from ditskip_edge.runtime.cache import CacheReader
    reader = CacheReader(tmp_path / "kt", IDENTITY, expected_entries=n)  # the runtime's reader takes it
    reader.verify()
    assert len(reader) == n


def _tear(directory: Path, newline_only: bool = False) -> None:
    """What a kill mid-entry leaves: bytes of an unjournalled entry on the open shard, half a journal line (or, killed
    between a line and its newline, a complete last line without it)."""
    journal = directory / "cache_journal.jsonl"
    if newline_only:
        journal.write_text(journal.read_text().removesuffix("\n"))
        return
    for tmp in directory.glob("shard_*.tmp"):
        with open(tmp, "ab") as f:
            f.write(b"\x07" * 100)
    with open(journal, "a") as f:
        f.write('{"entry":{"shard":"shard_0')


@pytest.mark.parametrize("stop", [1, 2, 3])
def test_an_interrupted_kotlin_cache_resumes_to_the_same_cache(jar, tmp_path, stop):
    codec, n = "int8-channel,front.txt=fp16", 5
    shard = 2 * entry_bytes(codec) + 1
    python_cache(tmp_path / "py", codec, n, shard)
    spec = kotlin_spec(tmp_path, codec, n, shard)
    # Kotlin stopped after `stop` entries: its journal is Python's for the same entries (coding errors to 1e-5)
    assert kotlin(jar, "cache", spec, tmp_path / "kt", stop).stdout.split() == ["resumed", "0", "computed", str(stop)]
    python_cache(tmp_path / "py_part", codec, n, shard, stop_after=stop)
    kl = (tmp_path / "kt/cache_journal.jsonl").read_text().splitlines()
    pl = (tmp_path / "py_part/cache_journal.jsonl").read_text().splitlines()
    assert len(kl) == len(pl)
    for a, b in zip(kl, pl):
        ka, pb = json.loads(a), json.loads(b)
        assert a == json.dumps(ka, separators=(",", ":"))
        if "extra" in ka:
            for name, v in pb["extra"]["rel_error"].items():
                assert ka["extra"]["rel_error"][name] == pytest.approx(v, rel=1e-5, abs=1e-12)
            ka["extra"] = pb["extra"]
        assert json.dumps(ka, separators=(",", ":")) == b
    shutil.copytree(tmp_path / "kt", tmp_path / "kt_for_py")
    shutil.copytree(tmp_path / "py_part", tmp_path / "py_for_kt")
    # killed mid-entry, then resumed: the same cache, the journalled entries not computed again
    _tear(tmp_path / "kt", newline_only=stop == 3)
    out = kotlin(jar, "cache", spec, tmp_path / "kt").stdout.split()
    assert out == ["resumed", str(stop), "computed", str(n - stop)]
    assert_same_cache(tmp_path / "py", tmp_path / "kt")
    # the journals are interchangeable: Python resumes Kotlin's, Kotlin resumes Python's
    python_cache(tmp_path / "kt_for_py", codec, n, shard)
    assert_same_cache(tmp_path / "py", tmp_path / "kt_for_py")
    _tear(tmp_path / "py_for_kt")
    assert kotlin(jar, "cache", spec, tmp_path / "py_for_kt").stdout.split()[1] == str(stop)
    assert_same_cache(tmp_path / "py", tmp_path / "py_for_kt")


def test_lowrank_and_a_journal_of_other_inputs_are_refused(jar, tmp_path):
    r = kotlin(jar, "cache", kotlin_spec(tmp_path, "int8-channel,front.txt=lowrank-r4", 2, 1 << 20), tmp_path / "lr",
               ok=False)
    assert r.returncode != 0 and "lowrank-r4" in r.stderr and "front.txt" in r.stderr
    spec = kotlin_spec(tmp_path, "fp16", 3, 1 << 20)
    kotlin(jar, "cache", spec, tmp_path / "other", 1)
    d = json.loads(spec.read_text())
    d["run"] = "0" * 64
    spec.write_text(json.dumps(d))
    r = kotlin(jar, "cache", spec, tmp_path / "other", ok=False)
    assert r.returncode != 0 and "interrupted residual cache for other inputs" in r.stderr


# ------------------------------------------------------------------------------------------------ the per-sample loop

C = 4          # SubjectCheck.kt StandIn


def standin_encode(inp):
    p = inp["patch"]
    return {"x0": np.stack([p[0, c % 3, ::2, ::2] * F32(0.5 * (c + 1)) for c in range(C)])[None].astype(F32)}


def standin_embed(inp):
    x0, noise, t = inp["x0"], inp["noise"], inp["t"]
    xt = x0 * (F32(1) - t) + noise * t
    return {"stream.img": np.ascontiguousarray(xt.reshape(1, C, -1).transpose(0, 2, 1)),
            "stream.txt": inp["cond.txt"] * F32(2), "ctx.temb": (t * np.arange(1, C + 1, dtype=F32)).reshape(1, C)}


def standin_block(i):
    a = F32(0.75 + 0.0625 * i)

    def run(inp):
        img, txt, temb = inp["stream.img"], inp["stream.txt"], inp["ctx.temb"]
        return {"stream.img": img * a + temb[:, None, :] + txt[:, :1, :], "stream.txt": txt * a - temb[:, None, :] * F32(0.5)}
    return run


def standin_tile_encode(inp):
    """A tiled encode's stand-in tile program (SubjectCheck.kt StandIn encode.<h>x<w>): standin_encode + the tile's
    top-left pixel / 4 + a ramp over the tile's own rows (depends on the tile's position and size)."""
    p = inp["patch"]
    h = p.shape[2] // 2
    ramp = (np.arange(h, dtype=F32) / F32(h))[:, None]
    return {"x0": np.stack([p[0, c % 3, ::2, ::2] * F32(0.5 * (c + 1)) + p[0, c % 3, 0, 0] * F32(0.25)
                            + F32(0.0625) * ramp for c in range(C)])[None].astype(F32)}


def standin_stage(k: int, stages: int):
    """A staged encoder's stand-in stage program k of `stages` (SubjectCheck.kt StandIn stageRun): stage 0 patch
    [1, 3, th, tw] -> features [1, 12, th / 2, tw / 2] (space to depth, * 0.5, + the tile's top-left pixel / 4), a
    middle stage a channel mix, the last features -> x0 [1, C, th / 2, tw / 2] (a channel mix + a ramp over the rows)."""
    def run(inp):
        if k == 0:
            p = inp["patch"][0]
            _, th, tw = p.shape
            s2d = p.reshape(3, th // 2, 2, tw // 2, 2).transpose(0, 2, 4, 1, 3).reshape(12, th // 2, tw // 2)
            return {"features": (s2d * F32(0.5) + np.repeat(p[:, 0, 0], 4)[:, None, None] * F32(0.25))[None]}
        x = inp["features"][0]
        if k < stages - 1:
            return {"features": (x * F32(0.75 + 0.125 * k) + np.roll(x, -1, axis=0) * F32(0.25))[None]}
        h = x.shape[1]
        ramp = (np.arange(h, dtype=F32) / F32(h))[:, None]
        return {"x0": (x[:C] * F32(0.5) + x[C:2 * C] * F32(0.25) - x[2 * C:3 * C] * F32(0.125)
                       + F32(0.0625) * ramp)[None].astype(F32)}
    return run


def stage_io(k: int, stages: int) -> dict:
    """The input and output names of stage k of a staged encoder (runtime/contract.py encode_stage_names)."""
    return {"inputs": [{"name": "patch" if k == 0 else "features"}],
            "outputs": [{"name": "x0" if k == stages - 1 else "features"}]}


def standin_forward(spans, s_min_px: int, tiling: dict | None = None):
    """forward.py's ForwardPrograms running the stand-in programs (tiling: a manifest's encode_tiling record, its
    programs the stand-in tile program; with "stages" > 1 each tile shape's (or the whole crop's) chain of stand-in
    stage programs, run by forward.py encode_shape stage by stage)."""
    from ditskip_edge.runtime.forward import ForwardPrograms
    fwd = ForwardPrograms.__new__(ForwardPrograms)
    fwd.num_blocks, fwd.n_front, fwd.n_back = spans
    fwd.s_min_px, fwd.keep_blocks = s_min_px, True
    key = f"{s_min_px}x{s_min_px}"
    fwd.encode_tiling = tiling or {"tile_px": s_min_px, "stride_px": s_min_px, "scale": None, "tiled": False,
                                   "programs": {key: "encode"}}
    stages = int(fwd.encode_tiling.get("stages", 1))
    keys = list(fwd.encode_tiling["programs"])
    if stages > 1:
        fwd.encode_entries = {k: [stage_io(s, stages) for s in range(stages)] for k in keys}
        fwd._encode = {(k, s): standin_stage(s, stages) for k in keys for s in range(stages)}
    else:
        fwd.encode_entries = {k: [stage_io(0, 1)] for k in keys}
        fwd._encode = {(k, 0): standin_tile_encode if fwd.encode_tiling["tiled"] else standin_encode for k in keys}
    fwd._embed = standin_embed
    fwd._blocks = {i: standin_block(i) for i in range(spans[0])}
    return fwd


def python_stage(monkeypatch, out: Path, spans, codec, shapes, sched_cfg, photos, names, cond, model, shard,
                 stop_after=None, run=RUN, tiling=None):
    """runtime/subject.py write_cache itself, with forward.py's ForwardPrograms running the stand-in programs."""
    from ditskip_edge.runtime import subject
    from ditskip_edge.runtime.cache import CacheWriter
    from ditskip_edge.runtime.schedule import ScheduleConfig, make_schedule
    fwd = standin_forward(spans, sched_cfg["s_min_px"], tiling)
    schedule = make_schedule(ScheduleConfig(**sched_cfg), [p.shape[1:] for p in photos], names)
    plan = {"num_blocks": spans[0], "n_front": spans[1], "n_back": spans[2]}
    fake_model = SimpleNamespace(codec_spec=codec, entry_shapes={k: tuple(v) for k, v in shapes.items()},
                                 field=lambda key: {"model": model, "plan": plan}[key],
                                 prompts=lambda: ["p"], prompt_conditioning=lambda i: {"txt": cond})
    w = SimpleNamespace(path=lambda rel: out / rel)
    cfg = subject.SubjectConfig(progress=False, stop_after=stop_after)
    monkeypatch.setattr(subject, "CacheWriter", functools.partial(CacheWriter, shard_bytes=shard))
    subject.write_cache(w, fake_model, [SimpleNamespace(pixels=p) for p in photos], schedule, fwd, run, cfg,
                        {"prompt": "p"})


@pytest.mark.parametrize("spans", [(5, 2, 2), (3, 2, 0)])
def test_the_kotlin_subject_stage_loop_writes_subject_py_s_cache(jar, tmp_path, monkeypatch, spans):
    from ditskip_edge.runtime.bundle import CACHE_DIR
    sched = {"steps": 3, "grad_accum": 2, "s_min_px": 8, "s_max_px": 16, "multiple_px": 4, "seed": 7,
             "t_sampling": "uniform", "dynamic_patches": True}
    r = np.random.default_rng(5)
    photos = [r.uniform(-1, 1, size=(3, h, w)).astype(F32) for h, w in ((20, 18), (16, 24))]
    names = ["a.png", "b.png"]
    cond = r.normal(size=(1, 3, C)).astype(F32)
    shapes = {"x0": [1, C, 4, 4], "front.img": [1, 16, C], "front.txt": [1, 3, C]}
    if spans[2]:
        shapes["back.img"] = [1, 16, C]
    codec = "int8-channel,front.txt=fp16"
    model = {"name": "stand-in", "transformer_config": {"eps": 1e-06, "dim": C}}
    shard = 3 * entry_bytes_for(codec, shapes)
    python_stage(monkeypatch, tmp_path / "py", spans, codec, shapes, sched, photos, names, cond, model, shard)
    files = []
    for i, p in enumerate(photos):
        (tmp_path / f"photo{i}.f32").write_bytes(p.astype("<f4").tobytes())
        files.append([p.shape[1], p.shape[2], str(tmp_path / f"photo{i}.f32")])
    (tmp_path / "cond.f32").write_bytes(cond.astype("<f4").tobytes())
    spec = tmp_path / "stage.json"
    spec.write_text(json.dumps({"schedule": sched, "photos": files, "photo_names": names, "spans": list(spans),
                                "model": model, "codec": codec, "shapes": shapes,
                                "cond": {"cond.txt": [list(cond.shape), str(tmp_path / "cond.f32")]},
                                "shard_bytes": shard, "run": RUN}))
    assert kotlin(jar, "stage", spec, tmp_path / "kt", 4).stdout.split() == ["resumed", "0", "computed", "4"]
    _tear(tmp_path / "kt")
    assert kotlin(jar, "stage", spec, tmp_path / "kt").stdout.split() == ["resumed", "4", "computed", "2"]
    assert_same_cache(tmp_path / "py" / CACHE_DIR, tmp_path / "kt")


def entry_bytes_for(codec: str, shapes: dict) -> int:
    from ditskip_edge.runtime.cache_format import CacheCodec, entry_layout
    return entry_layout(CacheCodec.parse(codec), {k: tuple(v) for k, v in shapes.items()})[1]


def model_stage_input(tmp: Path, root: Path, seed: int, sizes=((24, 28), (26, 24)), events: Path | None = None):
    """SubjectCheck.kt model's input for the model bundle at `root`: stand-in photos of these (h, w) sizes (uniform
    in [-1, 1], as raw little-endian f32 files), their names and SHA-256 stand-ins, and where the stand-in programs'
    load / release events go. Returns (spec path, photos, names, shas)."""
    r = np.random.default_rng(seed)
    photos = [r.uniform(-1, 1, size=(3, h, w)).astype(F32) for h, w in sizes]
    names = [f"photo{i}.jpg" for i in range(len(photos))]
    shas = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(len(photos))]
    listed = []
    for i, p in enumerate(photos):
        (tmp / f"p{i}.f32").write_bytes(p.astype("<f4").tobytes())
        listed.append([names[i], shas[i], p.shape[1], p.shape[2], str(tmp / f"p{i}.f32")])
    spec = tmp / "model.json"
    spec.write_text(json.dumps({"bundle": str(root), "photos": listed, **({"events": str(events)} if events else {})}))
    return spec, photos, names, shas


def stage_run(digest: str, names: list[str], shas: list[str]) -> dict:
    """subject.py run_identity of a model bundle (its manifest digest) with these photos, prompt "p", stored mode."""
    from ditskip_edge.runtime.subject import run_identity
    return run_identity(SimpleNamespace(manifest_sha256=digest),
                        [SimpleNamespace(name=n, sha256=h) for n, h in zip(names, shas)], "p", "stored")


def test_the_kotlin_model_bundle_reader_runs_the_stage_of_subject_py(jar, tmp_path, monkeypatch):
    """ModelBundle.writeCache on a model bundle folder (stand-in programs) = subject.py write_cache with that bundle's
    fields and run identity: the manifest's schedule, plan, codec, entry shapes, prompt conditioning and digest."""
    from safetensors.numpy import save_file

    from ditskip_edge.runtime.bundle import CACHE_DIR, _read_manifest
    root = tmp_path / "model"
    root.mkdir()
    r = np.random.default_rng(9)
    cond = r.normal(size=(1, 3, C)).astype(F32)
    save_file({"txt": cond}, str(root / "prompt0.safetensors"))
    sched = {"steps": 2, "grad_accum": 2, "s_min_px": 8, "s_max_px": 16, "multiple_px": 4, "seed": 11,
             "t_sampling": "uniform", "dynamic_patches": True}
    shapes = {"x0": [1, C, 4, 4], "front.img": [1, 16, C], "front.txt": [1, 3, C], "back.img": [1, 16, C]}
    model = {"name": "stand-in", "transformer_config": {"eps": 1e-06, "dim": C, "theta": 10000.0}}
    codec = "int4-g4,front.txt=fp16"
    fields = {"format": "ditskip-edge-bundle", "format_version": 3, "bundle_kind": "model", "model": model,
              "plan": {"num_blocks": 4, "n_front": 1, "n_back": 2}, "schedule": sched,
              "model_bundle": {"prompts": [{"prompt": "p", "text_conditioning": "prompt0.safetensors"}],
                               "cache_codec": codec, "entry_shapes": shapes, "min_photos": 2, "num_samples": 4},
              "programs": standin_programs(shapes, codec, 4)}
    digest = write_manifest(root, fields)
    assert _read_manifest(root, verify=False)[1] == digest
    spec, photos, names, shas = model_stage_input(tmp_path, root, 10, sizes=((16, 20), (18, 16)))
    python_stage(monkeypatch, tmp_path / "py", (4, 1, 2), codec, shapes, sched, photos, names, cond, model, 64 << 20,
                 run=stage_run(digest, names, shas))
    assert kotlin(jar, "model", spec, tmp_path / "kt", 1).stdout.split() == ["resumed", "0", "computed", "1"]
    assert kotlin(jar, "model", spec, tmp_path / "kt").stdout.split() == ["resumed", "1", "computed", "3"]
    assert_same_cache(tmp_path / "py" / CACHE_DIR, tmp_path / "kt" / CACHE_DIR)
    # programs of another model are refused before any work (subject.py check_programs)
    fields["programs"][3]["inputs"][0]["shape"] = [1, 16, C + 2]              # block 1 takes another stream width
    write_manifest(root, fields)
    r = kotlin(jar, "model", spec, tmp_path / "kt2", ok=False)
    assert r.returncode != 0 and "another model's" in r.stderr and not (tmp_path / "kt2").exists()


def write_manifest(root: Path, fields: dict) -> str:
    """A manifest with its own digest on the first line (runtime/bundle.py's form); returns the digest."""
    rest = json.dumps(fields, indent=1)[2:]
    digest = hashlib.sha256(rest.encode()).hexdigest()
    (root / "manifest.json").write_text('{"manifest_sha256": "' + digest + '",\n' + rest)
    return digest


def standin_programs(shapes: dict, codec: str, num_blocks: int) -> list[dict]:
    """Manifest program entries with the stand-in programs' inputs and outputs (what check_programs reads)."""
    from ditskip_edge.runtime.cache_format import CacheCodec, entry_layout
    from ditskip_edge.runtime.contract import step_input_names

    def io(**kv):
        return [{"name": k, "shape": v, "dtype": "float32"} for k, v in kv.items()]
    n, s_min = shapes["front.img"][1], 2 * shapes["x0"][2]
    streams = {"stream.img": [1, n, C], "stream.txt": shapes["front.txt"], "ctx.temb": [1, C]}
    progs = [{"name": "encode", "runtime": "executorch", "path": "encode.pte", "data": [], "block": None,
              "inputs": io(patch=[1, 3, s_min, s_min]), "outputs": io(x0=shapes["x0"])},
             {"name": "embed", "runtime": "executorch", "path": "embed.pte", "data": [], "block": None,
              "inputs": io(x0=shapes["x0"], noise=shapes["x0"], t=[1], **{"cond.txt": [1, 3, C]}),
              "outputs": io(**streams)}]
    progs += [{"name": "block", "runtime": "executorch", "path": f"block_{i}.pte", "data": [], "block": i,
               "inputs": io(**streams), "outputs": io(**{k: v for k, v in streams.items() if k.startswith("stream.")})}
              for i in range(num_blocks)]
    layout, _ = entry_layout(CacheCodec.parse(codec), {k: tuple(v) for k, v in shapes.items()})
    progs.append({"name": "train_step", "runtime": "executorch", "path": "train.pte", "data": [], "block": None,
                  "inputs": [{"name": k, "shape": [], "dtype": "float32"} for k in step_input_names(["txt"], layout)],
                  "outputs": []})
    return progs


def encode_programs(tiles, stages: int, name=lambda th, tw: f"encode.{th}x{tw}") -> list[dict]:
    """Manifest entries of the stand-in encode programs of pixel tile shapes `tiles`: one per shape, or with
    stages > 1 each shape's chain "<name>.s0" .. (stage 0 takes the patch and gives 12-channel features at half the
    size, a middle stage features -> features, the last features -> x0; forward.py subject_programs' names)."""
    def io(name, shape):
        return [{"name": name, "shape": shape, "dtype": "float32"}]
    out = []
    for th, tw in tiles:
        n = name(th, tw)
        x0, feat = [1, C, th // 2, tw // 2], [1, 12, th // 2, tw // 2]
        if stages <= 1:
            out.append({"name": n, "runtime": "executorch", "path": f"{n.replace('.', '_')}.pte", "data": [],
                        "block": None, "inputs": io("patch", [1, 3, th, tw]), "outputs": io("x0", x0)})
            continue
        for k in range(stages):
            out.append({"name": f"{n}.s{k}", "runtime": "executorch", "path": f"{n.replace('.', '_')}_s{k}.pte",
                        "data": [], "block": None,
                        "inputs": io("patch", [1, 3, th, tw]) if k == 0 else io("features", feat),
                        "outputs": io("x0", x0) if k == stages - 1 else io("features", feat)})
    return out


# ------------------------------------------------------------------------------------------------ the subject bundle

def verified_model_bundle(root: Path, codec: str = "int8-channel,front.txt=fp16", typed_step: bool = False,
                          tiling: dict | None = None, drop: str | None = None) -> Path:
    """A model bundle Bundle.open(verify=True) accepts: stand-in programs (check_programs' shapes), a prompt's text
    conditioning and a weights file listed in `files` with their SHA-256 and size; fields with floats, a non-ASCII
    string and nesting that the subject manifest keeps. typed_step: a train_step entry TrainingBundle.kt takes (the
    codec's entry dtypes and shapes, `trainable`); tiling: an encode_tiling record whose tile programs (with "stages":
    each tile's stage programs) replace `encode`; drop: leave out the program at this path (e.g. "embed.pte", "block_3.pte")."""
    from safetensors.numpy import save_file

    from ditskip_edge.runtime.bundle import sha256_file, write_manifest as bundle_write_manifest
    (root / "model/text").mkdir(parents=True)
    r = np.random.default_rng(13)
    save_file({"txt": r.normal(size=(1, 3, C)).astype(F32)}, str(root / "model/text/prompt_000.safetensors"))
    save_file({"w": r.normal(size=(5, 3)).astype(F32)}, str(root / "model/kept_weights.safetensors"))
    sched = {"steps": 2, "grad_accum": 2, "s_min_px": 8, "s_max_px": 16, "multiple_px": 4, "seed": 5,
             "t_sampling": "uniform", "dynamic_patches": True}
    shapes = {"x0": [1, C, 4, 4], "front.img": [1, 16, C], "front.txt": [1, 3, C], "back.img": [1, 16, C]}
    files = {rel: {"sha256": sha256_file(root / rel), "bytes": (root / rel).stat().st_size}
             for rel in ("model/kept_weights.safetensors", "model/text/prompt_000.safetensors")}
    programs = standin_programs(shapes, codec, 4)
    extra = {}
    if typed_step:
        from ditskip_edge.runtime.cache_format import CacheCodec, entry_layout
        layout, _ = entry_layout(CacheCodec.parse(codec), {k: tuple(v) for k, v in shapes.items()})
        fixed = {"x0": shapes["x0"], "noise": shapes["x0"], "t": [1], "cond.txt": [1, 3, C]}
        programs[-1]["inputs"] = [{"name": n, "shape": fixed[n], "dtype": "float32"} if n in fixed else
                                  {"name": n, "shape": layout[n[6:]]["shape"], "dtype": layout[n[6:]]["dtype"]}
                                  for n in [s["name"] for s in programs[-1]["inputs"]]]
        programs[-1]["trainable"] = {}
    if tiling is not None:
        from ditskip_edge.runtime.tiling import tile_key, tile_shapes
        tiles = tile_shapes((8, 8), tiling["tile_px"], tiling["stride_px"])
        tiling = {**tiling, "programs": {tile_key(th, tw): f"encode.{tile_key(th, tw)}" for th, tw in tiles}}
        programs = encode_programs(tiles, int(tiling.get("stages", 1))) + programs[1:]
        extra["encode_tiling"] = tiling
    programs = [p for p in programs if p["path"] != drop]
    bundle_write_manifest(root / "manifest.json", {
        "format": "ditskip-edge-bundle", "format_version": 3,
        "created_by": {"tool": "ditskip-edge", "note": "caf\u00e9 \u2713", "version": 0.1},
        "bundle_kind": "model", "model": {"name": "stand-in", "transformer_config": {"eps": 1e-06, "dim": C}},
        "plan": {"num_blocks": 4, "n_front": 1, "n_back": 2}, "lora": {"rank": 4, "alpha": 4.0, "targets": []},
        "optimizer": {"lr": 0.001, "betas": [0.9, 0.999], "eps": 1e-08, "weight_decay": 0.0001}, "schedule": sched,
        "model_bundle": {"prompts": [{"prompt": "a photo of sks toy",
                                      "text_conditioning": "model/text/prompt_000.safetensors"}],
                         "cache_codec": codec, "entry_shapes": shapes, "min_photos": 2, "num_samples": 4},
        "programs": programs, "files": files, **extra})
    return root


def python_subject_bundle(model_dir: Path, photos, out: Path, mode: str = "stored") -> None:
    """subject.py _write_subject_bundle itself (what personalize runs after its checks), stand-in programs; `mode`:
    SubjectConfig.cache_mode."""
    from ditskip_edge.runtime import subject
    from ditskip_edge.runtime.bundle import Bundle
    from ditskip_edge.runtime.schedule import ScheduleConfig, make_schedule
    model = Bundle.open(model_dir)
    p = model.field("plan")
    fwd = standin_forward((p["num_blocks"], p["n_front"], p["n_back"]), model.field("schedule", "s_min_px"),
                          model.manifest.get("encode_tiling"))
    schedule = make_schedule(ScheduleConfig(**model.field("schedule")), [x.hw for x in photos], [x.name for x in photos])
    prompt = model.prompts()[0]
    identity = subject.run_identity(model, photos, prompt, mode)
    cfg = subject.SubjectConfig(progress=False, cache_mode=mode)
    subject._write_subject_bundle(model, photos, schedule, prompt, model.field("model_bundle", "prompts")[0][
        "text_conditioning"], fwd, identity, cfg, out, subject.work_dir_for(out), {"prompt": prompt})


def subject_photos(tmp: Path):
    """Two photos at the data resolution, 8-bit values (what normalise gives, so their PNGs read back the same)."""
    from ditskip_edge.runtime.photos import PhotoPixels
    r = np.random.default_rng(21)
    photos, spec = [], []
    for i, (h, w) in enumerate(((16, 20), (18, 16))):
        px = (r.integers(0, 256, size=(3, h, w)).astype(F32) / F32(127.5) - F32(1)).astype(F32)
        sha = hashlib.sha256(f"photo {i}".encode()).hexdigest()
        photos.append(PhotoPixels(f"img_{i}.jpg", px, (h, w), sha))
        (tmp / f"s{i}.f32").write_bytes(px.astype("<f4").tobytes())
        spec.append([f"img_{i}.jpg", sha, h, w, str(tmp / f"s{i}.f32")])
    return photos, spec


def test_the_kotlin_subject_bundle_is_personalize_s(jar, tmp_path):
    """SubjectBundle.write on a model bundle = subject.py's subject bundle: Bundle.open(verify=True) takes it; every
    file but the photo PNGs (another encoder) byte for byte (model files, schedule.json, text conditioning, residual
    cache); the photos decode to the same pixels; the manifest is Python's json.dumps(indent=1) with its digest line,
    and its fields are Python's but for the photo PNGs' hashes and sizes, the timings and the coding errors (float32
    norms in numpy: to 1e-5); an interrupted run leaves nothing at the destination and resumes."""
    from ditskip_edge.runtime.bundle import Bundle, manifest_bytes, read_manifest
    from ditskip_edge.runtime.photos import read_png
    model_dir = verified_model_bundle(tmp_path / "model")
    photos, spec_photos = subject_photos(tmp_path)
    python_subject_bundle(model_dir, photos, tmp_path / "py")
    spec = tmp_path / "subject.json"
    spec.write_text(json.dumps({"bundle": str(model_dir), "photos": spec_photos}))
    kt = tmp_path / "kt"
    assert kotlin(jar, "subject", spec, kt, 2).stdout.split() == ["resumed", "0", "computed", "2", "stopped"]
    assert not kt.exists() and (tmp_path / ".kt.partial").is_dir()
    assert kotlin(jar, "subject", spec, kt).stdout.split() == ["resumed", "2", "computed", "2", "written"]
    assert not (tmp_path / ".kt.partial").exists()

    b = Bundle.open(kt, verify=True)
    assert b.kind == "subject" and b.cache_mode == "stored"
    reader, py_reader = b.cache(), Bundle.open(tmp_path / "py").cache()
    reader.verify()
    for k in range(b.schedule.num_samples):
        got, want = reader.read_encoded(k), py_reader.read_encoded(k)
        assert got.keys() == want.keys() and all(np.array_equal(got[n], want[n]) for n in want)
    raw = (kt / "manifest.json").read_bytes()
    km, pm = read_manifest(kt), read_manifest(tmp_path / "py")
    assert manifest_bytes(km) == raw                                           # Python's formatting, digest line
    photo_files = [f"subject/photos/{i:03d}.png" for i in range(len(photos))]
    index = "subject/cache/cache_index.json"                                   # coding errors to 1e-5
    assert list(km["files"]) == list(pm["files"])
    assert_same_cache(tmp_path / "py/subject/cache", kt / "subject/cache")
    for rel in pm["files"]:
        if rel in photo_files:
            assert np.array_equal(read_png(kt / rel), read_png(tmp_path / "py" / rel)), rel
        elif rel != index:
            assert (kt / rel).read_bytes() == (tmp_path / "py" / rel).read_bytes(), rel
            assert km["files"][rel] == pm["files"][rel], rel
    ks, ps = km["subject_stage"], pm["subject_stage"]
    assert list(ks) == list(ps)
    assert (ks["resumed_entries"], ks["computed_entries"]) == (2, 2) and (ps["resumed_entries"], ps["computed_entries"]) == (0, 4)
    for name, err in ps["cache_rel_error"].items():
        for stat in ("mean", "max"):
            assert ks["cache_rel_error"][name][stat] == pytest.approx(err[stat], rel=1e-5, abs=1e-12)
    for m in (km, pm):
        for rel in photo_files + [index]:
            m["files"][rel] = None
        for key in ("seconds", "seconds_per_sample", "cache_rel_error", "resumed_entries", "computed_entries"):
            m["subject_stage"][key] = None
    assert json.dumps(km, indent=1) == json.dumps(pm, indent=1)                # same fields, same order


def test_a_failed_kotlin_assembly_leaves_no_bundle(jar, tmp_path):
    """A failure while writing (here: the photo PNG writer) removes the working folder: nothing at the destination,
    no .partial; the working folder of an interrupted run with other inputs is refused and kept; a model bundle file
    that does not match its manifest is refused before any work."""
    model_dir = verified_model_bundle(tmp_path / "model")
    _, spec_photos = subject_photos(tmp_path)
    spec = tmp_path / "subject.json"
    spec.write_text(json.dumps({"bundle": str(model_dir), "photos": spec_photos, "fail_at_png": True}))
    r = kotlin(jar, "subject", spec, tmp_path / "kt", ok=False)
    assert r.returncode != 0 and "injected failure" in r.stderr
    assert not (tmp_path / "kt").exists() and not (tmp_path / ".kt.partial").exists()
    spec.write_text(json.dumps({"bundle": str(model_dir), "photos": spec_photos}))
    # an interrupted run's working folder: another run with other photos is refused and leaves it (subject.py
    # check_partial), the same inputs continue it
    assert kotlin(jar, "subject", spec, tmp_path / "kt", 1).stdout.split()[-1] == "stopped"
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"bundle": str(model_dir), "photos": [[*p[:1], "0" * 64, *p[2:]] for p in spec_photos]}))
    r = kotlin(jar, "subject", other, tmp_path / "kt", ok=False)
    assert r.returncode != 0 and "for other inputs" in r.stderr and (tmp_path / ".kt.partial").is_dir()
    assert kotlin(jar, "subject", spec, tmp_path / "kt").stdout.split() == ["resumed", "1", "computed", "3", "written"]
    shutil.rmtree(tmp_path / "kt")
    weights = model_dir / "model/kept_weights.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\x00")
    r = kotlin(jar, "subject", spec, tmp_path / "kt", ok=False)
    assert r.returncode != 0 and "kept_weights.safetensors" in r.stderr and "SHA-256" in r.stderr
    assert not (tmp_path / "kt").exists() and not (tmp_path / ".kt.partial").exists()


# ------------------------------------------------------------------------------------------------ x0-only / cache-free

ENTRY_CASES = [("cache-free", "int8-channel,front.txt=fp16", None), ("cache-free", "fp32", None),
               ("x0-only", "int8-channel,front.txt=fp16", None), ("x0-only", "fp32", None),
               ("cache-free", "int8-channel,front.txt=fp16", {"tile_px": 4, "stride_px": 2, "scale": 2, "tiled": True}),
               ("cache-free", "int8-channel,front.txt=fp16",
                {"tile_px": 4, "stride_px": 2, "scale": 2, "tiled": True, "stages": 3})]


def mode_subject_bundle(tmp: Path, mode: str, codec: str, tiling: dict | None = None, drop: str | None = None) -> Path:
    """A subject bundle of `mode` written by the Python runtime (subject.py _write_subject_bundle, stand-in programs)
    around a model bundle whose train_step TrainingBundle.kt takes."""
    model_dir = verified_model_bundle(tmp / "model", codec=codec, typed_step=True, tiling=tiling, drop=drop)
    photos, _ = subject_photos(tmp)
    python_subject_bundle(model_dir, photos, tmp / "py", mode)
    return tmp / "py"


def python_entries(root: Path) -> list[dict]:
    """runtime/subject.py CacheFreeEntries(bundle) for every sample, its forward programs the stand-ins."""
    from ditskip_edge.runtime.bundle import Bundle
    from ditskip_edge.runtime.subject import CacheFreeEntries
    b = Bundle.open(root, verify=True)
    entries = CacheFreeEntries(b)
    p = b.field("plan")
    entries.fwd = standin_forward((p["num_blocks"], p["n_front"], p["n_back"]), b.field("schedule", "s_min_px"),
                                  b.manifest.get("encode_tiling"))
    return [entries(s) for s in b.schedule.samples]


@pytest.mark.parametrize("mode,codec,tiling", ENTRY_CASES)
def test_the_kotlin_cache_free_entries_are_python_s_byte_for_byte(jar, tmp_path, mode, codec, tiling):
    """TrainingBundle.kt + CacheFreeEntries.kt on an x0-only or a cache-free subject bundle written by the Python
    runtime (stand-in programs on both sides): for every sample, the entry parts the training step takes
    (TrainingBundle.stepInputs) and the entry's x0 are runtime/subject.py CacheFreeEntries' byte for byte: x0 from
    the x0 cache, or from the bundle's photo PNG (read as photos.py read_png) through the encode program (tiled per
    encode_tiling), noise from the portable RNG, residuals by embed + the blocks, coded with the bundle's codec
    (int8-channel with an fp16 override, and fp32)."""
    root = mode_subject_bundle(tmp_path, mode, codec, tiling)
    want = python_entries(root)
    out = kotlin(jar, "entries", root, tmp_path / "kt").stdout.split()
    assert out == ["entries", str(len(want)), mode]
    assert len(want) == 4
    for k, entry in enumerate(want):
        got = {f.stem: f.read_bytes() for f in (tmp_path / "kt" / str(k)).iterdir()}
        assert sorted(got) == sorted(entry), (k, sorted(got), sorted(entry))
        for name, arr in entry.items():
            assert got[name] == np.ascontiguousarray(arr).tobytes(), (k, name)
    if mode == "cache-free":                          # the photos are used: x0 differs from sample to sample
        assert len({e["x0"].tobytes() for e in want}) == len(want)


@pytest.mark.parametrize("drop", ["embed.pte", "block_3.pte", "encode_4x2_s1.pte"])
def test_a_cache_free_bundle_without_its_forward_programs_is_refused_in_one_line(jar, tmp_path, drop):
    """A cache-free bundle missing a forward program (embed, a block the residuals need) is refused by
    CacheFreeEntries.kt before any entry is computed, with runtime/subject.py CacheFreeEntries' one line (forward.py
    subject_programs' message)."""
    from ditskip_edge.runtime.bundle import Bundle
    from ditskip_edge.runtime.errors import BundleError
    from ditskip_edge.runtime.subject import CacheFreeEntries
    staged = {"tile_px": 4, "stride_px": 2, "scale": 2, "tiled": True, "stages": 2} if "_s1" in drop else None
    root = mode_subject_bundle(tmp_path, "cache-free", "int8-channel,front.txt=fp16", tiling=staged, drop=drop)
    with pytest.raises(BundleError) as py_err:
        CacheFreeEntries(Bundle.open(root))
    r = kotlin(jar, "entries", root, tmp_path / "kt", ok=False)
    assert r.returncode != 0 and not (tmp_path / "kt").exists()
    line = next(ln for ln in r.stderr.splitlines() if "IllegalArgumentException" in ln)
    msg = line.split("IllegalArgumentException: ", 1)[1]
    assert msg == str(py_err.value) and "\n" not in msg
    assert {"embed.pte": "no embed program", "block_3.pte": "no block program for blocks [3]",
            "encode_4x2_s1.pte": "no encode.4x2.s1 program"}[drop] in msg


def test_a_lowrank_cache_free_bundle_is_refused_in_one_line(jar, tmp_path):
    """A cache-free bundle whose codec has a lowrank residual (no SVD encoder in the app) is refused by
    CacheFreeEntries.kt before any entry is computed, in one line naming the codec and the residual."""
    root = mode_subject_bundle(tmp_path, "cache-free", "int8-channel,front.img=lowrank-r2")
    r = kotlin(jar, "entries", root, tmp_path / "kt", ok=False)
    assert r.returncode != 0 and not (tmp_path / "kt").exists()
    line = next(ln for ln in r.stderr.splitlines() if "IllegalArgumentException" in ln)
    assert "lowrank-r2" in line and "residual front.img" in line and "no lowrank (SVD) encoder" in line


def per_photo_captions(root: Path) -> list[np.ndarray]:
    """Turn a subject bundle's one text conditioning into per-photo rows (photo i: the prompt's row scaled by 1 + i,
    as different captions would encode), as compile --photo-captions writes them, and re-sign its manifest."""
    from safetensors.numpy import load_file, save_file
    from ditskip_edge.runtime.bundle import MANIFEST, read_manifest, sha256_file
    from ditskip_edge.runtime.bundle import write_manifest as write_signed
    m = read_manifest(root, verify=False)
    stage = m["subject_stage"]
    n = len(stage["photos"])
    text = root / stage["text_conditioning"]
    one = load_file(str(text))
    save_file({k: np.concatenate([v * np.float32(1 + i) for i in range(n)]) for k, v in one.items()}, str(text))
    stage.update(text_rows="per_photo", photo_captions=[f"caption {i}" for i in range(n)])
    for rel in m["files"]:
        m["files"][rel] = {"sha256": sha256_file(root / rel), "bytes": (root / rel).stat().st_size}
    write_signed(root / MANIFEST, m)
    return [load_file(str(text))[k] for k in sorted(one)]


def test_the_kotlin_training_step_takes_each_samples_own_photo_caption_row(jar, tmp_path):
    """Per-photo captions (subject_stage.text_rows per_photo): TrainingBundle.kt hands each sample's training step
    row s.photo of the text conditioning, shape [1, ...], and CacheFreeEntries.kt computes its residuals with that
    row, byte for byte as runtime/inputs.py StepInputs and runtime/subject.py CacheFreeEntries do; samples of
    different photos get different rows."""
    from ditskip_edge.runtime.bundle import Bundle
    from ditskip_edge.runtime.inputs import SampleConditioning
    root = mode_subject_bundle(tmp_path, "cache-free", "fp32")
    per_photo_captions(root)
    b = Bundle.open(root)
    want_cond = [SampleConditioning(b)(s) for s in b.schedule.samples]
    want = python_entries(root)
    assert len({s.photo for s in b.schedule.samples}) == 2
    out = kotlin(jar, "entries", root, tmp_path / "kt").stdout.split()
    assert out == ["entries", str(len(want)), "cache-free"]
    for s, cond, entry in zip(b.schedule.samples, want_cond, want):
        got = {f.stem: f.read_bytes() for f in (tmp_path / "kt" / f"cond_{s.index}").iterdir()}
        assert sorted("cond." + k for k in got) == sorted(cond)
        for k, arr in cond.items():
            assert arr.shape[0] == 1
            assert got[k.removeprefix("cond.")] == np.ascontiguousarray(arr).tobytes(), (s.index, k)
        parts = {f.stem: f.read_bytes() for f in (tmp_path / "kt" / str(s.index)).iterdir()}
        for name, arr in entry.items():
            if name != "x0":
                assert parts[name] == np.ascontiguousarray(arr).tobytes(), (s.index, name)
    by_photo = {s.photo: c for s, c in zip(b.schedule.samples, want_cond)}
    assert not all(np.array_equal(by_photo[0][k], by_photo[1][k]) for k in by_photo[0])


def test_the_swift_cache_free_entries_follow_the_kotlin_port():
    """Swift cannot be compiled here: CacheFreeEntries.swift, TrainingBundle.swift and Trainer.swift (uncompiled) are
    checked against the Kotlin port run above on the lines that carry the order of the work, the PNG arithmetic and
    the refusals: x0 from the cache or the photo, noise, residuals, the codec; the PNG filters; the entries the step
    takes (per-photo captions: the row of the sample's photo); no more refusal of the x0-only / cache-free modes."""
    sw = {n: (ROOT / "ios_demo/DitSkipDemo" / n).read_text() for n in ("CacheFreeEntries.swift", "TrainingBundle.swift",
                                                                      "Trainer.swift", "ContentView.swift",
                                                                      "Safetensors.swift")}
    kt = {n: (KT_DIR / n).read_text() for n in ("CacheFreeEntries.kt", "TrainingBundle.kt", "EtTrainer.kt",
                                                 "MainActivity.kt", "Safetensors.kt")}
    pairs = [("CacheFreeEntries", "x0Cache.read(s.index)", None),
             ("CacheFreeEntries", "s.cropBox[0], s.cropBox[1], s.cropBox[2], s.noiseSeed",
              "x0: s.cropBox[0], y0: s.cropBox[1],"),
             ("CacheFreeEntries", "SubjectStage.x0(runner, px, h, w, planned, sMin, tiling)",
              "sample: planned, sMin: sMin, tiling: tiling)"),
             ("CacheFreeEntries", "PortableRng.normal(s.noiseSeed, x0.data.size)",
              "PortableRng.normal(seed: s.noiseSeed, count: x0.data.count)"),
             ("CacheFreeEntries", "SubjectStage.residuals(runner, spans, x0, noise, s.t, condFor(s.photo))",
              "SubjectStage.residuals(runner, spans: spans, x0: x0, noise: noise, t: s.t, cond: try condFor(s.photo))"),
             ("CacheFreeEntries", "val row = if (bundle.perPhotoText) photo else 0",
              "let row = bundle.perPhotoText ? photo : 0"),
             ("TrainingBundle", "perPhotoText = textRows == BundleContract.PER_PHOTO_TEXT_ROWS",
              "perPhotoText = textRows == BundleContract.perPhotoTextRows"),
             ("TrainingBundle", "condFor(s.photo).getValue(spec.name.removePrefix(BundleContract.COND_PREFIX))",
              "let cond = try condFor(s.photo)"),
             ("Safetensors", "longArrayOf(1L) + shape.copyOfRange(1, shape.size)", "shape: [1] + shape.dropFirst()"),
             ("CacheFreeEntries", "CodecEncoder.encodeEntry(codec, tensors)",
              "CodecEncoder.encodeEntry(codec, [(BundleContract.x0Key, x0)] + residuals)"),
             ("CacheFreeEntries", "codec.requireEncodable(", None),
             ("CacheFreeEntries", "SubjectStage.noProgramsMessage(where, missing)",
              "SubjectStage.noProgramsMessage(where_, missing)"),
             ("CacheFreeEntries", "no block program for blocks ${absent.take(5)} (the residuals need blocks 0..${need.last})",
              "no block program for blocks \\(Array(absent.prefix(5))) (the residuals need blocks 0..\\(need.last ?? 0))"),
             ("CacheFreeEntries", ".toFloat() / 127.5f - 1f", "]) / 127.5 - 1"),
             ("CacheFreeEntries", "3 -> r + (a + up) / 2", "case 3: v = r + (a + up) / 2"),
             ("CacheFreeEntries", "4 -> r + paeth(a, up, c)", "case 4: v = r + paeth(a, up, c)"),
             ("CacheFreeEntries", "if (pa <= pb && pa <= pc) a else if (pb <= pc) b else c",
              "pa <= pb && pa <= pc ? a : (pb <= pc ? b : c)"),
             ("CacheFreeEntries", "px[q * channels + if (channels >= 3) c else 0]",
              "px[q * channels + (channels >= 3 ? c : 0)]"),
             ("CacheFreeEntries", "intArrayOf(1, 0, 3, 0, 2, 0, 4)[colorType]", "[1, 0, 3, 0, 2, 0, 4][colorType]"),
             ("TrainingBundle", "requireEntries().read(s)", "try requireEntries().read(s)"),
             ("TrainingBundle", "useEntries(StoredEntries(cache!!))", "try useEntries(StoredEntries(cache!))"),
             ("TrainingBundle", "(a bundle of another version: write it again with this version's subject stage)", None),
             ("EtTrainer", "bundle.requireEntries()", "_ = try bundle.requireEntries()"),
             ("MainActivity", "bundle.useEntries(CacheFreeEntries(bundle, EtForwardRunner(root, bundle.manifest)))",
              "try bundle.useEntries(CacheFreeEntries(bundle, runner: try EtForwardRunner(root: root, manifest: bundle.manifest)))")]
    swift_of = {"CacheFreeEntries": "CacheFreeEntries", "TrainingBundle": "TrainingBundle", "EtTrainer": "Trainer",
                "MainActivity": "ContentView", "Safetensors": "Safetensors"}
    for name, k_line, s_line in pairs:
        assert k_line in kt[f"{name}.kt"], (name, k_line)
        assert (s_line or k_line) in sw[f"{swift_of[name]}.swift"], (name, s_line or k_line)
    for text in list(sw.values()) + list(kt.values()):
        assert "not wired into training" not in text and "trains stored residual caches only" not in text


# ------------------------------------------------------------------------------------------------ photo normalisation

def test_kotlin_lanczos_is_pillow_s_bit_for_bit(jar, tmp_path):
    """PhotoNormalise.kt = photos.py normalise (Pillow's LANCZOS, short side -> data_px, round half to even) on random
    and smooth images, downscaled by non-integer factors, portrait and landscape, by a pixel and by 3x."""
    from PIL import Image

    from ditskip_edge.runtime.photos import normalise, to_uint8
    cases = [(480, 640, 256), (300, 500, 256), (257, 300, 256), (1000, 700, 333), (64, 50, 17), (256, 1000, 255)]
    r = np.random.default_rng(0)
    spec, want = [], []
    for i, (h, w, d) in enumerate(cases):
        a = r.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        if i % 2:                                                               # smooth ramps: no clipping noise
            a = np.clip(a.astype(int) // 4 + np.arange(w)[None, :, None] % 200, 0, 255).astype(np.uint8)
        (tmp_path / f"in{i}.rgb").write_bytes(a.tobytes())
        spec.append([h, w, d, str(tmp_path / f"in{i}.rgb"), str(tmp_path / f"out{i}.rgb")])
        want.append(to_uint8(normalise(Image.fromarray(a), d)))
    (tmp_path / "lanczos.json").write_text(json.dumps(spec))
    kotlin(jar, "lanczos", tmp_path / "lanczos.json")
    for i, w in enumerate(want):
        got = np.frombuffer((tmp_path / f"out{i}.rgb").read_bytes(), np.uint8)
        assert got.size == w.size, (cases[i], w.shape)
        assert np.array_equal(got.reshape(w.shape), w), (cases[i], int(np.abs(got.reshape(w.shape) - w.astype(int)).max()))


def test_the_swift_mirror_follows_the_kotlin_port():
    """Swift cannot be compiled here: its subject stage is checked against the Kotlin port (which runs above) on the
    lines that carry the arithmetic and the file format: rounding modes, constants, int4 packing, fp16 bits, the
    journal's keys and separators, the index's indent, the residual spans."""
    sw = {n: (ROOT / "ios_demo/DitSkipDemo" / n).read_text()
          for n in ("CacheCodecs.swift", "CacheWriter.swift", "SubjectStage.swift", "PyJson.swift", "Patches.swift")}
    kt = {n: (KT_DIR / n).read_text() for n in ("CacheCodecs.kt", "CacheWriter.kt", "SubjectStage.kt", "Patches.kt")}
    codecs_sw, codecs_kt = sw["CacheCodecs.swift"], kt["CacheCodecs.kt"]
    assert ".rounded(.toNearestOrEven)" in codecs_sw and "Math.rint(" in codecs_kt              # numpy's round
    for line in ("lower > 0x1000 || (lower == 0x1000 && h & 1 == 1)", "let s = 126 - exp", "if s > 24 { return sign }",
                 "static let fp16Max: Float = 65504", "static let minScale: Float = 1e-12",
                 "(q[2 * $0] + 8) + 16 * (q[2 * $0 + 1] + 8)", "max($0 / qmax, minScale)",
                 "let g = group != 0 && s[1] % group == 0 ? group : s[1]",
                 "if c.axis == \"channel\" { return ((row / shape[1]) * gs[1] + (row % shape[1]) / gs[2]) * d + x }"):
        assert line in codecs_sw, line
    for line in ("lower > 0x1000 || (lower == 0x1000 && (h and 1) == 1)", "val s = 126 - exp", "if (s > 24) return sign",
                 "((q[2 * it] + 8) + 16 * (q[2 * it + 1] + 8))", "max(absmax[k] / qmax, MIN_SCALE)"):
        assert line in codecs_kt, line
    w = sw["CacheWriter.swift"]
    assert 'headerKey = "header", entryKey = "entry", extraKey = "extra", shardKey = "shard"' in w
    assert "PyJson.dumps(record, compact: true)" in w and "PyJson.dumps(value, indent: 1)" in w
    assert "PyJson.dumps(identity, sortKeys: true)" in w and 'String(format: "shard_%05d.bin", shards.count)' in w
    assert "pos + entrySize > shardBytes && pos > 0" in w and "pos + entrySize > shardBytes && pos > 0" in kt["CacheWriter.kt"]
    st = sw["SubjectStage.swift"]
    for line in ("if i == spans.nFront && spans.nFront > 0 { try front() }", "if i == backStart {",
                 "let last = spans.nBack > 0 ? spans.numBlocks : spans.nFront",
                 "if spans.nFront > 0 && last == spans.nFront { try front() }"):
        assert line in st, line
    assert "if (i == spans.nFront && spans.nFront > 0)" in kt["SubjectStage.kt"]
    assert "decpt <= -4 || decpt > 16" in sw["PyJson.swift"] and "decpt <= -4 || decpt > 16" in \
        (KT_DIR / "PyJson.kt").read_text()
    assert "let g = (2 * src + 1) / Float(size) - 1" in sw["Patches.swift"] and \
        "val g = (2f * src + 1f) / size.toFloat() - 1f" in kt["Patches.kt"]


def test_the_swift_subject_bundle_and_lanczos_follow_the_kotlin_port():
    """SubjectBundle.swift and PhotoNormalise.swift (uncompiled) against the Kotlin files checked above: the kept
    manifest fields and their order, the subject_stage keys in personalize's order, the paths, the digest line, the
    Lanczos filter, its fixed point and the size rule."""
    import re
    sw = (ROOT / "ios_demo/DitSkipDemo/SubjectBundle.swift").read_text()
    kt = (KT_DIR / "SubjectBundle.kt").read_text()
    from ditskip_edge.runtime import bundle
    kept = re.findall(r'"(\w+)"', re.search(r"KEPT_FIELDS = listOf\(([^)]*)\)", kt).group(1))
    assert kept == re.findall(r'"(\w+)"', re.search(r"keptFields = \[([^\]]*)\]", sw).group(1))
    assert kept == ["created_by", "model", "plan", "lora", "optimizer", "model_stage", "lora_file", "schedule",
                    "programs", "generation", "encode_tiling"]                  # subject.py subject_manifest
    for const in (bundle.PHOTOS_DIR, bundle.SCHEDULE_FILE, bundle.TEXT_FILE, bundle.CACHE_DIR):
        assert f'"{const}"' in sw and f'"{const}"' in kt, const
    kt_keys = re.findall(r'stage\["(\w+)"\] =', kt)
    sw_keys = re.findall(r'\("(\w+)", [.\w(]', sw.split("let stage = PyValue.object([", 1)[1].split("])\n", 1)[0])
    assert kt_keys == sw_keys and kt_keys[0] == "schedule" and kt_keys[-1] == "seconds", (kt_keys, sw_keys)
    assert "dumps(manifest, indent: 1).utf8).dropFirst(2)" in sw and "indent = 1).substring(2)" in kt
    assert '".\\(out.lastPathComponent).partial"' in sw and '".${out.name}.partial"' in kt
    pn_sw = (ROOT / "ios_demo/DitSkipDemo/PhotoNormalise.swift").read_text()
    pn_kt = (KT_DIR / "PhotoNormalise.kt").read_text()
    for line in ("precisionBits = 32 - 8 - 2", "(-3.0 <= x && x < 3.0) ? sinc(x) * sinc(x / 3)",
                 "let center = (Double(xx) + 0.5) * scale", "Int(center - support + 0.5)", "Int(center + support + 0.5)",
                 "lanczos((Double(x + xmin) - center + 0.5) * ss)", "(-0.5 + $0 * one).rounded(.towardZero)",
                 "(0.5 + $0 * one).rounded(.towardZero)", "Int(support.rounded(.up)) * 2 + 1",
                 "Float(px[i * 3 + c]) / 127.5 - 1", "(Double(h) * scale).rounded(.toNearestOrEven)"):
        assert line in pn_sw, line
    for line in ("PRECISION_BITS = 32 - 8 - 2", "if (-3.0 <= x && x < 3.0) sinc(x) * sinc(x / 3.0)",
                 "val center = (xx + 0.5) * scale", "(center - support + 0.5).toInt()", "(-0.5 + pre[it] * one).toInt()",
                 "Math.ceil(support).toInt() * 2 + 1", ".toFloat() / 127.5f - 1f", "Math.rint(h * scale)"):
        assert line in pn_kt, line


# ------------------------------------------------------------------------------------------------ tiled encode

def pool_mix(tile: np.ndarray, f: int) -> np.ndarray:
    """SubjectCheck.kt poolMix: [1, 3, th, tw] -> [1, 4, th / f, tw / f] = a fixed channel mix of the f x f average
    pool + half the tile's top-left pixel + a ramp over the tile's own cells (float64, then float32)."""
    t = tile[0].astype(np.float64)
    _, th, tw = t.shape
    oh, ow = th // f, tw // f
    pooled = t.reshape(3, oh, f, ow, f).mean(axis=(2, 4))
    mix = np.array([[((k * 3 + ch) % 5 - 2) * 0.3 + 0.1 for ch in range(3)] for k in range(4)])
    y, z = np.meshgrid(np.arange(oh), np.arange(ow), indexing="ij")
    out = np.einsum("kc,cyz->kyz", mix, pooled) + 0.5 * t[[k % 3 for k in range(4)], 0, 0][:, None, None] \
        + 0.01 * (y + 2 * z) / (oh + ow)
    return out.astype(F32)[None]


def channel_up(t: np.ndarray, f: int) -> np.ndarray:
    """SubjectCheck.kt channelUp: channel mix + nearest upsample by f + a ramp within each f cell."""
    a = np.repeat(np.repeat(t[0, 0], f, 0), f, 1)
    b = np.repeat(np.repeat(t[0, 1], f, 0), f, 1)
    ramp = (np.arange(a.shape[1]) % f).astype(F32) * F32(0.25)
    return np.stack([a * F32(o + 1) - b * F32(0.5) + ramp[None, :] for o in range(3)])[None].astype(F32)


# (kind, c, h, w, tile, stride, scale): f=8 tile 64 stride 48 on 128 (AutoencoderKL's quarter overlap), f=32 tile 128
# stride 96 and tile 64 stride 32 on 256, SANA's 7/8 stride on a non-square input with a partial far edge, one tile
# (untiled), and the decode (tile by tile) on the same loop
TILE_CASES = [("encode", 3, 128, 128, 64, 48, 8), ("encode", 3, 256, 256, 128, 96, 32),
              ("encode", 3, 256, 256, 64, 32, 32), ("encode", 3, 96, 160, 64, 56, 8),
              ("encode", 3, 128, 128, 128, 128, 8), ("decode", 2, 11, 9, 4, 3, 2), ("decode", 2, 7, 10, 3, 2, 3)]


def test_kotlin_tiled_encode_is_tiling_py_s(jar, tmp_path):
    """Tiling.kt encodeTiled = runtime/tiling.py encode_tiled (to 1e-6) with a stand-in tile encoder whose output
    depends on the tile's content, position and size, for FLUX's and SANA's strides, several tile sizes, a partial far
    edge and one tile (untiled); the tile encoder runs in by-shape order (tile_shapes' order, all tiles of one shape in
    a row: each tile program loaded once), and by tile order without by_shape; decodeTiled, now on the same runTiled,
    is still decode_tiled."""
    from ditskip_edge.runtime.tiling import decode_tiled, encode_tiled, tile_key
    r = np.random.default_rng(3)
    spec, want, orders = [], [], []
    for n, (kind, c, h, w, tile, stride, f) in enumerate(TILE_CASES):
        for by_shape in ((True, False) if kind == "encode" else (False,)):
            x = r.normal(size=(1, c, h, w)).astype(F32)
            (tmp_path / f"in{len(spec)}.f32").write_bytes(x.astype("<f4").tobytes())
            order: list[str] = []

            def run(t, f=f, order=order, kind=kind):
                order.append(tile_key(t.shape[2], t.shape[3]))
                return pool_mix(t, f) if kind == "encode" else channel_up(t, f)
            out = (encode_tiled(x, run, tile, stride, f, by_shape) if kind == "encode"
                   else decode_tiled(x, run, tile, stride, f))
            spec.append({"kind": kind, "c": c, "h": h, "w": w, "tile": tile, "stride": stride, "scale": f,
                         "by_shape": by_shape, "in": str(tmp_path / f"in{len(spec)}.f32"),
                         "out": str(tmp_path / f"out{len(spec)}.f32")})
            want.append(out)
            orders.append(order)
    (tmp_path / "tiles.json").write_text(json.dumps(spec))
    lines = [ln.split() for ln in kotlin(jar, "tiles", tmp_path / "tiles.json").stdout.splitlines()]
    assert len(lines) == len(spec)
    for k, (line, s, out, order) in enumerate(zip(lines, spec, want, orders)):
        assert line[:2] == ["order", str(k)] and [int(v) for v in line[2:5]] == list(out.shape[1:]), (s, line[:5])
        assert line[5:] == order, (s, line[5:], order)
        got = np.frombuffer(Path(s["out"]).read_bytes(), "<f4").reshape(out.shape)
        np.testing.assert_allclose(got, out, rtol=0, atol=1e-6, err_msg=str(s))
    tiled = [o for s, o in zip(spec, orders) if s["kind"] == "encode" and s["by_shape"] and len(o) > 1]
    assert tiled and all(o == sorted(o, key=o.index) for o in tiled)         # every shape's tiles in a row
    assert any(len(set(o)) > 1 for o in tiled)                               # more than one shape: the order matters


TILED = {"tile_px": 8, "stride_px": 4, "scale": 2, "tiled": True}            # s_min 16: tiles 8x8, 8x4, 4x8, 4x4


def tiled_model_bundle(root: Path, drop: str | tuple = (), stages: int = 1, tiled: bool = True):
    """A model bundle whose encode is tiled (encode_tiling; one encode.<h>x<w> stand-in program per pixel tile shape of
    the 16-px crop; stages > 1: each one's chain of stand-in stage programs encode.<h>x<w>.s<k>; tiled False: an
    encode_tiling record of the one untiled encode, staged), optionally without the programs named in `drop`; returns
    (fields, tiling, shapes, sched, codec, cond)."""
    from safetensors.numpy import save_file

    from ditskip_edge.runtime.tiling import tile_key, tile_shapes
    root.mkdir(parents=True)
    r = np.random.default_rng(17)
    cond = r.normal(size=(1, 3, C)).astype(F32)
    save_file({"txt": cond}, str(root / "prompt0.safetensors"))
    sched = {"steps": 2, "grad_accum": 2, "s_min_px": 16, "s_max_px": 24, "multiple_px": 4, "seed": 3,
             "t_sampling": "uniform", "dynamic_patches": True}
    shapes = {"x0": [1, C, 8, 8], "front.img": [1, 64, C], "front.txt": [1, 3, C], "back.img": [1, 64, C]}
    codec = "int8-channel,front.txt=fp16"
    programs = standin_programs(shapes, codec, 4)
    drop = (drop,) if isinstance(drop, str) else drop
    if tiled:
        tiles = tile_shapes((16, 16), TILED["tile_px"], TILED["stride_px"])
        tiling = {**TILED, "programs": {tile_key(th, tw): f"encode.{tile_key(th, tw)}" for th, tw in tiles}, "rule": "r"}
        enc = encode_programs(tiles, stages)
    else:
        tiling = {"tile_px": 16, "stride_px": 16, "scale": None, "tiled": False, "programs": {"16x16": "encode"},
                  "rule": "r"}
        enc = encode_programs([(16, 16)], stages, name=lambda th, tw: "encode")
    if stages > 1:
        tiling["stages"] = stages
    enc = [p for p in enc if p["name"] not in drop]
    fields = {"format": "ditskip-edge-bundle", "format_version": 3, "bundle_kind": "model",
              "model": {"name": "stand-in", "transformer_config": {"eps": 1e-06, "dim": C}},
              "plan": {"num_blocks": 4, "n_front": 1, "n_back": 2}, "schedule": sched,
              "model_bundle": {"prompts": [{"prompt": "p", "text_conditioning": "prompt0.safetensors"}],
                               "cache_codec": codec, "entry_shapes": shapes, "min_photos": 2, "num_samples": 4},
              "programs": enc + programs[1:], "encode_tiling": tiling}
    return fields, tiling, shapes, sched, codec, cond


def test_the_kotlin_stage_runs_a_tiled_encode_as_subject_py(jar, tmp_path, monkeypatch):
    """A model bundle with a tiled encode (encode_tiling, encode.<h>x<w> programs of four tile shapes, the stand-in
    tile program depending on the tile's position): ModelBundle.writeCache writes subject.py write_cache's cache for
    it (forward.py x0 through encode_tiled), resumably; per sample each tile program is loaded once, in tile_shapes'
    order, and released before the next shape and before embed runs (one program loaded at a time); the tiled x0 is
    not the untiled stand-in's (tiling really happened)."""
    from ditskip_edge.runtime.bundle import CACHE_DIR
    from ditskip_edge.runtime.tiling import tile_key, tile_shapes
    root = tmp_path / "model"
    fields, tiling, shapes, sched, codec, cond = tiled_model_bundle(root)
    digest = write_manifest(root, fields)
    events = tmp_path / "events.txt"
    spec, photos, names, shas = model_stage_input(tmp_path, root, 23, events=events)
    python_stage(monkeypatch, tmp_path / "py", (4, 1, 2), codec, shapes, sched, photos, names, cond,
                 fields["model"], 64 << 20, run=stage_run(digest, names, shas), tiling=tiling)
    assert kotlin(jar, "model", spec, tmp_path / "kt", 1).stdout.split() == ["resumed", "0", "computed", "1"]
    assert kotlin(jar, "model", spec, tmp_path / "kt").stdout.split() == ["resumed", "1", "computed", "3"]
    assert_same_cache(tmp_path / "py" / CACHE_DIR, tmp_path / "kt" / CACHE_DIR)
    one = []
    for th, tw in tile_shapes((16, 16), tiling["tile_px"], tiling["stride_px"]):
        one += [f"load encode.{tile_key(th, tw)}", f"release encode.{tile_key(th, tw)}"]
    assert len(one) == 8 and events.read_text().splitlines() == one * 3       # the second run: 3 samples
    # tiling happened: the untiled stand-in on the same crop gives another x0
    from ditskip_edge.runtime.patches import crop_patch
    fwd = standin_forward((4, 1, 2), 16, tiling)
    patch = crop_patch(photos[0], (0, 0, 16), 16)
    assert np.abs(fwd.x0(photos[0], (0, 0, 16)) - standin_tile_encode({"patch": patch})["x0"]).max() > 1e-3


def test_a_tiled_model_bundle_missing_a_tile_program_is_refused_in_one_line(jar, tmp_path):
    """A model bundle whose encode_tiling lists a tile program it does not have is refused before any work, in one
    line naming that program (forward.py subject_programs' message); one whose tile programs are not those of its
    tile_px / stride_px is refused by name too."""
    from ditskip_edge.runtime.bundle import Bundle
    from ditskip_edge.runtime.errors import BundleError
    from ditskip_edge.runtime.forward import subject_programs
    root = tmp_path / "model"
    fields, *_ = tiled_model_bundle(root, drop="encode.8x4")
    write_manifest(root, fields)
    with pytest.raises(BundleError) as py_err:                                  # the Python runtime's refusal
        subject_programs(Bundle.open(root))
    msg = kotlin_refusal(jar, tmp_path, root)
    assert msg == str(py_err.value), (msg, str(py_err.value))
    assert "no encode.8x4 program" in msg
    fields, tiling, *_ = tiled_model_bundle(tmp_path / "model2")
    fields["encode_tiling"] = {**tiling, "tile_px": 12, "stride_px": 8}         # tiles of another size
    write_manifest(tmp_path / "model2", fields)
    (tmp_path / "second").mkdir()
    msg = kotlin_refusal(jar, tmp_path / "second", tmp_path / "model2")
    assert "encode_tiling lists tiles" in msg and "every 8 px" in msg


def test_kotlin_shape_batched_encode_is_tiling_py_s(jar, tmp_path):
    """Tiling.kt encodeTiledShapes = runtime/tiling.py encode_tiled(encode_shape=...) (to 1e-6): one call per tile
    shape, in tile_shapes' order, with all of that shape's tiles in row-major order (the stand-in adds 0.001 x a tile's
    place in its call to pool_mix, so another order or grouping gives another result), blended as encode_tiled does;
    one tile (untiled): one call of one tile."""
    from ditskip_edge.runtime.tiling import encode_tiled, tile_key
    r = np.random.default_rng(4)
    spec, want, orders = [], [], []
    for kind, c, h, w, tile, stride, f in TILE_CASES:
        if kind != "encode":
            continue
        x = r.normal(size=(1, c, h, w)).astype(F32)
        (tmp_path / f"in{len(spec)}.f32").write_bytes(x.astype("<f4").tobytes())
        calls: list[str] = []

        def run_shape(tiles, f=f, calls=calls):
            calls.append(f"{tile_key(tiles[0].shape[2], tiles[0].shape[3])}:{len(tiles)}")
            return [pool_mix(t, f) + F32(0.001) * F32(n) for n, t in enumerate(tiles)]
        want.append(encode_tiled(x, None, tile, stride, f, encode_shape=run_shape))
        orders.append(calls)
        spec.append({"kind": "encode_shape", "c": c, "h": h, "w": w, "tile": tile, "stride": stride, "scale": f,
                     "by_shape": True, "in": str(tmp_path / f"in{len(spec)}.f32"),
                     "out": str(tmp_path / f"out{len(spec)}.f32")})
    (tmp_path / "tiles.json").write_text(json.dumps(spec))
    lines = [ln.split() for ln in kotlin(jar, "tiles", tmp_path / "tiles.json").stdout.splitlines()]
    assert len(lines) == len(spec)
    for k, (line, s, out, calls) in enumerate(zip(lines, spec, want, orders)):
        assert line[:2] == ["order", str(k)] and [int(v) for v in line[2:5]] == list(out.shape[1:]), (s, line[:5])
        assert line[5:] == calls, (s, line[5:], calls)
        got = np.frombuffer(Path(s["out"]).read_bytes(), "<f4").reshape(out.shape)
        np.testing.assert_allclose(got, out, rtol=0, atol=1e-6, err_msg=str(s))
    assert any(len(c) > 1 and any(not x.endswith(":1") for x in c) for c in orders)  # shapes of several tiles
    assert ["128x128:1"] in orders                                                    # one tile: one call


def staged_events(tiled: bool, stages: int) -> list[str]:
    """One sample's encode program loads and releases (SubjectCheck.kt StandIn events) of the staged bundle of
    tiled_model_bundle: per tile shape (tile_shapes' order), per stage: load, then release before the next loads."""
    from ditskip_edge.runtime.tiling import tile_key, tile_shapes
    names = ([f"encode.{tile_key(th, tw)}" for th, tw in tile_shapes((16, 16), TILED["tile_px"], TILED["stride_px"])]
             if tiled else ["encode"])
    return [e for n in names for k in range(stages) for e in (f"load {n}.s{k}", f"release {n}.s{k}")]


@pytest.mark.parametrize("tiled", [True, False])
def test_the_kotlin_stage_runs_a_staged_encode_as_subject_py(jar, tmp_path, monkeypatch, tiled):
    """A model bundle whose encoder is split into 3 stage programs (encode_tiling.stages, compile --encode-stages), on
    4 tile shapes or untiled: ModelBundle.writeCache writes subject.py write_cache's cache for it byte for byte
    (forward.py x0 through encode_shape: each stage's program on every tile of a shape), resumably; per sample, per
    tile shape, per stage the stage program is loaded once and released before the next one loads (one encode
    program at a time), and released before embed runs; the staged x0 is not the unstaged stand-in's."""
    from ditskip_edge.runtime.bundle import CACHE_DIR, Bundle
    from ditskip_edge.runtime.subject import check_programs
    root = tmp_path / "model"
    fields, tiling, shapes, sched, codec, cond = tiled_model_bundle(root, stages=3, tiled=tiled)
    digest = write_manifest(root, fields)
    check_programs(Bundle.open(root))                                          # the Python runtime takes it
    events = tmp_path / "events.txt"
    spec, photos, names, shas = model_stage_input(tmp_path, root, 29, events=events)
    python_stage(monkeypatch, tmp_path / "py", (4, 1, 2), codec, shapes, sched, photos, names, cond,
                 fields["model"], 64 << 20, run=stage_run(digest, names, shas), tiling=tiling)
    assert kotlin(jar, "model", spec, tmp_path / "kt", 1).stdout.split() == ["resumed", "0", "computed", "1"]
    assert events.read_text().splitlines() == staged_events(tiled, 3)
    assert kotlin(jar, "model", spec, tmp_path / "kt").stdout.split() == ["resumed", "1", "computed", "3"]
    assert_same_cache(tmp_path / "py" / CACHE_DIR, tmp_path / "kt" / CACHE_DIR)
    one = staged_events(tiled, 3)
    assert len(one) == (24 if tiled else 6) and events.read_text().splitlines() == one * 3     # 3 samples
    # the stages ran: the unstaged stand-in on the same crop gives another x0
    fwd = standin_forward((4, 1, 2), 16, tiling)
    plain = standin_forward((4, 1, 2), 16, {k: v for k, v in tiling.items() if k != "stages"})
    assert np.abs(fwd.x0(photos[0], (0, 0, 16)) - plain.x0(photos[0], (0, 0, 16))).max() > 1e-3
    assert fwd.x0(photos[0], (0, 0, 16)).shape == (1, C, 8, 8)


def kotlin_refusal(jar: Path, tmp: Path, root: Path) -> str:
    """ModelBundle.writeCache's refusal of the model bundle at `root` (SubjectCheck.kt model), before any work: its
    one line."""
    spec, *_ = model_stage_input(tmp, root, 1)
    res = kotlin(jar, "model", spec, tmp / "kt", ok=False)
    assert res.returncode != 0 and not (tmp / "kt").exists()
    line = next(ln for ln in res.stderr.splitlines() if "IllegalArgumentException" in ln)
    msg = line.split("IllegalArgumentException: ", 1)[1]
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize("case", ["one stage", "five stages", "untiled stage", "unchained"])
def test_a_staged_model_bundle_missing_or_not_chaining_a_stage_is_refused_in_one_line(jar, tmp_path, case):
    """A staged model bundle missing a stage program of its chains is refused before any work in one line naming it
    (forward.py subject_programs' message, at most 4 names: five missing stages name the first 4 in chain order);
    one whose stage does not take what the stage before gives is refused with subject.py check_programs' line."""
    from ditskip_edge.runtime.bundle import Bundle
    from ditskip_edge.runtime.errors import BundleError
    from ditskip_edge.runtime.subject import check_programs
    root = tmp_path / "model"
    drop = {"one stage": ("encode.8x4.s1",), "untiled stage": ("encode.s2",), "unchained": (),
            "five stages": ("encode.8x8.s1", "encode.8x8.s2", "encode.8x4.s1", "encode.4x8.s1", "encode.4x4.s1")}[case]
    fields, *_ = tiled_model_bundle(root, drop=drop, stages=3, tiled=case != "untiled stage")
    if case == "unchained":
        stage = next(p for p in fields["programs"] if p["name"] == "encode.8x4.s1")
        stage["inputs"][0]["shape"] = [1, 12, 4, 3]                               # not what encode.8x4.s0 gives
    write_manifest(root, fields)
    with pytest.raises(BundleError) as py_err:                                  # the Python runtime's refusal
        check_programs(Bundle.open(root))
    msg = kotlin_refusal(jar, tmp_path, root)
    assert msg == str(py_err.value), (msg, str(py_err.value))
    assert {"one stage": "no encode.8x4.s1 program: this bundle cannot run the subject stage",
            "untiled stage": "no encode.s2 program:",
            "five stages": "no encode.8x8.s1, encode.8x8.s2, encode.8x4.s1, encode.4x8.s1 program:",
            "unchained": "encoder stage encode_8x4_s1.pte takes [1, 12, 4, 3], encode_8x4_s0.pte gives [1, 12, 4, 2]: "
                         "the stages are not one encoder's"}[case] in msg


def test_the_swift_tiled_encode_follows_the_kotlin_port():
    """Swift cannot be compiled here: its tiled encode (Tiling.swift, SubjectStage.swift, ModelBundle.swift) is
    checked against the Kotlin port run above on the lines that carry the arithmetic, the order and the checks."""
    sw = {n: (ROOT / "ios_demo/DitSkipDemo" / n).read_text() for n in ("Tiling.swift", "SubjectStage.swift",
                                                                      "ModelBundle.swift")}
    kt = {n: (KT_DIR / n).read_text() for n in ("Tiling.kt", "SubjectStage.kt", "ModelBundle.kt")}
    pairs = [("Tiling", "(tilePx - stridePx) / scale, stridePx / scale, h / scale", "blend: (tilePx - stridePx) / scale,"),
             ("Tiling", "stridePx / scale, h / scale", "keep: stridePx / scale, outH: h / scale, outW: w / scale"),
             ("Tiling", "(tile - stride) * scale, stride * scale, h * scale, w * scale", "blend: (tile - stride) * scale,"),
             ("Tiling", "stride * scale, h * scale", "keep: stride * scale, outH: h * scale, outW: w * scale, byShape: false"),
             ("Tiling", "byShape: Boolean = true", "byShape: Bool = true"),
             ("Tiling", "x[(ch * h + i + y) * w + j + z]", None),
             ("Tiling", "o.data[(ch * outH + y0 + y) * outW + x0 + z] = t.data[(ch * t.h + y) * t.w + z]",
              "out!.data[(ch * outH + y0 + y) * outW + x0 + z] = t.data[(ch * t.h + y) * t.w + z]"),
             ("Tiling", "val ph = minOf(keep, t.h, outH - y0); val pw = minOf(keep, t.w, outW - x0)",
              "let ph = min(keep, t.h, outH - y0), pw = min(keep, t.w, outW - x0)"),
             ("Tiling", "val shape = Pair(minOf(tile, h - i), minOf(tile, w - j))",
              "let shape = [min(tile, h - i), min(tile, w - j)]"),
             ("Tiling", "if (above.isNotEmpty()) blendRows(above[k], t, blend)",
              "if !above.isEmpty { blendRows(above[k], &t, blend) }"),
             ("SubjectStage", "runner.release()", "defer { runner.release() }"),
             ("SubjectStage", "val chain = tiling.chainOf(key)", "let chain = tiling.chainOf(Tiling.shapeKey(th, tw))"),
             ("SubjectStage", "SubjectStage.noProgramsMessage(", "SubjectStage.noProgramsMessage("),
             ("SubjectStage", "if (isTile(program.name)) { held = program; heldModule = module }",
              "if EtForwardRunner.isTile(program.name) { held = program; heldModule = module }"),
             ("SubjectStage", "this bundle cannot run the subject stage (compile it \" +",
              "this bundle cannot run the subject stage (compile it without --images: a model bundle)"),
             ("ModelBundle", "Tiling.tileShapes(sMin.toInt(), sMin.toInt(), tiling.tilePx, tiling.stridePx)",
              "Tiling.tileShapes(sMin, sMin, tile: tiling.tilePx, stride: tiling.stridePx)"),
             ("ModelBundle", "th * x0Shape[2] / sMin, tw * x0Shape[3] / sMin",
              "th * x0Shape[2] / sMin, tw * x0Shape[3] / sMin"),
             ("ModelBundle", "cond, stopAfter, encodeTiling, progress)", "encodeTiling: try encodeTiling(), progress")]
    for name, k_line, s_line in pairs:
        assert k_line in kt[f"{name}.kt"], (name, k_line)
        assert (s_line or k_line) in sw[f"{name}.swift"], (name, s_line or k_line)
    assert "try checkEncodePrograms()" in sw["ModelBundle.swift"] and "checkPrograms(cond)" in kt["ModelBundle.kt"]


def test_the_swift_staged_encode_follows_the_kotlin_port():
    """Swift cannot be compiled here: its staged encode (encode_tiling.stages; Tiling.swift encodeTiledShapes,
    SubjectStage.swift encodeShape and EncodeTiling, ModelBundle.swift and CacheFreeEntries.swift reading and checking
    the chains) is checked against the Kotlin port run above on the lines that carry the stage names, the shape-batched
    order, the release after each stage and the refusals' wording."""
    names = ("Tiling", "SubjectStage", "ModelBundle", "CacheFreeEntries")
    sw = {n: (ROOT / "ios_demo/DitSkipDemo" / f"{n}.swift").read_text() for n in names}
    kt = {n: (KT_DIR / f"{n}.kt").read_text() for n in names}
    pairs = [("Tiling", "val results = runShape(parts, shape.first, shape.second)",
              "let results = try runShape(parts, shape[0], shape[1])"),
             ("Tiling", "at.add(Pair(r, k)); parts.add(cut(x, c, h, w, i, j, tile).first)",
              "at.append([r, k]); parts.append(cut(x, c: c, h: h, w: w, i, j, tile).0)"),
             ("Tiling", "for ((n, rk) in at.withIndex()) done[rk] = results[n]",
              "for (n, rk) in at.enumerated() { done[rk] = results[n] }"),
             ("Tiling", "t = runShape(listOf(part), th, tw).single()", "t = try runShape([part], th, tw)[0]"),
             ("Tiling", "parts.map { runTile(it, th, tw) }", "try parts.map { try runTile($0, th, tw) }"),
             ("Tiling", "(tilePx - stridePx) / scale, stridePx / scale, h / scale,\n                       w / scale, true, encodeShape)",
              "blend: (tilePx - stridePx) / scale,\n                           keep: stridePx / scale, outH: h / scale, outW: w / scale, byShape: true, encodeShape)"),
             ("SubjectStage", 'if (stages <= 1) listOf(name) else (0 until stages).map { "$name.s$it" }',
              'stages <= 1 ? [name] : (0..<stages).map { "\\(name).s\\($0)" }'),
             ("SubjectStage", "val input = if (k == 0) PATCH_INPUT else FEATURES",
              "let input = k == 0 ? patchInput : featuresInput"),
             ("SubjectStage", "val output = if (k == chain.size - 1) BundleContract.X0_KEY else FEATURES",
              "let output = k == chain.count - 1 ? BundleContract.x0Key : featuresInput"),
             ("SubjectStage", "runner.release()                                              // this stage done",
              "runner.release()                                             // this stage done"),
             ("SubjectStage", "encodeShape(runner, t, listOf(patch.data), sMin, sMin)[0]",
              "encodeShape(runner, tiling: t, [patch.data], sMin, sMin)[0]"),
             ("SubjectStage", "Tiling.encodeTiledShapes(patch.data, sMin, sMin, t.tilePx, t.stridePx, t.scale)",
              "Tiling.encodeTiledShapes(patch.data, h: sMin, w: sMin, tilePx: t.tilePx, stridePx: t.stridePx,"),
             ("SubjectStage", 'const val FEATURES = "features"', 'static let featuresInput = "features"'),
             ("SubjectStage", "missing.take(4).joinToString(\", \")", "missing.prefix(4).joined(separator: \", \")"),
             ("SubjectStage", "encoders.flatMap { EncodeTiling.stageNames(it, stages) }",
              "encoders.flatMap({ EncodeTiling.stageNames($0, stages) })"),
             ("ModelBundle", "int(m, BundleContract.ENCODE_TILING_STAGES_FIELD) else 1",
              "== nil ? 1 : int(m, BundleContract.encodeTilingStagesField)"),
             ("ModelBundle", "tiling.allPrograms() + BundleContract.ET_EMBED", "tiling.allPrograms() + [BundleContract.etEmbed]"),
             ("ModelBundle", 'specs(last, "outputs")[BundleContract.X0_KEY] == wantX0',
              'shape(last, "outputs", BundleContract.x0Key) == wantX0'),
             ("ModelBundle", "val gives = specs(before, \"outputs\").values.firstOrNull(); val takes = specs(stage, \"inputs\").values.firstOrNull()",
              "let gives = firstShape(before, \"outputs\"), takes = firstShape(stage, \"inputs\")"),
             ("ModelBundle", "encoder stage ${stage[\"path\"]} takes $takes, ${before[\"path\"]} gives $gives: the stages are not one encoder's",
              "encoder stage \\(stage[\"path\"]?.stringValue ?? \"\") takes \\(takes ?? []), \\(before[\"path\"]?.stringValue ?? \"\") gives \\(gives ?? []): the stages are not one encoder's"),
             ("CacheFreeEntries", "rec.optInt(BundleContract.ENCODE_TILING_STAGES_FIELD, 1)",
              "rec[BundleContract.encodeTilingStagesField] as? Int ?? 1"),
             ("CacheFreeEntries", "tiling.allPrograms() + BundleContract.ET_EMBED", "tiling.allPrograms() + [BundleContract.etEmbed]")]
    for name, k_line, s_line in pairs:
        assert k_line in kt[name], (name, k_line)
        assert s_line in sw[name], (name, s_line)
    # the Python runtime's wording and naming, which both follow
    from ditskip_edge.runtime.contract import encode_stage_names
    assert encode_stage_names("encode.8x4", 3) == ["encode.8x4.s0", "encode.8x4.s1", "encode.8x4.s2"]
    assert encode_stage_names("encode", 1) == ["encode"]
    assert "the stages are not one encoder's" in (ROOT / "ditskip_edge/runtime/subject.py").read_text()
    assert "missing[:4]" in (ROOT / "ditskip_edge/runtime/forward.py").read_text()
