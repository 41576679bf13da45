"""One bundle contract (docs/bundle_contract.json) for the compiler, the Python runtime and the native core.

Properties protected:
- the contract's cache modes, text rows and text kinds are the ones the Python runtime writes and reads;
- a real bundle (ExecuTorch and ORT programs in one `programs` list, compiled here) has every manifest field, schedule
  field, cache format, program field, method, input order, shape and dtype the contract names; its manifest digest,
  checkpoint and checkpoint identity follow the contract's rules;
- the contract's schedule test vectors and RNG constants and check values are runtime/schedule.py's and rng.py's
  (what another implementation, such as the native core, reproduces).
The demo apps hold no runtime code any more (they bind the native core: tests/test_app_bindings.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = json.loads((ROOT / "docs" / "bundle_contract.json").read_text())


def test_the_contracts_cache_modes_are_the_runtimes():
    """A cache mode the runtime writes is one the contract names, and no other."""
    from device_tests.gen_contract import load_contract
    from ditskip_edge.runtime.bundle import CACHE_MODES
    modes = load_contract()["bundle"]["cache_modes"]
    assert sorted(v for k, v in modes.items() if k not in ("field", "rule")) == sorted(CACHE_MODES)


def test_the_contracts_text_rows_are_the_runtimes():
    """The text conditioning's row layouts (one prompt, per-photo captions) and their manifest field are the ones
    runtime/bundle.py writes and reads."""
    from device_tests.gen_contract import load_contract
    from ditskip_edge.runtime.bundle import PER_PHOTO_TEXT, SHARED_TEXT, TEXT_ROWS
    tc = load_contract()["text_conditioning"]
    assert (tc["shared"], tc["per_photo"]) == (SHARED_TEXT, PER_PHOTO_TEXT) and TEXT_ROWS == (SHARED_TEXT, PER_PHOTO_TEXT)
    assert tc["rows_field"] == "subject_stage.text_rows" and tc["photo_captions_field"] == "subject_stage.photo_captions"


def test_the_contracts_text_kinds_are_the_runtimes():
    """Every generation text kind the runtime reads is in the contract, and every kind a device takes
    (app_text_kinds) is one the runtime reads."""
    from device_tests.gen_contract import load_contract
    from ditskip_edge.runtime.contract import TEXT_KINDS
    gen = load_contract()["generation"]
    assert sorted(gen["text_kinds"]) == sorted(TEXT_KINDS)
    assert set(gen["app_text_kinds"]) <= set(TEXT_KINDS)


# ---------------------------------------------------------------- real bundles against the contract

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
        with open(cdir / e["shard"], "rb") as f:                 # a device's check: the slice's SHA-256
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
    m = re.match(b["manifest_digest"]["first_line_regex"].encode(), raw)           # a device's check, as written
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
    rule computed from the manifest alone (what another runtime computes)."""
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


# ---------------------------------------------------------------- the portable schedule

def test_schedule_test_vectors_are_the_runtime_schedule():
    """The contract's schedule test vectors (what another runtime reproduces) are what runtime/schedule.py
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


# ---------------------------------------------------------------- RNG constants

def test_the_contracts_rng_constants_and_check_values_are_rng_py():
    from ditskip_edge.runtime import rng
    assert int(rng._GOLDEN) == int(CONTRACT["rng"]["golden_gamma"], 16)
    assert int(rng._M1) == int(CONTRACT["rng"]["mix1"], 16) and int(rng._M2) == int(CONTRACT["rng"]["mix2"], 16)
    got = rng.normal(CONTRACT["rng"]["check_seed"], (len(CONTRACT["rng"]["check_first_normals"]),))
    assert np.array_equal(got, np.array(CONTRACT["rng"]["check_first_normals"], np.float32))


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
