"""Counting the bytes a training step allocates, op by op, on real or fake tensors.

`StepMemoryTracker` is a TorchDispatchMode: every storage an op creates is counted as live from the op's return
until its storage is freed (a weakref finalizer on the storage; torch keeps one Python object per storage), so
`peak_bytes` is the peak of the bytes that tensors created inside the mode held at once. Storages that existed
before (weights, optimizer states, inputs) are not counted: pass them as `preexisting`. On fake tensors
(FakeTensorMode) this traces a step without running it; on real CPU tensors it is the allocator-level live-tensor
peak of the step (what torch allocated, before malloc's own overhead).

`saved_tensor_bytes()` wraps a region in autograd's saved-tensor hooks and sums the distinct storages autograd
keeps for backward (activations), excluding preexisting ones (frozen weights saved by linear layers).
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def storage_keys(tensors: Iterable[torch.Tensor]) -> set[int]:
    return {storage_key(t) for t in tensors if isinstance(t, torch.Tensor)}


class StepMemoryTracker(TorchDispatchMode):
    """`weight_transposes`: count the transposed weight copy an exported program makes around a matmul whose right
    operand is a weight (the larger operand), which eager torch does without a copy:
      "portable"  the forward's `x @ w.t()`: ExecuTorch materializes the transposed view (permute_copy) for mm
      "xnnpack"   the backward's `g @ w` (w stored as is): export/graph_passes.mm_to_bmm puts the weight on the left,
                  `(w.t() @ g.t()).t()`, so `w.t()` is written to the arena; the forward's transposed view needs none
      None        eager torch: no copy
    The copy is live while the matmul runs: it raises the peak if the peak is there. A weight that is the cast of
    integer codes (int8: quantize.py multiplies the scale into the output) is transposed as codes before its cast
    (export/graph_passes.transpose_before_cast): its copy is the codes' bytes, not the fp32 weight's.

    With `weight_transposes` set (a program, not eager torch) three more things are counted:
      codes copy  the cast of frozen integer codes reads a copy of them in the arena, live with the cast's fp32
                  output: the views and transposes that follow the cast in eager torch are moved before it
                  (graph_passes.transpose_before_cast), a transpose is a permute_copy of the codes, and a view of a
                  constant reads a clone of it (edge_passes.constant_views_as_copies), mm_to_bmm's unsqueeze and a
                  1x1 convolution's [O, I] view included (`codes_copy_peak_bytes`; SANA's layout: the clone of a
                  GLUMBConv inverted conv's codes [5760, 1152] beside its fp32 cast, train_step_int8.pte)
      expands     a bmm operand that eager torch passes as a strided view (torch.matmul of a non-contiguous 3-D
                  input by a 2-D weight runs as expand + bmm on w.t()) is written out by the program (`expand_copy`
                  / `permute_copy`, planned in the arena; the copy and its source are live at once): a transient of
                  the operand's bytes (`expand_peak_bytes`). SANA's layout: x [1, 64, 1152] @ w.t() expanded to
                  [1, 1152, 1152], the cast weight and its expand_copy (train_step_int8.pte).
      workspace   "xnnpack": a bmm delegate packs its right operand into XNNPACK's workspace, which every delegate
                  of the program shares and which stays as large as the largest call needed, outside the planned
                  arena (heaptrack: `xnn_plan_memory` from XNNExecutor::prepare_args). After mm_to_bmm the right
                  operand of a 2-D matmul is the smaller one (the activations, transposed); a bmm's is its second;
                  a 1x1 convolution (graph_passes.pointwise_conv_to_mm: w @ x, input gradient w.t() @ g) packs x or
                  g. `workspace_bytes` is the largest such operand's bytes."""

    def __init__(self, preexisting: set[int] | None = None, weight_transposes: str | None = None,
                 codes_copies: bool = True):
        """codes_copies: the program's frozen codes are constants, copied before their cast (above); False: they are
        the program's inputs, read in place (generation's mapped weights: a view of an input is free and the
        weights-left matmul transposes none)."""
        super().__init__()
        self.codes_copies = codes_copies
        if weight_transposes not in (None, "portable", "xnnpack"):
            raise ValueError(f"weight_transposes {weight_transposes!r}: expected None, 'portable' or 'xnnpack'")
        self.weight_transposes = weight_transposes
        self.transpose_peak_bytes = 0             # the largest such transient
        self.preexisting = set(preexisting or ())
        self.live_bytes = 0
        self.peak_bytes = 0
        self._live: dict[int, int] = {}
        self.marks: dict[str, int] = {}           # name -> live bytes at that point (mark())
        self._int_casts: set[int] = set()         # storages that are integer codes cast to float
        self.xnnpack_delegates = 0                # "xnnpack": the delegates the program has for these ops
        self.kernel_calls = 0                     # ops that are a kernel call in a program (not views / metadata)
        self.codes_copy_peak_bytes = 0            # the largest copy of integer codes a cast reads
        self.expand_peak_bytes = 0                # the largest bmm operand the program writes out (expand_copy)
        self.workspace_bytes = 0                  # "xnnpack": the largest right operand a bmm delegate packs
        # graph lifetimes (graph_peak_bytes): per storage its creating op, its last reading op, whether Python freed it
        self._op = 0
        self._uid: dict[int, int] = {}            # storage key -> the live storage's id
        self._born: list[tuple[int, int]] = []    # id -> (op, bytes)
        self._last_use: dict[int, int] = {}       # id -> the last op that read it
        self._freed: set[int] = set()             # ids Python freed inside the trace
        self._transients: list[tuple[int, int]] = []    # (op, bytes) of the program's copies (peak_bytes' extras)

    def _track(self, t: torch.Tensor) -> None:
        st = t.untyped_storage()
        key = st._cdata
        if key in self._live or key in self.preexisting:
            return
        n = st.nbytes()
        self._live[key] = n
        self.live_bytes += n
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        self._uid[key] = len(self._born)
        self._born.append((self._op, n))
        weakref.finalize(st, self._free, key)

    def _free(self, key: int) -> None:
        self._int_casts.discard(key)
        n = self._live.pop(key, 0)
        self.live_bytes -= n
        uid = self._uid.pop(key, None)
        if uid is not None:
            self._freed.add(uid)

    def _transient(self, extra: int) -> None:
        """A copy the program makes that eager torch does not, live while this op runs."""
        self.peak_bytes = max(self.peak_bytes, self.live_bytes + extra)
        self._transients.append((self._op, extra))

    def graph_peak_bytes(self) -> int:
        """The peak with graph lifetimes, as an exported program's memory plan sees them: a storage lives from the op
        that creates it to the last op that reads it (eager torch keeps it until Python drops the last reference: a
        local variable, a module's intermediate), or to the end when it outlives the trace (the gradients, the
        loss); the program's copies as in peak_bytes."""
        ops = self._op + 1
        delta = [0] * (ops + 2)
        for uid, (born, n) in enumerate(self._born):
            end = self._last_use.get(uid, born) if uid in self._freed else ops
            delta[born] += n
            delta[end + 1] -= n
        extra = [0] * (ops + 1)
        for op, n in self._transients:
            extra[op] = max(extra[op], n)
        live, peak = 0, 0
        for op in range(ops + 1):
            live += delta[op]
            peak = max(peak, live + extra[op])
        return peak

    def mark(self, name: str) -> None:
        self.marks[name] = self.live_bytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self._op += 1
        for t in tree_flatten((args, kwargs))[0]:
            if isinstance(t, torch.Tensor):
                uid = self._uid.get(t.untyped_storage()._cdata)
                if uid is not None:
                    self._last_use[uid] = self._op
        out = func(*args, **(kwargs or {}))
        if func.namespace == "aten" and not func.is_view and func not in _METADATA_OPS:
            self.kernel_calls += 1
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._track(t)
        if self.weight_transposes == "xnnpack":
            self.xnnpack_delegates += _xnnpack_delegates(func, args)
        if (self.weight_transposes and func in _CASTS and isinstance(out, torch.Tensor) and args
                and isinstance(args[0], torch.Tensor) and not args[0].dtype.is_floating_point
                and out.dtype.is_floating_point):
            self._int_casts.add(out.untyped_storage()._cdata)
            if self.codes_copies and args[0].untyped_storage()._cdata in self.preexisting:   # frozen: a copy is read
                extra = args[0].numel() * args[0].element_size()
                self.codes_copy_peak_bytes = max(self.codes_copy_peak_bytes, extra)
                self._transient(extra)
        if self.weight_transposes and func is torch.ops.aten.mm.default:
            a, b = args[0], args[1]
            if b.numel() > a.numel() and b.is_contiguous() == (self.weight_transposes == "xnnpack"):
                codes = b.untyped_storage()._cdata in self._int_casts
                extra = b.numel() * (1 if codes else b.element_size())
                self.transpose_peak_bytes = max(self.transpose_peak_bytes, extra)
                if not codes:         # codes are transposed before their cast: that copy is counted at the cast
                    self._transient(extra)
        if self.weight_transposes and func is torch.ops.aten.bmm.default:
            extra = sum(t.numel() * t.element_size() for t in args[:2] if _written_out(t))
            if extra:
                self.expand_peak_bytes = max(self.expand_peak_bytes, extra)
                self._transient(extra)
        if self.weight_transposes == "xnnpack":
            self.workspace_bytes = max(self.workspace_bytes, _xnnpack_packed_bytes(func, args))
        return out


