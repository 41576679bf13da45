"""Generation's decode programs on XNNPACK with the weights still program inputs (read in place from the mapped
decoder.safetensors): every convolution as im2col + one matmul per band of output rows, weight on the left.

XNNPACK's convolution packs only constant weights (into anonymous memory: the subject stage's encoder, +130 MiB);
its batched matmul (bmm) takes two dynamic operands and packs only its RIGHT one, per call, into the delegate
workspace. So a convolution x [1, C, H, W] * w [O, C/g, kh, kw] (stride 1, dilation 1, any zero padding, any
groups: SANA DC-AE's depthwise 3x3 and grouped 1x1 / 5x5 included) becomes, per band of `rows` output rows:

    xp   = constant_pad_nd(x)                                    (once per convolution, padded only)
    s    = xp[:, :, r0 + dy : r0 + dy + rows, dx : dx + W]       (one slice_copy per tap; the row slice shared per dy)
    cols = cat([s.view(1, C, 1, rows, W) per tap], 2)            [1, C, kh*kw, rows, W]: each channel's taps in w's
                                                                 own order, so w needs only a view (no copy)
    y    = bmm(w.view(g, O/g, C/g*kh*kw), cols.view(g, C/g*kh*kw, rows*W)) (+ b.view(g, O/g, 1))
    out  = cat(y.view(1, O, rows, W) per band, 2)                (one band: y itself)

Only the bmm is delegated (decode_partitioner: one delegate per bmm, nothing merged); pad, slices, cats, views and
the bias add are the portable kernels' (copies and one add: O(C*kh*kw*H*W), against the product's
O(O*C/g*kh*kw*H*W)). Every other op of the decoder stays as the portable program has it. XNNPACK packs `cols`,
the band, into its workspace (anonymous, shared by every delegate, as large as the largest call's), so the band is
bounded: BAND rule (band_rows) = the fewest equal bands whose im2col buffer is at most `band_bytes` (default
DEFAULT_BAND_BYTES; a band is at least one row). Beside the portable program's buffers the arena then holds, per
convolution, the padded input, one band's slices and cols (about 2 x band_bytes) and the bands' outputs before
their cat (one output more). Summation order differs from the portable convolution's: rounding only.

One function, conv_as_matmuls, for both users: the exporter's graph pass (export/conv_matmul.py convs_to_matmuls,
decode_partitioner) and the memory estimate's eager replay (ConvsAsMatmuls below, under
memory_estimate/xnnpack_program.ProgramOps).
"""

from __future__ import annotations

import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
DEFAULT_BAND_BYTES = 8 << 20        # im2col buffer per band (benchmarks/results/decode_tiles.md)
F32 = 4


def band_rows(channels: int, kernel: tuple[int, int], width: int, rows: int, band_bytes: int) -> int:
    """Output rows per band: the fewest equal bands (the last one shorter) whose im2col buffer (channels * kh * kw
    * rows * width fp32) is at most band_bytes; at least one row."""
    per_row = channels * kernel[0] * kernel[1] * width * F32
    most = max(1, min(rows, band_bytes // per_row))          # rows that fit the bound
    return math.ceil(rows / math.ceil(rows / most))          # the same number of bands, evened out


def rewritable(x_shape, w_shape, stride, padding, dilation, transposed) -> bool:
    """Convolutions the decomposition covers: batch 1, 2-D, stride 1, dilation 1, not transposed."""
    return (len(x_shape) == 4 and x_shape[0] == 1 and len(w_shape) == 4 and not transposed
            and all(s == 1 for s in stride) and all(d == 1 for d in dilation))


def conv_as_matmuls(op, x, w, bias, x_shape, w_shape, padding, groups: int, band_bytes: int):
    """The decomposition of the module docstring. op(target, *args) applies an aten op (eagerly, or as a graph
    node); x, w, bias are the operands (bias may be None), x_shape / w_shape their shapes. Returns the output."""
    _, c, h, wd = (int(v) for v in x_shape)
    o, cg, kh, kw = (int(v) for v in w_shape)
    ph, pw = (int(p) for p in padding)
    oh, ow = h + 2 * ph - kh + 1, wd + 2 * pw - kw + 1
    g = int(groups)
    xp = op(aten.constant_pad_nd.default, x, [pw, pw, ph, ph], 0.0) if ph or pw else x
    hp, wp = h + 2 * ph, wd + 2 * pw
    taps = kh * kw
    wm = op(aten.view.default, w, [g, o // g, cg * taps])
    b3 = op(aten.view.default, bias, [g, o // g, 1]) if bias is not None else None
    rows = band_rows(c, (kh, kw), ow, oh, band_bytes)
    outs = []
    for r0 in range(0, oh, rows):
        n = min(rows, oh - r0)
        shifted = []
        for dy in range(kh):
            s1 = xp if (r0 + dy == 0 and n == hp) else op(aten.slice_copy.Tensor, xp, 2, r0 + dy, r0 + dy + n)
            for dx in range(kw):
                s = s1 if (dx == 0 and ow == wp) else op(aten.slice_copy.Tensor, s1, 3, dx, dx + ow)
                shifted.append(s)
        if taps == 1:
            cols = shifted[0]
        else:
            cols = op(aten.cat.default, [op(aten.view.default, s, [1, c, 1, n, ow]) for s in shifted], 2)
        y = op(aten.bmm.default, wm, op(aten.view.default, cols, [g, cg * taps, n * ow]))
        if b3 is not None:
            y = op(aten.add.Tensor, y, b3)
        outs.append(op(aten.view.default, y, [1, o, n, ow]))
    return outs[0] if len(outs) == 1 else op(aten.cat.default, outs, 2)


def packed_operand_bytes(x_shape, w_shape, padding, band_bytes: int) -> int:
    """The largest right operand (a band's cols) the decomposition's bmm gives XNNPACK to pack."""
    _, c, h, wd = x_shape
    _, _, kh, kw = w_shape
    oh, ow = h + 2 * padding[0] - kh + 1, wd + 2 * padding[1] - kw + 1
    return c * kh * kw * band_rows(c, (kh, kw), ow, oh, band_bytes) * ow * F32


class ConvsAsMatmuls(TorchDispatchMode):
    """Eager twin of convs_to_matmuls (the memory estimate's replay): each aten.convolution runs as
    conv_as_matmuls' ops, seen by the modes below this one (enter it after ProgramOps). packed_bytes: the largest
    band XNNPACK packs (its workspace); convs, matmuls: the convolutions rewritten, the bmm (delegates) made."""

    def __init__(self, band_bytes: int = DEFAULT_BAND_BYTES):
        super().__init__()
        self.band_bytes = band_bytes
        self.packed_bytes = 0
        self.convs = self.matmuls = 0

    def _op(self, target, *args):
        self.matmuls += target is aten.bmm.default
        return target(*args)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is aten.convolution.default:
            x, w, bias, stride, padding, dilation, transposed, _, groups = args[:9]
            if rewritable(x.shape, w.shape, stride, padding, dilation, transposed):
                self.packed_bytes = max(self.packed_bytes,
                                        packed_operand_bytes(x.shape, w.shape, padding, self.band_bytes))
                self.convs += 1
                return conv_as_matmuls(self._op, x, w, bias, x.shape, w.shape, padding, groups,
                                       self.band_bytes)
        return func(*args, **kwargs)
