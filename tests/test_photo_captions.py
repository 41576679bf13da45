"""Per-photo captions (compile --photo-captions: `<photo>.txt` beside each photo): each sample is cached and trained
with the caption of the photo it was cut from, by the compiler, every runtime and the CLI's checks."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import PHOTOS, compile_tiny, train_device, train_eager
from compiler.cli import main

CAPTIONS = {"toy_0": "a photo of sks toy on a table", "toy_1": "a photo of sks toy in the grass",
            "toy_2": "a photo of sks toy on snow"}


def captioned_photos(folder: Path, captions: dict[str, str] = CAPTIONS) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for stem, caption in captions.items():
        shutil.copy(PHOTOS / f"{stem}.png", folder / f"{stem}.png")
        (folder / f"{stem}.txt").write_text(caption + "\n")
    return folder


def one_caption(folder: Path, caption: str) -> Path:
    """The same photos with no caption files (a bundle trained on `caption` alone)."""
    folder.mkdir(parents=True, exist_ok=True)
    for stem in CAPTIONS:
        shutil.copy(PHOTOS / f"{stem}.png", folder / f"{stem}.png")
    return folder


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict:
    """flux-tiny, the same 3 photos and schedule: one bundle with per-photo captions (and the ExecuTorch program),
    and per caption one bundle trained with that caption for every photo."""
    from export.executorch_stage import ExecutorchPrograms
    tmp = tmp_path_factory.mktemp("captions")
    out = {"per_photo": compile_tiny(tmp / "per_photo", images=captioned_photos(tmp / "photos"), photo_captions=True,
                                     steps=6, cache_codec="fp32", programs=[ExecutorchPrograms(("fp32",))])}
    for i, caption in enumerate(CAPTIONS.values()):
        out[i] = compile_tiny(tmp / f"shared_{i}", images=one_caption(tmp / f"photos_{i}", caption), prompt=caption,
                              steps=6, cache_codec="fp32")
    return out


def test_the_bundle_stores_one_conditioning_row_per_photo_in_photo_order(bundles):
    from safetensors.numpy import load_file

    from ditskip_edge.runtime.bundle import Bundle
    b = Bundle.open(bundles["per_photo"])
    assert b.text_rows == "per_photo"
    assert b.field("subject_stage", "photo_captions") == list(CAPTIONS.values())
    rows = b.text_conditioning()
    for i in range(len(CAPTIONS)):
        shared = load_file(str(bundles[i] / "subject/text_conditioning.safetensors"))
        assert sorted(shared) == sorted(rows)
        for k, v in shared.items():
            assert v.shape[0] == 1 and rows[k].shape[0] == len(CAPTIONS)
            assert np.array_equal(rows[k][i:i + 1], v)
            assert np.array_equal(b.text_conditioning(i)[k], v)
    assert Bundle.open(bundles[0]).text_rows == "shared"


def test_each_samples_residuals_and_step_inputs_are_those_of_its_own_photos_caption(bundles):
    """Sample s of the per-photo bundle is cached and fed exactly as the bundle trained on caption s.photo alone
    caches and feeds it (same photos, schedule and noise); the samples cover every photo, and the captions differ
    in what they give."""
    from ditskip_edge.runtime.bundle import Bundle
    from ditskip_edge.runtime.inputs import StepInputs
    b = Bundle.open(bundles["per_photo"])
    shared = {i: Bundle.open(bundles[i]) for i in range(len(CAPTIONS))}
    got, ref = StepInputs(b), {i: StepInputs(s) for i, s in shared.items()}
    photos = set()
    for s in b.schedule.samples:
        photos.add(s.photo)
        want = ref[s.photo](shared[s.photo].schedule.samples[s.index])
        mine = got(s)
        assert sorted(mine) == sorted(want)
        for k in want:
            assert np.array_equal(mine[k], want[k]), (s.index, s.photo, k)
        other = ref[(s.photo + 1) % len(CAPTIONS)](s)
        assert any(not np.array_equal(mine[k], other[k]) for k in mine if k.startswith(("cond.", "entry.")))
    assert photos == set(range(len(CAPTIONS)))


def test_the_executorch_runtime_trains_a_per_photo_bundle_as_the_eager_one(bundles, tmp_path):
    """The exported program takes one caption row per sample ([1, ...], as a one-prompt bundle): its losses follow
    the eager runtime's on the same per-photo bundle."""
    eager = train_eager(bundles["per_photo"], tmp_path / "eager", resume=False)
    et = train_device(bundles["per_photo"], "executorch", tmp_path / "et", resume=False)
    np.testing.assert_allclose(et["losses"], eager["losses"], rtol=1e-4)


