"""The host's program cache (export/program_cache.py): lowered programs kept between compiles.

Properties protected:
- the key follows what a program is made of: the same for a module built again alike, another key for one changed
  weight, another input shape, another op with the same weights, or other export options;
- a second export of the same module reads the stored program: the lowering does not run, and the bytes and the
  memory record are the first export's (inference and forward programs here; the training step in
  test_subject_stage.py's second compile of a model bundle);
- a stored file whose bytes changed is never used: the entry is removed and the program exported again; a half-written
  entry (no record, or only a temporary folder) is not read;
- the cache stays within its cap, the entries used longest ago going first, and a program above a quarter of the cap
  is not stored;
- "off" writes nothing, a cache that cannot be written leaves the export working (a warning), and a cap that is not
  a number of bytes is a one-line refusal;
- `ditskip-edge program-cache` reports the entries and bytes per kind of program and `--clear` empties the folder.
"""

from __future__ import annotations

import logging

import pytest
import torch

from export import program_cache as pc
from ditskip_edge.runtime.errors import UserError
from export.program_cache import ProgramCache, program_key


def _module(act=torch.nn.ReLU, seed=0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), act(), torch.nn.Linear(16, 4)).eval()


def _traced(module, shape=(3, 8)):
    return torch.export.export(module, (torch.zeros(shape),), strict=False)


def test_the_key_follows_the_graph_the_weights_the_shapes_and_the_options():
    key = program_key("inference", _traced(_module()), {"backend": "portable"})
    assert key == program_key("inference", _traced(_module()), {"backend": "portable"})   # built again alike
    changed = _module()
    with torch.no_grad():
        changed[2].bias[3] += 1e-6
    others = [program_key("inference", _traced(changed), {"backend": "portable"}),
              program_key("inference", _traced(_module(), (5, 8)), {"backend": "portable"}),
              program_key("inference", _traced(_module(torch.nn.GELU)), {"backend": "portable"}),
              program_key("inference", _traced(_module()), {"backend": "xnnpack"}),
              program_key("forward", _traced(_module()), {"backend": "portable"})]
    assert len({key, *others}) == 6


def _never(*a, **k):
    raise AssertionError("lowered although the cache holds this program")


def test_a_second_export_reads_the_stored_program_and_lowers_nothing(tmp_path, monkeypatch):
    from export import executorch_preprocess, executorch_subject
    monkeypatch.setenv(pc.ENV_DIR, str(tmp_path / "cache"))
    x = torch.randn(3, 8)
    pte, memory = executorch_preprocess.export_module_program(_module(), (x,), planned_inputs=False, mm_rewrite=True)
    fwd = executorch_subject.export_forward(_module(), (x,), "xnnpack", external_weights=True, matmuls=True)
    monkeypatch.setattr(executorch_preprocess, "_lower_module", _never)
    monkeypatch.setattr(executorch_subject, "_lower_forward", _never)
    assert executorch_preprocess.export_module_program(_module(), (x,), planned_inputs=False,
                                                       mm_rewrite=True) == (pte, memory)
    assert executorch_subject.export_forward(_module(), (x,), "xnnpack", external_weights=True, matmuls=True) == fwd
    assert fwd[1] is not None and memory["pte_bytes"] == len(pte) > 0
    with pytest.raises(AssertionError, match="lowered although"):          # another module: lowered (here: refused)
        executorch_preprocess.export_module_program(_module(seed=1), (x,), planned_inputs=False, mm_rewrite=True)


def _build(n_bytes: int, fill: int = 1):
    return lambda: ({"program.pte": bytes([fill]) * n_bytes}, {"memory": {"pte_bytes": n_bytes}})


def test_a_changed_stored_file_is_removed_and_the_program_exported_again(tmp_path):
    cache = ProgramCache(tmp_path)
    ep = _traced(_module())
    first = cache.program("inference", ep, {}, _build(100))
    key = program_key("inference", ep, {})
    stored = tmp_path / key[:2] / key / "program.pte"
    stored.write_bytes(b"\2" * 100)                          # same size, other bytes
    assert cache.get(key) is None and not stored.parent.exists()
    assert cache.program("inference", ep, {}, _build(100)) == first and cache.misses == 2 and cache.hits == 0
    assert cache.program("inference", ep, {}, _never) == first and cache.hits == 1


