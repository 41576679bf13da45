"""The generation estimate's decode phase counts the decode program's PLANNED arena (portable here; the XNNPACK
program's: tests/test_decoder_xnnpack.py) (memory_estimate/generation.py
decoder_program_memory: the decoder's ops as the portable program holds them, re-planned by ExecuTorch's greedy
planner, xnnpack_program.greedy_arena_bytes), not the eager trace's live peak: SANA-1600M's decode_8x8.pte plans
192 MiB where the eager trace counted 144.5 MiB (benchmarks/results/real_scale.md). Each estimate is checked against
the program export/generation_stage.py _decode_part exports (export_module_program: portable, weights as inputs not
planned, addmm rewritten), on tiny autoencoders."""

from __future__ import annotations

import pytest
import torch
from conftest import TINY_DC_AE_CONFIG

from ditskip_edge.memory_estimate.generation import decoder_program_memory
from ditskip_edge.models.specs import BUILTIN_SPECS, FLUX_ARCH, SANA_ARCH

DC_AE = TINY_DC_AE_CONFIG          # SANA's DC-AE structure at tiny channels (conftest.tiny_dc_ae's)
# wide attention stages: the attention's linears (on a permuted activation) are matmul's broadcast bmm in the program,
# each weight copied once per row of the tile (expand_copy), larger than the 128 px feature maps
DC_AE_WIDE = dict(DC_AE, decoder_block_out_channels=[8, 16, 32, 32, 128, 128],
                  encoder_block_out_channels=[8, 16, 32, 32, 128, 128], decoder_layers_per_block=[1, 1, 1, 1, 2, 2])
# FLUX's AutoencoderKL structure with its mid-block attention (SDPA, dropout, group norm, nearest upsampling)
KL = dict(BUILTIN_SPECS["flux-tiny"].vae_config, mid_block_add_attention=True)


def _exported_arena(arch: str, config: dict, tile_hw: tuple[int, int], conv_band_bytes: int | None = None) -> int:
    """The planned arena of the decode program _decode_part exports for a latent tile of tile_hw (portable; with
    conv_band_bytes on XNNPACK: export/conv_matmul.py)."""
    from export.executorch_preprocess import export_module_program
    from export.generation_modules import Decode, PlainDecode, decoder_states
    from ditskip_edge.models.latents import LatentEncoder
    from ditskip_edge.models.loading import vae_class
    torch.manual_seed(0)
    plain = PlainDecode(LatentEncoder(arch, vae_class(arch).from_config(config).eval()))
    x = torch.randn(1, int(config["latent_channels"]), *tile_hw)
    states = decoder_states(plain, x)
    decode = Decode(plain, list(states))
    _, sizes = export_module_program(decode, (x,) + tuple(v.detach() for v in states.values()),
                                     "portable" if conv_band_bytes is None else "xnnpack", planned_inputs=False,
                                     mm_rewrite=True, conv_band_bytes=conv_band_bytes)
    return sizes["planned_arena_bytes"]


@pytest.mark.parametrize("arch,config,tile_hw", [(SANA_ARCH, DC_AE, (4, 4)), (SANA_ARCH, DC_AE_WIDE, (4, 2)),
                                                 (SANA_ARCH, DC_AE_WIDE, (2, 4)), (FLUX_ARCH, KL, (8, 8))],
                         ids=["dc-ae", "dc-ae-wide-4x2", "dc-ae-wide-2x4", "autoencoder-kl-attention"])
def test_decoder_arena_is_the_exported_decode_programs_planned_arena(arch, config, tile_hw):
    """The estimate's decoder arena is the exported program's planned arena (within 2%: the same greedy plan of
    the same buffers), not less: at least the live peak of the program's buffers."""
    est = decoder_program_memory(arch, config, tile_hw)
    planned = _exported_arena(arch, config, tile_hw)
    assert abs(est["arena_bytes"] - planned) <= 0.02 * planned, (est, planned)
    assert est["arena_bytes"] >= est["arena_live_bytes"] > 0


def test_the_attentions_weights_expanded_per_row_make_a_tall_tile_plan_more_than_a_wide_one():
    """DC-AE's attention linears run as a bmm over the tile's rows with the weight copied per row (the program's
    expand_copy): a tile of 4 x 2 latent cells plans more than one of 2 x 4 (the SANA-1600M bundle: decode_8x2 143.9
    MB, decode_2x8 50.3 MB), which an estimate from the pixels alone cannot tell apart."""
    tall = decoder_program_memory(SANA_ARCH, DC_AE_WIDE, (4, 2))["arena_bytes"]
    wide = decoder_program_memory(SANA_ARCH, DC_AE_WIDE, (2, 4))["arena_bytes"]
    assert tall > 1.2 * wide


def test_sana_1600m_decoder_at_a_256_px_tile_plans_what_its_bundle_planned():
    """At real scale (SANA-1600M's published DC-AE f32c32, 8 x 8 latent cells: compile --decode-tile-px 256): the
    bundle of benchmarks/results/real_scale.md planned 201,326,592 bytes for decode_8x8.pte (its manifest's
    planned_arena_bytes; heaptrack found them at the generate run's heap peak); the eager trace's live peak, which
    the estimate counted before, is 151,527,424. Meta weights, fake tensors: no real-size memory."""
    from ditskip_edge.memory_estimate.subject import AUTOENCODER_CONFIGS
    m = decoder_program_memory(SANA_ARCH, AUTOENCODER_CONFIGS["sana"], (8, 8))
    assert abs(m["arena_bytes"] - 201_326_592) <= 0.02 * 201_326_592
    assert m["arena_live_bytes"] < m["arena_bytes"]


def test_generation_estimates_decode_phase_is_the_exported_tile_programs_arena_plus_the_pictures():
    """`estimate` for sana-tiny decoding in tiles of 128 px: decoder_arena_bytes is the planned arena of the decode
    program compile exports for its largest tile (on XNNPACK, compile's default: export/conv_matmul.py with its
    default band), and the decode phase adds XNNPACK's workspace (the largest band it packs) and what
    runtime/tiling.py holds beside it (the picture and two rows of decoded tiles)."""
    from ditskip_edge.models.conv_matmul import DEFAULT_BAND_BYTES
    from ditskip_edge.memory_estimate.request import EstimateRequest, estimate_memory
    spec = BUILTIN_SPECS["sana-tiny"]
    px = 2 * spec.data_px
    g = estimate_memory(EstimateRequest(model="sana-tiny", skip_ratio=0.5, precision="int8", generation_px=(px,),
                                        decode_tile_px=128))["generation"][str(px)]
    tiling = g["decode_tiling"]["tiling"]
    assert tiling["tiled"]
    planned = _exported_arena(spec.arch, spec.vae_config, (tiling["tile_latent"],) * 2, DEFAULT_BAND_BYTES)
    assert abs(g["decoder_arena_bytes"] - planned) <= 0.02 * planned, (g["decoder_arena_bytes"], planned)
    rows = len(range(0, px // spec.vae_scale_factor, tiling["stride_latent"]))
    assert 0 < g["decoder_workspace_bytes"] <= DEFAULT_BAND_BYTES
    assert g["decoder_bytes"] == (g["decoder_arena_bytes"] + g["decoder_workspace_bytes"]
                                  + (3 * px * px + 2 * rows * 3 * 128 ** 2) * 4)