_aten = torch.ops.aten
_CASTS = (_aten._to_copy.default, _aten.to.dtype)
_METADATA_OPS = {_aten.sym_size.int, _aten.sym_numel.default, _aten.sym_stride.int, _aten.sym_storage_offset.default}
_ONE_DELEGATE = {_aten.bmm.default, _aten._softmax.default, _aten.softmax.int, _aten.gelu.default,
                 _aten.tanh.default}


def _written_out(t) -> bool:
    """A bmm operand eager torch passes as a strided view (an expanded or transposed weight, a transposed
    activation): the program writes it out first (expand_copy / permute_copy)."""
    return isinstance(t, torch.Tensor) and not t.is_contiguous()


def _xnnpack_packed_bytes(func, args) -> int:
    """The bytes of the right operand XNNPACK packs into its workspace for this op's bmm delegate (0: no bmm).
    2-D matmuls: the smaller operand (mm_to_bmm puts a larger right operand, a weight, on the left); a 1x1
    convolution: its input (forward) or output gradient (input gradient), the matmul's smaller operand too."""
    if func in (_aten.mm.default, _aten.addmm.default):
        a, b = args[-2], args[-1]
        return min(a.numel(), b.numel()) * b.element_size()
    if func is _aten.bmm.default:
        return args[1].numel() * args[1].element_size()
    if func is _aten.convolution.default and tuple(args[1].shape[2:]) == (1, 1):
        return args[0].numel() * args[0].element_size()
    if func is _aten.convolution_backward.default and tuple(args[2].shape[2:]) == (1, 1):
        return args[0].numel() * args[0].element_size()
    return 0


