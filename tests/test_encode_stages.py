"""The subject stage's encoder split into its stages (compile --encode-stages; issue 15), so a device holds one stage's
weights at a time (XNNPACK packs a program's convolution weights into anonymous memory when it loads it: SANA's DC-AE
encoder is 532 MiB of them, its largest stage 216 MiB).

Properties protected:
- models/latents.py encoder_stages composes to the encoder exactly (AutoencoderKL and AutoencoderDC, diffusers' own
  output heads), and a pixel-space model is refused with one line;
- runtime/tiling.py run_tiled with a whole-shape callback (run_shape) gives what the per-tile callback gives;
- a staged, tiled model bundle (sana-tiny) writes one chain of stage programs per tile shape, one data file per stage
  shared by the shapes, and the device's residuals equal the host's (diffusers' tiled encode) <= 1e-4 per stream;
- on the device the stages run one program at a time: per sample and tile shape each stage's program is loaded
  once, in order, and dropped before the next one loads; a staged untiled encoder (flux-tiny) gives diffusers' x0;
- a bundle whose stage programs do not chain (another encoder's stage) or lack a stage is refused with one line;
- a stage exported from a channels_last example (the real DC-AE's eager stage outputs) still takes row-major input.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import PHOTOS, compile_tiny, tiny_dc_ae
from ditskip_edge.models.latents import LatentEncoder, encoder_stages
from ditskip_edge.models.loading import build_vae
from ditskip_edge.models.specs import builtin_spec
from ditskip_edge.runtime.errors import UserError
from ditskip_edge.runtime.tiling import encode_tiled


@pytest.mark.parametrize("model,hw", [("flux-tiny", (128, 96)), ("sana-tiny", (128, 96)), ("sana-tiny", (64, 64))])
def test_encoder_stages_compose_to_the_encoder_exactly(model, hw):
    spec = builtin_spec(model)
    vae = build_vae(spec)
    x = torch.rand(1, 3, *hw, generator=torch.Generator().manual_seed(0)) * 2 - 1
    stages = encoder_stages(spec.arch, vae)
    assert len(stages) >= 4
    with torch.no_grad():
        want = LatentEncoder(spec.arch, vae)(x)
        h = x
        for stage in stages:
            h = stage(h)
    assert torch.equal(h, want)
    assert vae.decoder is not None                    # the split does not touch the autoencoder it was taken from


def test_a_pixel_space_model_has_no_encoder_to_split():
    from ditskip_edge.models.latents import PixelAutoencoder
    with pytest.raises(UserError, match="no encoder to split"):
        encoder_stages("flux", PixelAutoencoder(2))


def test_run_shape_gives_what_the_per_tile_callback_gives():
    rng = np.random.default_rng(0)
    patch = rng.standard_normal((1, 3, 96, 80)).astype(np.float32)
    w = rng.standard_normal((8, 3 * 16)).astype(np.float32)

    def enc(t):                          # a stand-in encoder: 4x4 space-to-depth, then a channel mix
        _, c, h, ww = t.shape
        y = t.reshape(1, c, h // 4, 4, ww // 4, 4).transpose(0, 1, 3, 5, 2, 4).reshape(1, c * 16, h // 4, ww // 4)
        return np.einsum("oc,bchw->bohw", w, y)
    shapes_seen = []

    def enc_shape(tiles):
        shapes_seen.append({t.shape for t in tiles})
        return [enc(t) for t in tiles]
    one = encode_tiled(patch, enc, 32, 24, 4)
    by_shape = encode_tiled(patch, None, 32, 24, 4, encode_shape=enc_shape)
    assert np.array_equal(one, by_shape)
    assert all(len(s) == 1 for s in shapes_seen) and len(shapes_seen) == 4     # one call per tile shape


def _programs():
    from export.executorch_stage import ExecutorchPrograms
    return [ExecutorchPrograms(("fp32",))]


@pytest.fixture(scope="module")
def staged_sana(tmp_path_factory) -> tuple[Path, Path]:
    from export.executorch_subject import SubjectPrograms
    tmp = tmp_path_factory.mktemp("staged")
    kw = dict(n_front=2, n_back=1, steps=2, grad_accum=2, cache_codec="fp32", encode_tile_px=128)
    model = compile_tiny(tmp / "model", "sana-tiny", images=None, programs=_programs(),
                         subject_programs=SubjectPrograms("fp32", external_weights=True, encode_stages=True), **kw)
    host = compile_tiny(tmp / "host", "sana-tiny", programs=[], **kw)
    return model, host


def test_staged_tiled_encode_device_residuals_equal_the_hosts_sana(staged_sana, tmp_path):
    from test_subject_stage import _check_residuals_match
    from ditskip_edge.runtime.subject import SubjectConfig, personalize
    model, host = staged_sana
    manifest = json.loads((model / "manifest.json").read_text())
    rec = manifest["encode_tiling"]
    n = len(encoder_stages("sana", build_vae(builtin_spec("sana-tiny"))))
    assert rec["tiled"] and rec["stages"] == n and sorted(rec["programs"]) == ["128x128", "128x64", "64x128", "64x64"]
    encoders = [p for p in manifest["programs"] if p["name"].startswith("encode.")]
    assert len(encoders) == 4 * n
    for k in range(n):
        stage_k = [p for p in encoders if p["name"].endswith(f".s{k}")]
        assert len(stage_k) == 4 and {tuple(p["data"]) for p in stage_k} == \
            {(f"programs/executorch/subject/encoder.s{k}.ptd",)}
    personalize(model, PHOTOS, tmp_path / "device", SubjectConfig(progress=False))
    worst = _check_residuals_match(tmp_path / "device", host)
    assert set(worst) == {"front.img", "back.img"}


def test_the_stages_run_one_program_at_a_time_in_order(staged_sana, monkeypatch):
    from ditskip_edge.runtime import forward
    from ditskip_edge.runtime.bundle import Bundle
    model, _ = staged_sana
    events, live = [], set()
    real = forward.ProgramRunner

    class Watched(real):
        def __init__(self, bundle, entry):
            events.append(("load", entry["name"], len(live)))
            super().__init__(bundle, entry)
            live.add(id(self))

        def __del__(self):
            live.discard(id(self))
    monkeypatch.setattr(forward, "ProgramRunner", Watched)
    b = Bundle.open(model)
    fwd = forward.ForwardPrograms(b)
    photo = np.random.default_rng(1).uniform(-1, 1, (3, 300, 280)).astype(np.float32)
    fwd.x0(photo, (5.0, 7.0, 256.0))
    loads = [name for _, name, _ in events]
    rec = b.manifest["encode_tiling"]
    want = [f"encode.{key}.s{k}" for key in ["128x128", "128x64", "64x128", "64x64"] for k in range(rec["stages"])]
    assert loads == want                                    # each stage once per shape, shapes in tile_shapes' order
    assert all(n_live == 0 for _, _, n_live in events)      # the one before was dropped before each load
    assert not live                                         # and the last after x0


def test_a_staged_untiled_encoder_gives_diffusers_x0_flux(tmp_path):
    from export.executorch_subject import SubjectPrograms
    from ditskip_edge.runtime.bundle import Bundle
    from ditskip_edge.runtime.forward import ForwardPrograms
    from ditskip_edge.runtime.patches import crop_patch
    model = compile_tiny(tmp_path / "model", "flux-tiny", n_front=1, n_back=1, steps=2, grad_accum=1, images=None,
                         cache_codec="fp32", programs=_programs(),
                         subject_programs=SubjectPrograms("fp32", external_weights=True, encode_stages=True))
    b = Bundle.open(model)
    assert b.manifest["encode_tiling"]["stages"] >= 4 and not b.manifest["encode_tiling"]["tiled"]
    spec = builtin_spec("flux-tiny")
    photo = np.random.default_rng(0).uniform(-1, 1, (3, 160, 200)).astype(np.float32)
    box = (10.0, 20.0, 140.0)
    x0 = ForwardPrograms(b).x0(photo, box)
    patch = torch.from_numpy(crop_patch(photo, box, spec.train_px))
    with torch.no_grad():
        want = LatentEncoder(spec.arch, build_vae(spec))(patch).numpy()
    assert float(np.abs(x0 - want).max()) <= 1e-4 * max(1.0, float(np.abs(want).max()))


def _edit_manifest(src: Path, dst: Path, edit) -> Path:
    from test_subject_stage import _resign
    shutil.copytree(src, dst)
    _resign(dst, edit)
    return dst


@pytest.mark.parametrize("case", ["stage_missing", "stages_do_not_chain"])
def test_a_broken_stage_chain_is_refused_with_one_line(staged_sana, tmp_path, case):
    from ditskip_edge.runtime.errors import BundleError
    from ditskip_edge.runtime.subject import SubjectConfig, personalize
    model, _ = staged_sana

    def edit(m):
        progs = m["programs"]
        if case == "stage_missing":       # and a second tile shape pointed at the same chain: named once
            m["programs"] = [p for p in progs if p["name"] != "encode.64x64.s1"]
            shapes = m["encode_tiling"]["programs"]
            shapes[next(k for k, v in shapes.items() if v != "encode.64x64")] = "encode.64x64"
        else:                         # stage 2 of one shape swapped for another shape's: its input is not s1's output
            a = next(p for p in progs if p["name"] == "encode.128x128.s2")
            b = next(p for p in progs if p["name"] == "encode.64x64.s2")
            i, j = progs.index(a), progs.index(b)
            progs[i], progs[j] = {**b, "name": a["name"]}, {**a, "name": b["name"]}
    bad = _edit_manifest(model, tmp_path / "bad", edit)
    with pytest.raises((BundleError, UserError)) as e:
        personalize(bad, PHOTOS, tmp_path / "out", SubjectConfig(progress=False))
    msg = str(e.value)
    assert "\n" not in msg and (msg.count("encode.64x64.s1") == 1 if case == "stage_missing"
                                 else "not one encoder's" in msg)
    assert not (tmp_path / "out").exists()


def test_a_stage_program_that_does_not_reproduce_the_encoder_is_refused_at_compile(staged_sana):
    """export/executorch_subject.py check_program_reproduces (run on every stage program as it is written): the
    written program against its own stage passes; against a module that computes something else (here the stage
    doubled) it is a one-line refusal naming the program, so a mis-lowered stage is never shipped (the real-config
    DC-AE's stages 4 and 5 exported from channels_last examples were, before export_forward made them contiguous)."""
    from types import SimpleNamespace
    from export.executorch_subject import check_program_reproduces
    model, _ = staged_sana
    manifest = json.loads((model / "manifest.json").read_text())
    entry = next(p for p in manifest["programs"] if p["name"] == "encode.64x64.s1")
    writer = SimpleNamespace(path=lambda rel: model / rel)
    stage = encoder_stages("sana", build_vae(builtin_spec("sana-tiny")))[1]
    like = torch.zeros(entry["inputs"][0]["shape"])
    assert check_program_reproduces(writer, entry, stage, like, "stage 1") <= 1e-5

    class Doubled(torch.nn.Module):
        def forward(self, x):
            return 2 * stage(x)
    with pytest.raises(UserError) as e:
        check_program_reproduces(writer, entry, Doubled(), like, "--encode-stages: encoder stage 1")
    assert "\n" not in str(e.value) and "encode_64x64_s1.pte does not reproduce the encoder" in str(e.value)


@pytest.mark.parametrize("backend", ["xnnpack", "portable"])
def test_a_channels_last_example_still_makes_a_row_major_program(backend):
    """export/executorch_subject.py export_forward makes its example inputs contiguous: ExecuTorch gives a program
    input its example's dim order and the runtimes pass row-major buffers. The real-config DC-AE's stages 3 and 4
    return channels_last tensors in eager; exported with those as examples, stages 4 and 5 read their input as
    channels_last (XNNPACK ~1.2 relative off, portable refusing its first permute). Here an EfficientViT stage of a
    DC-AE built like f32c32 with tiny channels, exported from a channels_last example, equals eager on a row-major
    input."""
    from export.executorch_subject import export_forward
    from ditskip_edge.runtime import bindings
    stage = encoder_stages("sana", tiny_dc_ae())[4].eval()
    example = torch.zeros(1, 32, 4, 4).to(memory_format=torch.channels_last)
    pte, _, _ = export_forward(stage, (example,), backend, external_weights=False)
    program = bindings.executorch_inference()._load_for_executorch_from_buffer(pte)
    x = torch.randn(1, 32, 4, 4, generator=torch.Generator().manual_seed(1))
    got = program.forward((x,))[0]
    with torch.no_grad():
        want = stage(x)
    assert float((got - want).norm() / want.norm()) <= 1e-5
