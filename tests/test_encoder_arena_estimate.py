"""The subject stage's portable encoder (compile --encode-backend portable) is estimated as its program's PLANNED
arena (memory_estimate/subject.py portable_program_arena: the ops as the all-portable program holds them, placed by
ExecuTorch's greedy planner), as the generation decoder's is (test_decoder_arena_estimate.py). Each estimate is
checked against the program export/executorch_subject.py export_forward exports for it (portable, weights in a
mapped data file, the patch planned), on tiny autoencoders: whole encoders and one encoder stage. Measured: equal to
the byte on these; the eager forward's live peak, counted before, was 0.4-3% off (FLUX under, DC-AE over)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import TINY_DC_AE_CONFIG

from ditskip_edge.models.specs import BUILTIN_SPECS, FLUX_ARCH, SANA_ARCH

# FLUX's AutoencoderKL structure with its mid-block attention (SDPA, group norm, the posterior's mode)
KL = dict(BUILTIN_SPECS["flux-tiny"].vae_config, mid_block_add_attention=True)


def _spec(arch: str, config: dict):
    base = BUILTIN_SPECS["flux-tiny" if arch == FLUX_ARCH else "sana-tiny"]
    return dataclasses.replace(base, vae_config=config)


def _exported_arena(module, patch) -> int:
    from export.executorch_subject import export_forward
    _, _, memory = export_forward(module, (patch,), "portable", external_weights=True)
    return memory["planned_arena_bytes"]


@pytest.mark.parametrize("arch,config,hw", [(SANA_ARCH, TINY_DC_AE_CONFIG, (64, 64)), (SANA_ARCH, TINY_DC_AE_CONFIG, (64, 32)),
                                            (FLUX_ARCH, KL, (64, 64))], ids=["dc-ae", "dc-ae-wide", "autoencoder-kl"])
def test_portable_encoder_arena_is_the_exported_encode_programs_planned_arena(arch, config, hw):
    from export.executorch_subject import EncodeModule
    from ditskip_edge.memory_estimate.subject import _portable_encoder_arena
    from ditskip_edge.models.latents import LatentEncoder
    from ditskip_edge.models.loading import vae_class
    torch.manual_seed(0)
    module = EncodeModule(LatentEncoder(arch, vae_class(arch).from_config(config).eval()))
    planned = _exported_arena(module, torch.randn(1, 3, *hw))
    est = _portable_encoder_arena(_spec(arch, config), *hw)
    assert abs(est - planned) <= 0.005 * planned, (est, planned)


def test_a_portable_encoder_stage_is_estimated_as_its_exported_programs_arena():
    """compile --encode-stages --encode-backend portable: stage 0 of a tiny DC-AE (conv_in + the first down block)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from ditskip_edge.memory_estimate.subject import portable_program_arena
    from ditskip_edge.models.latents import encoder_stages
    from ditskip_edge.models.loading import vae_class
    torch.manual_seed(0)
    stage = encoder_stages(SANA_ARCH, vae_class(SANA_ARCH).from_config(TINY_DC_AE_CONFIG).eval())[0]
    planned = _exported_arena(stage, torch.randn(1, 3, 64, 64))
    with torch.device("meta"):
        meta_stage = encoder_stages(SANA_ARCH, vae_class(SANA_ARCH).from_config(TINY_DC_AE_CONFIG).eval())[0]
    with FakeTensorMode(allow_non_fake_inputs=True):
        meta_stage.to_empty(device="cpu")
        x = torch.zeros(1, 3, 64, 64)
        weights = list(meta_stage.parameters()) + list(meta_stage.buffers())
        est = portable_program_arena(lambda: meta_stage(x), weights, [x])
    assert abs(est - planned) <= 0.005 * planned, (est, planned)
