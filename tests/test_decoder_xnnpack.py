"""Generation's decode programs on XNNPACK (export/conv_matmul.py): every convolution as im2col bands + a bmm with
the weight on the left, the weights still the program's inputs (read in place from the mapped decoder file): the
same image as the portable program within fp32 rounding, no convolution and no weight left in the program, every
band's im2col buffer within the bound, and the estimate's arena the program's planned arena. Tiny DC-AE (SANA's
structure: ResBlocks, EfficientViT with depthwise / grouped convolutions) and flux-tiny's AutoencoderKL."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import TINY_DC_AE_CONFIG

from ditskip_edge.models.specs import BUILTIN_SPECS, FLUX_ARCH, SANA_ARCH

KL = dict(BUILTIN_SPECS["flux-tiny"].vae_config, mid_block_add_attention=True)
BAND = 512 * 1024            # small enough that the tiny decoders' widest convolutions take several bands
CASES = {"dc-ae": (SANA_ARCH, TINY_DC_AE_CONFIG, (4, 4)), "autoencoder-kl": (FLUX_ARCH, KL, (8, 8))}


@pytest.fixture(scope="module", params=list(CASES))
def programs(request):
    """(case, eager image, {backend: (pte, sizes)}, example, estimate) of one tiny decoder, exported as
    export/generation_stage.py _decode_part does, and memory_estimate's decoder_program_memory of the XNNPACK one."""
    from export.executorch_preprocess import export_module_program
    from export.generation_modules import Decode, PlainDecode, decoder_states
    from ditskip_edge.memory_estimate.generation import decoder_program_memory
    from ditskip_edge.models.latents import LatentEncoder
    from ditskip_edge.models.loading import vae_class
    arch, config, tile_hw = CASES[request.param]
    torch.manual_seed(0)
    plain = PlainDecode(LatentEncoder(arch, vae_class(arch).from_config(config).eval()))
    x = torch.randn(1, int(config["latent_channels"]), *tile_hw, generator=torch.Generator().manual_seed(1))
    states = decoder_states(plain, x)
    decode = Decode(plain, list(states))
    example = (x,) + tuple(v.detach() for v in states.values())
    with torch.no_grad():
        eager = decode(*example).numpy()
    out = {"portable": export_module_program(decode, example, "portable", planned_inputs=False, mm_rewrite=True),
           "xnnpack": export_module_program(decode, example, "xnnpack", planned_inputs=False, mm_rewrite=True,
                                            conv_band_bytes=BAND)}
    return request.param, eager, out, example, decoder_program_memory(arch, config, tile_hw, BAND)


def _run(pte: bytes, example) -> np.ndarray:
    from ditskip_edge.runtime import bindings
    m = bindings.executorch_inference()._load_for_executorch_from_buffer(pte)
    return m.forward(example)[0].numpy()


def test_xnnpack_decode_program_gives_the_portable_programs_image_within_fp32_rounding(programs):
    case, eager, out, example, _ = programs
    portable, xnn = _run(out["portable"][0], example), _run(out["xnnpack"][0], example)
    scale = float(np.abs(eager).max())
    assert np.abs(xnn - portable).max() <= 2e-5 * scale, (case, np.abs(xnn - portable).max())
    assert np.abs(xnn - eager).max() <= 2e-5 * scale
    assert not np.array_equal(xnn, portable)          # really another program (XNNPACK's summation order)


def test_convolutions_run_as_xnnpack_bmm_delegates_with_the_weights_as_inputs(programs):
    """No convolution operator and no weight among the program's constants; one XNNPACK delegate per band of
    every convolution (the estimate's replay of the same decomposition counts them)."""
    from executorch.exir._serialize._program import deserialize_pte_binary
    case, _, out, _, est = programs
    pte, sizes = out["xnnpack"]
    plan = deserialize_pte_binary(pte).program.execution_plan[0]
    ops = {o.name for o in plan.operators}
    assert not any("convolution" in o for o in ops), ops
    assert any("convolution" in o.name for o in deserialize_pte_binary(out["portable"][0]).program
               .execution_plan[0].operators)
    assert sizes["constant_bytes"] < 1024                      # the weights are inputs (mapped), not constants
    assert {d.id for d in plan.delegates} == {"XnnpackBackend"}
    assert len(plan.delegates) == est["delegates"] > est["convolutions_rewritten"] > 0   # several bands: banded


def test_every_im2col_band_stays_within_the_bound_unless_one_row_is_larger():
    from ditskip_edge.models.conv_matmul import band_rows
    for channels, k, width, rows, band in [(128, (3, 3), 256, 256, 8 << 20), (1024, (3, 3), 8, 8, 8 << 20),
                                           (8, (1, 1), 128, 128, 16 * 1024), (16, (3, 3), 64, 64, 1000),
                                           (4096, (3, 3), 32, 32, 8 << 20), (8, (3, 3), 128, 128, BAND)]:
        r = band_rows(channels, k, width, rows, band)
        per_row = channels * k[0] * k[1] * width * 4
        bands = math.ceil(rows / r)
        assert r * per_row <= band or r == 1, (channels, k, width, r)
        assert bands == 1 or per_row * math.ceil(rows / (bands - 1)) > band     # the fewest bands
    # SANA's widest: 128 channels, 3x3, 256 px -> 1.125 MiB a row: 8 MiB takes 7 rows, 37 bands
    assert band_rows(128, (3, 3), 256, 256, 8 << 20) == 7


def test_estimate_is_the_xnnpack_decode_programs_planned_arena_and_counts_the_packed_band(programs):
    """memory_estimate/generation.py decoder_program_memory with the band replays the rewritten program: its
    greedy plan is the exported program's planned arena (within 1%); its workspace is the largest band XNNPACK
    packs: within the bound here (no row of these decoders is wider), none on the portable kernels."""
    case, _, out, _, est = programs
    planned = out["xnnpack"][1]["planned_arena_bytes"]
    assert abs(est["arena_bytes"] - planned) <= 0.01 * planned, (est, planned)
    assert est["arena_bytes"] >= est["arena_live_bytes"] > 0
    assert 0 < est["workspace_bytes"] <= BAND
