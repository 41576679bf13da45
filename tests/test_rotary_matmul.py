"""FLUX's rotary pair rotation as a matmul in exported programs (ditskip_edge/models/rotary.py).

Properties protected:
- the rotation as x @ R gives diffusers' apply_rotary_emb bit for bit (both sequence layouts FLUX uses)
- other rotary variants go to diffusers' function unchanged
- the exported FLUX training program (XNNPACK, int8, remat) with it computes the same loss and LoRA gradients bit
  for bit as the program with diffusers' stack, with fewer portable cat / slice / select kernels
"""

from __future__ import annotations

import pytest
import torch

from ditskip_edge.models.rotary import _rotary_matmul, pair_rotation, rotary_as_matmul


@pytest.mark.parametrize("sequence_dim,shape", [(1, (2, 24, 3, 16)), (2, (2, 3, 24, 16))])
def test_pair_rotation_gives_diffusers_rotary_embedding_bit_for_bit(sequence_dim, shape):
    from diffusers.models.embeddings import apply_rotary_emb
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g)
    cos, sin = torch.randn(24, 16, generator=g), torch.randn(24, 16, generator=g)
    want = apply_rotary_emb(x, (cos, sin), sequence_dim=sequence_dim)
    got = _rotary_matmul(apply_rotary_emb)(x, (cos, sin), sequence_dim=sequence_dim)
    assert torch.equal(got, want)
    r = pair_rotation(4)
    assert torch.equal(torch.tensor([[1.0, 2.0, 3.0, 4.0]]) @ r, torch.tensor([[-2.0, 1.0, -4.0, 3.0]]))


def test_other_rotary_variants_are_diffusers_own():
    from diffusers.models.embeddings import apply_rotary_emb
    x = torch.randn(1, 2, 6, 8)
    cos, sin = torch.randn(6, 8), torch.randn(6, 8)
    patched = _rotary_matmul(apply_rotary_emb)
    assert torch.equal(patched(x, (cos, sin), True, -2), apply_rotary_emb(x, (cos, sin), True, -2))
    from diffusers.models.transformers import transformer_flux
    before = transformer_flux.apply_rotary_emb
    with rotary_as_matmul():
        assert transformer_flux.apply_rotary_emb is not before
    assert transformer_flux.apply_rotary_emb is before


def test_exported_flux_step_is_unchanged_with_fewer_portable_copies():
    pytest.importorskip("executorch")
    from conftest import flux_step_module
    from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

    from ditskip_edge.quantize import QuantSpec
    from ditskip_edge.runtime.bindings import training_module
    from export.executorch_program import ExportConfig, export_training_program
    step = flux_step_module("int8", heads=2, head_dim=16, single_layers=1, rope=(4, 6, 6))
    runs, ops = {}, {}
    for rotary in (False, True):
        prog = export_training_program(step, ExportConfig(quant=QuantSpec("int8"), backend="xnnpack", remat="blocks",
                                                          rotary_matmul=rotary, trace_need=False))
        m = training_module(_load_for_executorch_from_buffer(prog.buffer))
        loss = float(m.forward_backward("forward", step.example)[0])
        runs[rotary] = loss, {k: v.clone() for k, v in m.named_gradients().items()}
        ops[rotary] = prog.ops["portable_ops"]
    (loss0, g0), (loss1, g1) = runs[False], runs[True]
    assert loss0 == loss1 and set(g0) == set(g1) and all(torch.equal(g0[k], g1[k]) for k in g0)
    copies = ("cat", "slice_copy.Tensor", "select_copy.int")
    before, after = (sum(ops[r].get(k, 0) for k in copies) for r in (False, True))
    assert after < before, (ops[False], ops[True])
