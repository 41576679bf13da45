"""Edge input: every class of out-of-range option or unusable photo is refused before any work, with one line on
stderr and exit code 2, and nothing is left behind."""

from __future__ import annotations

import pytest
from PIL import Image

from conftest import PHOTOS
from compiler.cli import main


def _compile(out, images=PHOTOS, *extra):
    return ["compile", "--images", str(images), "--prompt", "a photo of sks toy", "--out", str(out),
            "--skip-front", "1", "--skip-back", "1", "--steps", "2", *extra]


def _refused(capsys, tmp_path, argv, *expect: str) -> None:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (argv, err)
    assert all(e in err for e in expect), err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert out == ""
    leftovers = [p.name for p in tmp_path.iterdir() if p.name == "b" or p.name.startswith(".b.tmp")]
    assert not leftovers, leftovers


OPTION_CASES = {
    "zero steps": (["--steps", "0"], "steps must be an integer in [1, 100000]"),
    "huge steps": (["--steps", "1000000000"], "steps must be an integer in [1, 100000]"),
    "too many samples": (["--steps", "100000", "--grad-accum", "20"], "at most 1000000"),
    "zero grad-accum": (["--grad-accum", "0"], "grad-accum must be an integer in [1, 256]"),
    "huge grad-accum": (["--grad-accum", "1000"], "grad-accum must be an integer in [1, 256]"),
    "zero rank": (["--rank", "0"], "rank must be an integer in [1, 1024]"),
    "huge rank": (["--rank", "100000"], "rank must be an integer in [1, 1024]"),
    "negative alpha": (["--alpha", "-1"], "alpha must be a positive number"),
    "zero lr": (["--lr", "0"], "lr must be in (0, 1.0]"),
    "huge lr": (["--lr", "5"], "lr must be in (0, 1.0]"),
    "nan lr": (["--lr", "nan"], "lr must be in (0, 1.0]"),
    "negative seed": (["--seed", "-1"], "seed must be an integer"),
    "crop-min off the multiple": (["--crop-min", "100"], "crop-min 100 px must be a multiple of 16"),
    "crop-max below crop-min": (["--crop-max", "64"], "crop-max 64 px must be in [crop-min 128"),
    "unknown runtime": (["--runtime", "tflite"], "--runtime tflite: expected one of executorch, ort"),
    "unknown precision": (["--runtime", "ort", "--precision", "int3"], "--precision int3"),
    "precision without a runtime": (["--precision", "int4"], "--precision sets the device programs"),
    "xnnpack without executorch": (["--xnnpack"], "--xnnpack lowers the ExecuTorch programs"),
    "backend without executorch": (["--backend", "portable"], "--backend sets the ExecuTorch training program"),
    "xnnpack and backend portable": (["--runtime", "executorch", "--xnnpack", "--backend", "portable"],
                                     "--xnnpack and --backend portable"),
    "unknown codec": (["--cache-codec", "int3"], "unknown cache codec 'int3'"),
    "too many blocks skipped": (["--skip-back", "5"], "leaves no kept block"),
}


@pytest.mark.parametrize("case", list(OPTION_CASES))
def test_out_of_range_options_are_refused_in_one_line(case, tmp_path, capsys):
    extra, expect = OPTION_CASES[case]
    _refused(capsys, tmp_path, _compile(tmp_path / "b", PHOTOS, *extra), expect)


def test_a_skip_ratio_outside_zero_one_and_a_ratio_with_a_split_are_refused(tmp_path, capsys):
    base = ["compile", "--images", str(PHOTOS), "--prompt", "a photo of sks toy", "--out", str(tmp_path / "b")]
    _refused(capsys, tmp_path, base + ["--skip-ratio", "1.5"], "skip ratio must be in (0, 1)")
    _refused(capsys, tmp_path, base + ["--skip-ratio", "0.5", "--skip-front", "1"], "not both")
    _refused(capsys, tmp_path, base, "give a skip plan")


def test_empty_and_overlong_prompts_are_refused(tmp_path, capsys):
    argv = _compile(tmp_path / "b")
    argv[argv.index("--prompt") + 1] = "   "
    _refused(capsys, tmp_path, argv, "prompt is empty")
    argv[argv.index("--prompt") + 1] = "sks " * 1000
    _refused(capsys, tmp_path, argv, "at most 2000")


@pytest.mark.parametrize("size, expect", [((1, 1), "short side must be at least 64 px"),
                                          ((20000, 10), "short side must be at least 64 px"),
                                          ((3000, 500), "aspect ratio 6.0:1 is beyond 4:1")])
def test_unusable_photo_sizes_are_refused(size, expect, tmp_path, capsys):
    photos = tmp_path / "photos"
    photos.mkdir()
    Image.new("RGB", (300, 300), (200, 30, 30)).save(photos / "ok.png")
    Image.new("RGB", size, (30, 30, 200)).save(photos / "odd.png")
    _refused(capsys, tmp_path, _compile(tmp_path / "b", photos), f"photo odd.png is {size[0]}x{size[1]} px", expect)


def test_too_many_photos_are_refused_before_decoding(tmp_path, capsys):
    photos = tmp_path / "photos"
    photos.mkdir()
    for i in range(201):
        (photos / f"{i:03d}.png").write_bytes(b"never decoded")
    _refused(capsys, tmp_path, _compile(tmp_path / "b", photos), "at most 200 photos")


def test_a_cache_larger_than_the_free_disk_is_refused_and_nothing_is_left(tmp_path, capsys, monkeypatch):
    import shutil
    from collections import namedtuple
    import compiler.compile as c
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(c.shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 1000, 1000))
    _refused(capsys, tmp_path, _compile(tmp_path / "b"), "the residual cache needs")
    assert shutil.disk_usage is not None


@pytest.mark.parametrize("extra, expect", [(["--steps", "0"], "--steps 0: expected 1 to 6"),
                                           (["--steps", "7"], "--steps 7: expected 1 to 6"),
                                           (["--checkpoint-every", "0"], "--checkpoint-every 0: expected >= 1"),
                                           (["--precision", "int8"], "choose a device program")])
def test_train_refuses_out_of_range_options(flux_bundle, tmp_path, capsys, extra, expect):
    code = main(["train", str(flux_bundle), "--run-dir", str(tmp_path / "r"), *extra])
    err = capsys.readouterr().err
    assert code == 2 and expect in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "r" / "checkpoint.safetensors").exists()


def test_compile_exports_the_xnnpack_training_program_unless_told_portable():
    """issue 57: the default is the fast program (ditskip_edge/backends.py); --xnnpack stays an accepted alias."""
    from compiler.commands.compile import program_stages
    from ditskip_edge.backends import DEFAULT_TRAIN_BACKEND
    assert DEFAULT_TRAIN_BACKEND == "xnnpack"
    assert program_stages(["executorch"], "int8", None)[0].backend == "xnnpack"
    assert program_stages(["executorch"], "int8", "portable")[0].backend == "portable"
    assert program_stages(["executorch"], "int8", None, xnnpack=True)[0].backend == "xnnpack"
