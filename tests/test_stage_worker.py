"""compile --jobs 2: the generation programs exported by a second process beside the subject stage."""

from __future__ import annotations

import json
import multiprocessing as mp

import pytest

from conftest import compile_tiny


def _manifest(bundle) -> dict:
    """The manifest less the subject stage's wall seconds (and the manifest's own hash, which covers them): the only
    fields two compiles of one request may differ in."""
    m = json.loads((bundle / "manifest.json").read_text())
    m["subject_stage"].pop("seconds")
    m.pop("manifest_sha256", None)
    return m


@pytest.fixture
def one_torch_thread():
    """jobs 2 computes the residual cache at half the threads, and a pipeline folder's residuals round differently
    at 1 and 2 threads (measured: the cache shard's SHA-256 differs with jobs 1 alone): compare at one thread."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_two_processes_write_the_same_bundle_as_one(tmp_path, monkeypatch, one_torch_thread):
    """A local FLUX pipeline folder (its own CLIP + T5 programs, every generation program in the worker, which starts
    before the model loads, so its start-up overlaps the load and the selection): the one-process bundle."""
    import compiler.compile as compile_mod
    from export.generation_stage import GenerationPrograms
    from tiny_pipeline import save_tiny_flux_pipeline
    folder = str(save_tiny_flux_pipeline(tmp_path / "pipe"))
    one = compile_tiny(tmp_path / "one", folder, steps=2, programs=[GenerationPrograms(("fp32",), steps=3)])
    worker_alive_at_load = []
    build = compile_mod.build_transformer
    monkeypatch.setattr(compile_mod, "build_transformer",
                        lambda *a, **k: worker_alive_at_load.append(bool(mp.active_children())) or build(*a, **k))
    two = compile_tiny(tmp_path / "two", folder, steps=2, programs=[GenerationPrograms(("fp32",), steps=3)],
                       jobs=2)
    assert worker_alive_at_load == [True]
    m1, m2 = _manifest(one), _manifest(two)
    assert {"text_encoder", "text_encoder_2"} <= {p["name"] for p in m2["programs"]}
    assert any(p["path"].endswith("block_double.pte") for p in m2["programs"])
    assert m2["files"] == m1["files"]            # every file, programs included, byte for byte (SHA-256)
    assert m2 == m1
    assert not mp.active_children()


def test_a_failing_subject_stage_stops_the_worker_and_leaves_nothing(tmp_path, monkeypatch):
    import compiler.compile as compile_mod
    from export.generation_stage import GenerationPrograms

    def broken(*a, **k):
        raise RuntimeError("disk full")
    monkeypatch.setattr(compile_mod, "compile_subject_stage", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        compile_tiny(tmp_path / "b", "flux-tiny", steps=2, programs=[GenerationPrograms(("fp32",), steps=3)], jobs=2)
    assert not mp.active_children()              # the worker was stopped, not left running
    assert list(tmp_path.iterdir()) == []        # no bundle, no staging folder


def test_jobs_other_than_one_or_two_is_refused_before_any_work(tmp_path):
    from ditskip_edge.runtime.errors import UserError
    with pytest.raises(UserError, match="--jobs 3"):
        compile_tiny(tmp_path / "b", "flux-tiny", steps=2, jobs=3)
    assert not (tmp_path / "b").exists()


def test_merge_takes_the_workers_new_fields_and_appends_its_programs():
    from compiler.stage_worker import merge_manifest
    sent = {"model": {"name": "m"}, "programs": [{"path": "a"}]}
    target = {"model": {"name": "m"}, "programs": [{"path": "a"}, {"path": "train"}], "subject_stage": {"n": 1}}
    worker = {"model": {"name": "m"}, "programs": [{"path": "a"}, {"path": "gen"}], "generation": {"px": 64}}
    merge_manifest(target, sent, worker)
    assert [p["path"] for p in target["programs"]] == ["a", "train", "gen"]
    assert target["generation"] == {"px": 64} and target["subject_stage"] == {"n": 1}