def test_a_half_written_entry_is_not_read(tmp_path):
    cache = ProgramCache(tmp_path)
    ep = _traced(_module())
    key = program_key("inference", ep, {})
    (tmp_path / key[:2] / key).mkdir(parents=True)           # files without their record
    (tmp_path / key[:2] / key / "program.pte").write_bytes(b"\1" * 100)
    (tmp_path / pc.TMP_DIR / f"{key}.123.abcd").mkdir(parents=True)
    assert cache.get(key) is None
    assert cache.entries() == []


def test_the_cache_keeps_within_its_cap_dropping_the_entries_used_longest_ago(tmp_path):
    import os
    cache = ProgramCache(tmp_path, cap_bytes=4000)
    keys = [f"{k:064x}" for k in range(4)]
    for i, key in enumerate(keys[:3]):
        cache.put(key, "inference", {"program.pte": b"\1" * 900}, {})
        os.utime(tmp_path / key[:2] / key / pc.ENTRY, (1000 + i, 1000 + i))    # put one after the other
    assert cache.get(keys[0]) is not None                    # the oldest, used now
    cache.put(keys[3], "inference", {"program.pte": b"\1" * 900}, {})
    left = {folder.name for _, _, folder in cache.entries()}
    assert left == {keys[0], keys[2], keys[3]}               # keys[1], used longest ago, went
    assert sum(size for _, size, _ in cache.entries()) <= 4000
    cache.put(f"{9:064x}", "inference", {"program.pte": b"\1" * 1001}, {})   # over a quarter of the cap
    assert f"{9:064x}" not in {folder.name for _, _, folder in cache.entries()}


def test_off_writes_nothing_and_an_unwritable_cache_is_only_a_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(pc.ENV_DIR, "off")
    off = ProgramCache.from_env()
    assert off.root is None and off.program("inference", _traced(_module()), {}, _build(10))[0] == \
        {"program.pte": b"\1" * 10}
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    cache = ProgramCache(blocker / "cache")
    with caplog.at_level(logging.WARNING, logger=pc.__name__):
        files, meta = cache.program("inference", _traced(_module()), {}, _build(10))
    assert files == {"program.pte": b"\1" * 10} and meta == {"memory": {"pte_bytes": 10}}
    assert "cannot write" in caplog.text and blocker.read_text() == "not a folder"
    monkeypatch.setenv(pc.ENV_CAP, "2GiB")
    with pytest.raises(UserError, match="expected a number of bytes"):
        ProgramCache.from_env()


def test_the_program_cache_command_shows_the_entries_per_kind_and_clears_them(tmp_path, monkeypatch, capsys):
    import json as js
    from compiler.cli import main
    monkeypatch.setenv(pc.ENV_DIR, str(tmp_path / "elsewhere"))         # --dir wins over the environment
    cache = ProgramCache(tmp_path / "cache")
    cache.put(f"{1:064x}", "train_step", {"program.pte": b"\1" * 300, "data.w.ptd": b"\2" * 200}, {})
    cache.put(f"{2:064x}", "forward", {"program.pte": b"\1" * 100}, {})
    (tmp_path / "cache" / pc.TMP_DIR / "half").mkdir(parents=True)
    assert main(["program-cache", "--dir", str(tmp_path / "cache"), "--json"]) == 0
    shown = js.loads(capsys.readouterr().out)
    assert shown["entries"] == 2 and shown["by_kind"]["train_step"]["entries"] == 1
    assert shown["bytes"] == sum(k["bytes"] for k in shown["by_kind"].values()) > 600
    assert main(["program-cache", "--dir", str(tmp_path / "cache"), "--clear", "--json"]) == 0
    cleared = js.loads(capsys.readouterr().out)
    assert cleared["removed_entries"] == 2 and cleared["entries"] == 0
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == []
    (tmp_path / "a_file").write_text("x")
    assert main(["program-cache", "--dir", str(tmp_path / "a_file"), "--json"]) == 2
    err = capsys.readouterr().err
    assert "is not a folder" in err and err.count("\n") == 1
