"""The subject stage's XNNPACK encoder program as the estimate counts it (memory_estimate/xnnpack_program.py, issue 57):
XNNPACK's packed copy of the constant convolution weights, the program's arena between its delegates, the shared
XNNPACK workspace with its growth transient, the convolutions' indirection buffers. Tiny configs, fake tensors."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from ditskip_edge.memory_estimate.program import StepConfig
from ditskip_edge.memory_estimate.subject import _portable_encoder_arena, subject_stage_estimate
from ditskip_edge.memory_estimate.xnnpack_program import xnnpack_program_memory
from ditskip_edge.models.loading import vae_class
from ditskip_edge.models.specs import BUILTIN_SPECS, FLUX_ARCH

# FLUX.1-dev's AutoencoderKL structure (2 ResnetBlock2D per stage, group norm, SiLU), narrow
KL_ENCODER = dict(in_channels=3, out_channels=3, latent_channels=4, down_block_types=["DownEncoderBlock2D"] * 2,
                  up_block_types=["UpDecoderBlock2D"] * 2, block_out_channels=[32, 64], layers_per_block=2,
                  norm_num_groups=32, sample_size=64, scaling_factor=0.3611, shift_factor=0.1159,
                  use_quant_conv=False, use_post_quant_conv=False, mid_block_add_attention=False)


def _encoder_program(config: dict, px: int) -> dict:
    with torch.device("meta"):
        vae = vae_class(FLUX_ARCH).from_config(config).eval()
    with FakeTensorMode(allow_non_fake_inputs=True):
        vae.to_empty(device="cpu")
        x = torch.zeros(1, 3, px, px)
        return xnnpack_program_memory(lambda: vae.encoder(x), list(vae.parameters()) + list(vae.buffers()), [x])


def test_kl_encoder_program_holds_four_features_in_its_arena_and_two_workspaces_while_the_workspace_grows():
    """What heaptrack found in FLUX's encode program (real width at 256 px: arena 128 MiB, xnn_plan_memory 160 MiB
    = the 64 MiB workspace and the 96 MiB one that replaces it, both resident; at 64 px 8 and 10 MiB), in units of
    one first-stage feature map T: the ResnetBlock2D's residual, group norm output, sigmoid output and delegate
    output in the arena (4 T); the delegates [conv_in] 1 T (+ the input's NHWC copy), [mul, conv1] 2 T,
    [mul, conv2, add] 3 T; the workspace peak 2 T + 3 T."""
    px = 64
    T = 32 * px * px * 4
    m = _encoder_program(KL_ENCODER, px)
    assert m["arena_bytes"] == 4 * T
    assert m["workspaces_bytes"][:3] == [T + 3 * px * px * 4, 2 * T, 3 * T]
    assert m["workspace_bytes"] == 3 * T and m["workspace_peak_bytes"] == 5 * T
    # every 3x3 convolution keeps kh * kw pointers per output pixel from its first run: the workspace's growth
    # holds the first three, the program's end all of them beside the 3 T workspace
    first_three = 3 * 9 * px * px * 8
    assert m["indirection_bytes"] > first_three
    assert m["peak_bytes"] == 4 * T + max(5 * T + first_three, 3 * T + m["indirection_bytes"])


def test_kl_encoder_program_memory_scales_with_the_crop():
    """The arena and the workspace are feature maps: four times the pixels, four times the bytes."""
    small, large = _encoder_program(KL_ENCODER, 32), _encoder_program(KL_ENCODER, 64)
    for k in ("arena_bytes", "workspace_bytes", "workspace_peak_bytes", "indirection_bytes"):
        assert large[k] == 4 * small[k]


@pytest.mark.parametrize("widths", [([8, 8, 16, 16], [16, 16, 32, 32])])
def test_subject_estimate_counts_the_packed_encoder_weights_and_grows_with_them(widths):
    """subject.py: the XNNPACK encoder's phase = its packed weights (anonymous, mapped data file or not) + its
    program's peak; a wider encoder adds at least its extra weight bytes to the phase; the portable encoder with
    mapped weights keeps them file-backed."""
    base = BUILTIN_SPECS["flux-tiny"]
    rows = []
    for w in widths:
        spec = replace(base, vae_config=dict(base.vae_config, block_out_channels=w))
        cfg = StepConfig(spec, spec.train_px, spec.text.seq_len, n_front=1, n_back=1, precision="int8")
        out = {}
        for backend in ("xnnpack", "portable"):
            est = subject_stage_estimate(cfg, {"footprint_bytes": 1 << 40}, 1, 0, num_samples=2, grad_accum=1,
                                         codec="fp32", weights="mapped", encode_backend=backend)
            out[backend] = est["subject_stage"]
        rows.append((spec, out))
    for spec, r in rows:
        x, p = r["xnnpack"], r["portable"]
        program = x["encoder_xnnpack_program"]
        assert x["encoder_anonymous_weights_bytes"] == x["encoder_weights_bytes"] > 0
        assert x["phase_peaks_bytes"]["encode"] == x["encoder_weights_bytes"] + program["peak_bytes"]
        assert program["peak_bytes"] >= program["arena_bytes"] + program["workspace_peak_bytes"]
        assert p["encoder_anonymous_weights_bytes"] == 0
        # the portable encoder's phase: its program's planned arena (tests/test_encoder_arena_estimate.py)
        assert p["phase_peaks_bytes"]["encode"] == _portable_encoder_arena(spec, spec.train_px, spec.train_px) > 0
    narrow, wide = rows[0][1]["xnnpack"], rows[1][1]["xnnpack"]
    extra_weights = wide["encoder_weights_bytes"] - narrow["encoder_weights_bytes"]
    assert extra_weights > 0
    assert wide["phase_peaks_bytes"]["encode"] - narrow["phase_peaks_bytes"]["encode"] >= extra_weights


def test_dcae_resblock_arena_is_executorchs_greedy_plan_five_buckets_for_four_live_features():
    """DC-AE's ResBlock (SANA; its RMSNorm2d permutes to channels-last and back, copies in the program) has 4 feature
    maps live at once, but ExecuTorch's greedy planner (largest first, latest-defined first among equals) puts them
    in 5 buckets: the SANA-1600M bundle's stage-0 encode program plans 160 MiB for 4 x 32 MiB live (its manifest),
    and the estimate counts the plan, not the live peak."""
    from ditskip_edge.models.latents import encoder_stages
    from ditskip_edge.models.specs import SANA_ARCH
    config = dict(BUILTIN_SPECS["sana-tiny"].vae_config, encoder_block_types=["ResBlock"] * 6,
                  encoder_layers_per_block=[2] * 6)
    with torch.device("meta"):
        vae = vae_class(SANA_ARCH).from_config(config).eval()
    with FakeTensorMode(allow_non_fake_inputs=True):
        vae.to_empty(device="cpu")
        stage = encoder_stages(SANA_ARCH, vae)[0]
        x = torch.zeros(1, 3, 64, 64)
        m = xnnpack_program_memory(lambda: stage(x), list(stage.parameters()), [x])
    T = 8 * 64 * 64 * 4
    assert m["arena_bytes"] == 5 * T
    assert 4 * T <= m["arena_live_bytes"] < 4.5 * T
