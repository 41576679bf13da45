"""export/program_reuse.py: one export per block structure when weights are mapped.

Properties protected:
- a program reused for a third module of a proven structure is byte for byte what exporting that module writes (the
  .pte and its data file);
- a structure is not proven when its programs differ (a constant baked into the graph) or when the data file holds
  a name the module does not have; retargeting refuses a constant of another size.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from export.executorch_subject import export_forward
from export.program_reuse import ProgramReuse, constant_bytes, retarget_data, structure_of


class Affine(nn.Module):
    def __init__(self, seed: int, scale: float = 1.0):
        super().__init__()
        torch.manual_seed(seed)
        self.lin = nn.Linear(8, 8)
        self.register_buffer("shift", torch.randn(8))
        self.scale = scale                     # a Python float: baked into the graph, not a constant

    def forward(self, x):
        return self.lin(x) * self.scale + self.shift


EXAMPLE = (torch.randn(2, 8),)


def _export(module, matmuls: bool = False):
    pte, data, memory = export_forward(module, EXAMPLE, "portable", external_weights=True, matmuls=matmuls)
    return bytes(pte), data, memory


def _quantized(module: nn.Module, precision: str) -> nn.Module:
    from ditskip_edge.quantize import QuantSpec, quantize_frozen_layers
    if precision != "fp32":
        for p in module.parameters():
            p.requires_grad_(False)
        quantize_frozen_layers(module, QuantSpec(precision, group_size=8))
    return module


@pytest.mark.parametrize("precision", ["fp32", "int8", "int4"])
def test_a_reused_program_is_byte_for_byte_what_exporting_the_module_writes(precision):
    """fp32 as exported for the encoder and embed programs; int8 / int4 (quantize.py's codes and scales are plain
    buffers) through the block programs' matmul lowering."""
    reuse = ProgramReuse()
    matmuls = precision != "fp32"
    modules = [_quantized(Affine(seed), precision) for seed in range(3)]
    for m in modules[:2]:
        assert reuse.program_for(structure_of(m), m) is None
        reuse.exported(structure_of(m), m, *_export(m, matmuls))
    pte, data, _ = reuse.program_for(structure_of(modules[2]), modules[2])
    want_pte, want_data, _ = _export(modules[2], matmuls)
    assert pte == want_pte and data == want_data and reuse.reused == 1
    assert data != _export(modules[0], matmuls)[1]


def test_differing_programs_or_unknown_names_prove_nothing_and_a_wrong_size_is_refused():
    reuse = ProgramReuse()
    modules = [Affine(0, scale=1.0), Affine(1, scale=2.0), Affine(2, scale=2.0)]
    exports = [_export(m) for m in modules[:2]]
    assert exports[0][0] != exports[1][0]                # the scale is in the graph: the .pte files differ
    for m, e in zip(modules, exports):
        reuse.exported(structure_of(m), m, *e)
    assert reuse.program_for(structure_of(modules[2]), modules[2]) is None

    a, b = Affine(0), Affine(1)
    data_a = _export(a)[1]
    renamed = {f"other.{k}": v for k, v in constant_bytes(b).items()}
    assert retarget_data(data_a, renamed) is None
    short = {**constant_bytes(b), "lin.bias": b"\0" * 4}
    assert retarget_data(data_a, short) is None
    assert retarget_data(data_a, constant_bytes(a)) == data_a
