"""The subject stage's encoder in tiles (compile --encode-tile-px; issue 15): runtime/tiling.py's encode_tiled with the
encoder run per tile equals diffusers' own tiled_encode with the same tiles, the host reference (LatentEncoder with an
encode_tiling record) leaves the autoencoder's own settings as they were, and tiles an autoencoder cannot take are
refused with one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import tiny_dc_ae
from ditskip_edge.models.latents import LatentEncoder, encode_tiling
from ditskip_edge.models.loading import build_vae
from ditskip_edge.models.specs import builtin_spec
from ditskip_edge.runtime.errors import UserError
from ditskip_edge.runtime.tiling import encode_tiled, tile_shapes


@pytest.mark.parametrize("model,tile_px", [("flux-tiny", 64), ("sana-tiny", 128), ("sana-tiny", 64)])
def test_tiled_encode_equals_diffusers_tiled_encode(model, tile_px):
    """Per-tile encoder + runtime blending = diffusers' tiled_encode (AutoencoderKL posterior mode, AutoencoderDC),
    normalised as the pipelines do; and it is not the untiled encode (the blend is really exercised)."""
    spec = builtin_spec(model)
    s_min = spec.train_px
    tiling = encode_tiling(spec, s_min, tile_px)
    assert tiling["tiled"] and len(tile_shapes((s_min, s_min), tiling["tile_px"], tiling["stride_px"])) > 1
    vae = build_vae(spec)
    patch = torch.rand(1, 3, s_min, s_min, generator=torch.Generator().manual_seed(0)) * 2 - 1
    plain_enc = LatentEncoder(spec.arch, vae).eval()
    with torch.no_grad():
        plain = plain_enc(patch).numpy()
        got = encode_tiled(patch.numpy(), lambda t: plain_enc(torch.from_numpy(t)).numpy(), tiling["tile_px"],
                           tiling["stride_px"], tiling["scale"])
        want = LatentEncoder(spec.arch, vae, tiling)(patch).numpy()
    assert got.shape == want.shape == plain.shape
    assert float(np.abs(got - want).max()) <= 1e-5 * max(1.0, float(np.abs(want).max()))
    assert float(np.abs(want - plain).mean()) > 1e-4


def test_host_tiled_encode_restores_the_autoencoders_settings():
    """A tiled encode on the host must not leave diffusers' tiling on: the same autoencoder decodes (generation) and
    encodes untiled elsewhere in the process."""
    spec = builtin_spec("sana-tiny")
    vae = build_vae(spec)
    before = (vae.use_tiling, vae.tile_sample_min_height, vae.tile_sample_stride_height)
    with torch.no_grad():
        LatentEncoder(spec.arch, vae, encode_tiling(spec, spec.train_px, 128))(torch.zeros(1, 3, spec.train_px,
                                                                                           spec.train_px))
    assert (vae.use_tiling, vae.tile_sample_min_height, vae.tile_sample_stride_height) == before


def test_a_crop_that_fits_one_tile_is_encoded_whole():
    spec = builtin_spec("flux-tiny")
    assert encode_tiling(spec, spec.train_px, spec.train_px)["tiled"] is False
    assert encode_tiling(spec, spec.train_px, None) == {"tile_px": spec.train_px, "stride_px": spec.train_px,
                                                        "scale": spec.vae_scale_factor, "tiled": False}


@pytest.mark.parametrize("model,tile_px,expect", [("flux-tiny", 40, "multiple of 32 px"),
                                                  ("flux-tiny", 60, "multiple of 8 px"),
                                                  ("sana-tiny", 48, "multiple of 32 px"),
                                                  ("flux-testbed", 8, "no encoder to tile")])
def test_encode_tiles_the_autoencoder_cannot_take_are_refused_with_one_line(model, tile_px, expect):
    spec = builtin_spec(model)
    with pytest.raises(UserError, match=expect):
        encode_tiling(spec, spec.train_px, tile_px)


def test_row_major_pixel_shuffles_are_torchs():
    """models/layout.py: the reshape -> permute -> reshape forms give F.pixel_(un)shuffle's values exactly, and
    contiguous results (what the portable kernels need)."""
    import torch.nn.functional as F
    from ditskip_edge.models.layout import contiguous_pixel_shuffles
    for shape, r in [((1, 12, 8, 6), 2), ((2, 3, 9, 12), 3), ((1, 32, 4, 4), 4)]:
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(*shape, generator=g), torch.randn(shape[0], 2 * r * r, 5, 7, generator=g)
        with contiguous_pixel_shuffles():
            down, up = F.pixel_unshuffle(x, r), F.pixel_shuffle(y, r)
        assert torch.equal(down, F.pixel_unshuffle(x, r)) and down.is_contiguous()
        assert torch.equal(up, F.pixel_shuffle(y, r)) and up.is_contiguous()


def test_dc_ae_encoder_with_efficientvit_stages_runs_on_the_portable_kernels():
    """An AutoencoderDC encoder built like the published f32c32 (ResBlock x 3, EfficientViT x 3 with multiscale
    attention, pixel-unshuffle down blocks with shortcuts; tiny channels), exported as the subject stage's encode
    program on the portable backend, runs and gives the eager x0. Without models/layout.py's row-major shuffles
    torch's pixel_unshuffle decomposition left a channels_last copy that the portable `add` refused at run time
    ("3 input tensors have different dim orders"): what `--encode-backend portable` hit on the real config."""
    from export.executorch_subject import EncodeModule, export_forward
    from ditskip_edge.runtime import bindings
    module = EncodeModule(LatentEncoder("sana", tiny_dc_ae())).eval()
    pte, _, _ = export_forward(module, (torch.zeros(1, 3, 64, 64),), "portable", external_weights=False)
    program = bindings.executorch_inference()._load_for_executorch_from_buffer(pte)
    x = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(1)) * 2 - 1
    got = program.forward((x,))[0].numpy()
    with torch.no_grad():
        want = module(x).numpy()
    assert float(np.abs(got - want).max()) <= 1e-5