def _xnnpack_delegates(func, args) -> int:
    """XNNPACK delegates the training program has for one eager op (export/xnnpack_partition.MatmulChainPartitioner
    after graph_passes.mm_to_bmm / pointwise_conv_to_mm): one per bmm, per transpose the program writes (a
    transposed operand of a 2-D matmul reaches its bmm through an unsqueeze, so it is a delegate of its own), and
    per GELU / tanh / softmax. A 2-D matmul whose right operand is the larger (a weight) is turned around: the
    forward's x @ w.t() -> (w @ x.t()).t() is 3 (x.t(), the product, the output transpose), the backward's g @ w ->
    (w.t() @ g.t()).t() is 4; any other is 1 + its transposed operands. A 1x1 convolution is w @ x (1), its input
    gradient w.t() @ g (2). Attention's bmm take their transposes inside the delegate."""
    if func in _ONE_DELEGATE:
        return 1
    if func in (_aten.mm.default, _aten.addmm.default):
        a, b = args[-2], args[-1]
        if b.numel() > a.numel():
            return 3 if not b.is_contiguous() else 4
        return 1 + (not a.is_contiguous()) + (not b.is_contiguous())
    if func is _aten.convolution.default:
        return 1 if tuple(args[1].shape[2:]) == (1, 1) else 0
    if func is _aten.convolution_backward.default:
        return 2 if tuple(args[2].shape[2:]) == (1, 1) else 0
    return 0


class SavedTensorBytes:
    """Distinct storages autograd saves for backward inside the context, minus preexisting ones."""

    def __init__(self, preexisting: set[int] | None = None):
        self.preexisting = set(preexisting or ())
        self._seen: dict[int, int] = {}

    @property
    def bytes(self) -> int:
        return sum(self._seen.values())

    def _pack(self, t: torch.Tensor):
        st = t.untyped_storage()
        key = st._cdata
        if key not in self.preexisting and key not in self._seen:
            self._seen[key] = st.nbytes()
        return t

    @contextlib.contextmanager
    def __call__(self):
        with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t):
            yield self