def _compile(capsys, images: Path, out: Path, *extra) -> tuple[int, str]:
    code = main(["compile", "--images", str(images), "--prompt", "a photo of sks toy", "--out", str(out),
                 "--skip-front", "1", "--skip-back", "1", "--steps", "2", *extra])
    return code, capsys.readouterr().err


def test_caption_files_are_refused_in_one_line_unless_asked_for_and_then_needed_for_every_photo(tmp_path, capsys):
    photos = captioned_photos(tmp_path / "photos")
    code, err = _compile(capsys, photos, tmp_path / "b1")
    assert code != 0 and "--photo-captions" in err and "Traceback" not in err and not (tmp_path / "b1").exists()
    (photos / "toy_1.txt").unlink()
    code, err = _compile(capsys, photos, tmp_path / "b2", "--photo-captions")
    assert code != 0 and "toy_1.png" in err and "toy_1.txt" in err and not (tmp_path / "b2").exists()
    (photos / "toy_1.txt").write_text("  \n")
    code, err = _compile(capsys, photos, tmp_path / "b3", "--photo-captions")
    assert code != 0 and "toy_1.txt" in err and "empty" in err
    (photos / "toy_1.txt").write_text("a photo of sks toy")
    (photos / "toy_9.txt").write_text("a caption for no photo")
    code, err = _compile(capsys, photos, tmp_path / "b4", "--photo-captions")
    assert code != 0 and "toy_9.txt" in err and "names no photo" in err
    (photos / "toy_9.txt").unlink()
    (photos / "toy_2.txt").write_bytes(b"\xff\xfe caption")
    code, err = _compile(capsys, photos, tmp_path / "b5", "--photo-captions")
    assert code != 0 and "toy_2.txt" in err and "UTF-8" in err
    (photos / "toy_2.txt").write_text("a photo of sks toy on a red table")    # 9 words: flux-tiny's encoder reads 8
    code, err = _compile(capsys, photos, tmp_path / "b6", "--photo-captions")
    assert code != 0 and "toy_2.txt" in err and "has 9 words" in err and "reads 8" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "b6").exists()
    code = main(["compile", "--prompt", "a photo of sks toy", "--out", str(tmp_path / "m"), "--skip-front", "1",
                 "--skip-back", "1", "--photo-captions"])
    err = capsys.readouterr().err
    assert code != 0 and "--images" in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "m").exists()


def test_select_reads_a_captioned_folder_as_its_photos_alone(tmp_path, capsys):
    """`select --images` on the folder compile --photo-captions takes: the caption files are skipped, and the scores
    are those of the same photos without them."""
    import json
    docs = []
    for folder in (captioned_photos(tmp_path / "captioned"), one_caption(tmp_path / "bare", "")):
        assert main(["select", "--model", "flux-tiny", "--images", str(folder), "--prompt", "a photo of sks toy",
                     "--budget", "2", "--steps", "2", "--method", "proxy", "--json"]) == 0
        docs.append(json.loads(capsys.readouterr().out))
    assert docs[0]["results"] == docs[1]["results"]


def test_a_bundle_whose_caption_rows_do_not_match_its_photos_is_refused_before_training(bundles, tmp_path):
    """The conditioning's rows must be one per photo (per_photo) or one (shared): a per-photo bundle whose manifest
    says shared (re-signed, so only this check can catch it) is refused in one line before any step."""
    from ditskip_edge.runtime.bundle import MANIFEST, Bundle, read_manifest, write_manifest
    from ditskip_edge.runtime.errors import BundleError
    from ditskip_edge.runtime.inputs import StepInputs
    copy = tmp_path / "b"
    shutil.copytree(bundles["per_photo"], copy)
    m = read_manifest(copy, verify=False)
    m["subject_stage"]["text_rows"] = "shared"
    write_manifest(copy / MANIFEST, m)
    with pytest.raises(BundleError) as err:
        StepInputs(Bundle.open(copy))
    assert "expected 1 row(s) (shared)" in str(err.value) and "\n" not in str(err.value)
    StepInputs(Bundle.open(bundles["per_photo"]))           # the bundle as compiled opens
