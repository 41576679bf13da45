"""One export per block structure: blocks of one structure (a model's N identical transformer blocks) whose frozen
weights live in a mapped data file share one program, and only the data file is per block.

An ExecuTorch program with external constants (`ExecutorchBackendConfig(external_constants=True)`) keeps no weight
in its .pte: it names each constant (the module's FQN) and reads its bytes from the .ptd by that name. Two blocks of
the same structure then make byte-identical .pte files, and block k's .ptd is block j's with each named tensor's
bytes swapped for block k's (`retarget_data`). Exporting and lowering a block is the slow part of compiling the
subject stage (FLUX.1-dev needs up to all 57 blocks; a sana-tiny model bundle compiles in 95 s instead of 139,
benchmarks/results/block_program_reuse.md), so

    reuse = ProgramReuse()
    for each block: reuse.program_for(structure, module) -> (pte, data, memory) or None (export it, then
                    reuse.exported(structure, module, pte, data, memory))

A structure is proven reusable by its first two exports, never assumed: their .pte files are byte-identical, and
retargeting the first's data file to each block's own constants gives exactly what ExecuTorch wrote for it (so every
stored byte is a plain constant of the module under its FQN: nothing folded, transformed or left in the .pte;
quantize.py's int8 / int4 codes and scales are plain buffers and pass). A structure that fails the proof (a constant
baked into the graph, a stored name the module lacks) and a program without a data file (weights inside the .pte) are
exported block by block, as before.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn as nn


def constant_bytes(module: nn.Module) -> dict[str, bytes] | None:
    """The module's parameters and buffers as {FQN: raw bytes}; None if one is not a plain tensor (a quantized
    tensor subclass stores other bytes than its own)."""
    out = {}
    for name, t in itertools.chain(module.named_parameters(), module.named_buffers()):
        if type(t) not in (torch.Tensor, nn.Parameter):
            return None
        out[name] = t.detach().contiguous().numpy().tobytes()
    return out


def structure_of(module: nn.Module) -> tuple:
    """What makes two modules' programs the same: the class of each submodule and each constant's name, shape and
    dtype."""
    return (tuple((n, type(m).__name__) for n, m in module.named_modules()),
            tuple((n, tuple(t.shape), str(t.dtype))
                  for n, t in itertools.chain(module.named_parameters(), module.named_buffers())))


def retarget_data(data: bytes, constants: dict[str, bytes]) -> bytes | None:
    """An ExecuTorch data file (.ptd, FlatTensor) with each named tensor's bytes replaced by `constants[name]`, the
    layout, alignment and header unchanged; None when a name is missing or its size differs."""
    from executorch.extension.flat_tensor.serialize.serialize import FlatTensorHeader, _deserialize_to_flat_tensor
    header = FlatTensorHeader.from_bytes(data[8:])
    if not header.is_valid():
        return None
    flat = _deserialize_to_flat_tensor(data[:header.flatbuffer_offset + header.flatbuffer_size])
    out = bytearray(data)
    for named in flat.named_data:
        segment = flat.segments[named.segment_index]
        new = constants.get(named.key)
        if new is None or len(new) != segment.size:
            return None
        start = header.segment_base_offset + segment.offset
        out[start:start + segment.size] = new
    return bytes(out)


class ProgramReuse:
    """Per structure: the first two exports, then (if they prove it) the program every later block reuses."""

    PROOF_EXPORTS = 2

    def __init__(self):
        self._exports: dict[tuple, list[tuple]] = {}
        self._proven: dict[tuple, tuple] = {}
        self.reused = 0

    def program_for(self, structure: tuple, module: nn.Module) -> tuple[bytes, bytes, dict] | None:
        """(pte, data, memory) for this block without exporting it, or None (export it)."""
        proven = self._proven.get(structure)
        if proven is None:
            return None
        pte, data, memory = proven
        consts = constant_bytes(module)
        new = retarget_data(data, consts) if consts is not None else None
        if new is None:                   # cannot happen for a proven structure; export rather than guess
            return None
        self.reused += 1
        return pte, new, memory

    def exported(self, structure: tuple, module: nn.Module, pte: bytes, data: bytes | None, memory: dict) -> None:
        if data is None:                  # weights inside the .pte: every block's program is its own
            return
        seen = self._exports.setdefault(structure, [])
        if len(seen) >= self.PROOF_EXPORTS:
            return
        consts = constant_bytes(module)
        seen.append((pte, data, memory, consts))
        if len(seen) == self.PROOF_EXPORTS and self._proves(seen):
            self._proven[structure] = seen[0][:3]

    @staticmethod
    def _proves(seen: list[tuple]) -> bool:
        (pte0, data0, _, consts0), *others = seen
        if consts0 is None or retarget_data(data0, consts0) != data0:
            return False
        return all(pte == pte0 and consts is not None and retarget_data(data0, consts) == data
                   for pte, data, _, consts in others)
