"""What an XNNPACK inference program of convolutions holds while it runs (the subject stage's encoder programs),
predicted from an eager trace of the module on fake tensors.

The encoder programs are lowered with export/xnnpack_partition.rounding_only_partitioner: convolutions, matmuls and
the elementwise add / sub / mul, pads, copies and layout go to XNNPACK; group norm, sigmoid (SiLU is sigmoid * x in
the program, the mul delegated), division, softmax and the rest stay on the portable kernels. Consecutive delegated
ops form one delegate (the partitioner merges connected supported nodes; in an encoder's chain of blocks they are
the consecutive ones: FLUX's ResnetBlock2D is [mul, conv1] and [mul, conv2, add], its downsampler [pad, conv]).
What the process then holds, anonymous memory (heaptrack of ditskip-run personalize on the FLUX real-width bundle
and of the Python runtime on the same encoder at 64 px, benchmarks/results/real_scale.md):

    packed_weights   XNNPACK's copy of every constant convolution / linear weight (+ bias), packed when the program
                     loads (xnn_create_convolution2d_nhwc_f32: fp32, channels padded to the kernel's tile): the
                     encoder's fp32 weights, mapped data file or not. Counted by the caller (its weights' bytes).
    arena            ExecuTorch's planned memory: the tensors OUTSIDE the delegates (the portable ops' outputs and
                     the delegates' outputs, graph lifetimes), placed as ExecuTorch's greedy planner places them
                     (exir/memory_planning.py greedy / pick_shared_obj: largest first, equal sizes latest-defined
                     first, each into the first bucket none of whose tensors' lifetimes overlaps, else at the top of
                     the overlapping ones, else a new bucket; the arena is the buckets' sum, allocated when the
                     method loads). FLUX's ResnetBlock2D at 256 px: the residual, the group norm's output, the
                     sigmoid's, the delegate's output at once: 4 x 32 MiB (128 MiB planned); DC-AE's ResBlock
                     (SANA): 4 live at once, 5 buckets (160 MiB planned, the bundle's manifest).
    workspace        one XNNPACK workspace shared by every delegate (ExecuTorch's XNNWorkspaceManager, global), as
                     large as the largest delegate's internal values need: XNNPACK runs a convolution in NHWC, so a
                     delegate copies an NCHW input of a convolution to NHWC, writes the convolution's output in NHWC,
                     brings an NCHW operand of an elementwise op to NHWC beside an NHWC one, and copies an NHWC
                     result out to its NCHW output; each value lives from its node to its last reader in the
                     delegate. FLUX at 256 px: [conv_in] 1 x 32 MiB, [mul, conv1] 2 x, [mul, conv2, add] 3 x.
                     When a delegate needs more, XNNPACK allocates the larger workspace zeroed before it frees the
                     old one (xnn_plan_memory): the old and the new are resident at once, 2 + 3 = 5 x 32 MiB at the
                     FLUX encoder's peak.
    indirection      each k x k convolution (k > 1) keeps an indirection buffer from its first run on: kh * kw
                     pointers per output pixel (xnn_reshape_convolution2d_nhwc_f32; 4.5 MiB per 3 x 3 convolution
                     at 256 x 256).

    program peak = the arena + max over the program's steps of (workspace (with its growth transient) + the
                   indirection buffers so far); the packed weights beside it.

An all-portable program (generation's decode programs with GenerationPrograms.backend "portable":
export/generation_stage.py _decode_part) is the same recording with ProgramOps(portable=True): no delegate, no
workspace, every op's buffer in the arena, planned by the same greedy_arena_bytes (memory_estimate/generation.py
decoder_program_memory; SANA-1600M's decode_8x8.pte: 201,326,592 bytes planned, reproduced to the byte,
tests/test_decoder_arena_estimate.py). The XNNPACK decode programs (export/conv_matmul.py: every convolution as
im2col bands + a bmm delegate) are recorded the same way with models/conv_matmul.ConvsAsMatmuls entered after
ProgramOps: the bmm's operands and output are arena buffers as a portable op's are, and the workspace is the
largest band the bmm packs (tests/test_decoder_xnnpack.py).
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

POINTER_BYTES = 8              # an indirection buffer's entries (64-bit phones and hosts)
PLAN_ALIGNMENT = 16            # ExecuTorch's MemoryPlanningPass rounds every buffer up to this (TensorSpec.realign)

_aten = torch.ops.aten
# rounding_only_partitioner's op set (export/xnnpack_partition.ROUNDING_ONLY_CONFIGS) as eager aten ops
XNNPACK_OPS = {_aten.convolution.default, _aten.addmm.default, _aten.mm.default, _aten.bmm.default,
               _aten.add.Tensor, _aten.sub.Tensor, _aten.mul.Tensor, _aten.add.Scalar, _aten.sub.Scalar,
               _aten.mul.Scalar, _aten.cat.default, _aten.clone.default, _aten._to_copy.default,
               _aten.constant_pad_nd.default, _aten.max_pool2d_with_indices.default, _aten.relu.default,
               _aten.clamp.default, _aten.hardtanh.default, _aten.maximum.default, _aten.minimum.default,
               _aten.abs.default, _aten.neg.default, _aten.permute.default}
ELEMENTWISE = {_aten.add.Tensor, _aten.sub.Tensor, _aten.mul.Tensor, _aten.maximum.default, _aten.minimum.default}
_PERMUTES = {_aten.permute.default, _aten.transpose.int}
# views that stay views in a portable program (ExecuTorch's replace_view_copy_with_view_pass: view_copy -> memory.view)
_RESHAPES = {_aten.view.default, _aten._reshape_alias.default, _aten.alias.default, _aten.detach.default,
             _aten._unsafe_view.default}


def _safe_softmax_steps(args, out):
    """torch's decomposition of _safe_softmax as the program holds it: softmax, then the rows that are all -inf
    (eq, logical_not, any, logical_not: `all` decomposed) replaced by zeros (full_like, where)."""
    x, dim = args[0], args[1]
    n, rows = x.numel(), x.numel() // x.shape[dim]
    return [("sm", _aten._softmax.default, ["in"], _nbytes(out)), ("eq", _aten.eq.Scalar, ["in"], n),
            ("ne", _aten.logical_not.default, ["eq"], n), ("any", _aten.any.dim, ["ne"], rows),
            ("all", _aten.logical_not.default, ["any"], rows), ("zeros", _aten.full_like.default, ["sm"], _nbytes(out)),
            ("out", _aten.where.self, ["all", "zeros", "sm"], None)]


# ops a portable program holds as several (name, op, the steps it reads, buffer bytes); "out" writes the result:
# SiLU as sigmoid * x (to_edge), addmm as mm + add (export/graph_passes.addmm_to_mm_add: the programs' mm_rewrite)
_PORTABLE_DECOMPOSED = {
    _aten.silu.default: lambda a, out: [("sig", _aten.sigmoid.default, ["in"], _nbytes(out)),
                                        ("out", _aten.mul.Tensor, ["in", "sig"], None)],
    _aten.addmm.default: lambda a, out: [("mm", _aten.mm.default, ["in"], _nbytes(out)),
                                         ("out", _aten.add.Tensor, ["in", "mm"], None)],
    _aten._safe_softmax.default: _safe_softmax_steps,
}
_METADATA = {_aten.sym_size.int, _aten.sym_numel.default, _aten.sym_stride.int, _aten.sym_storage_offset.default}


def _nbytes(t: torch.Tensor) -> int:
    return t.untyped_storage().nbytes()


class ProgramOps(TorchDispatchMode):
    """The ops of fn() as the program runs them: (xnnpack?, op, input keys, [(output key, bytes)], conv info).
    SiLU is recorded as the program has it: a portable sigmoid, then a delegated mul. A permute or transpose of an
    activation is a view in eager torch and a copy in the program (permute_copy, delegated: DC-AE's RMSNorm2d
    permutes its input to channels-last and back).

    portable=True: the ops as an all-portable program holds them (the decode programs: export/generation_stage.py
    _decode_part): nothing delegated, and every view but a reshape is a copy in the program (to_edge makes permute,
    transpose, expand, slice, select, split, (un)squeeze their _copy ops, each with its own planned buffer; a
    weight's too: the decode programs' weights are inputs; view_copy becomes a view of its base), a view whose
    shape is its input's excepted (ExecuTorch's RemoveNoopPass drops a slice_copy that keeps the shape). A reshape
    that eager torch makes a clone of a non-contiguous view stays a clone in the program (export traces the strides
    eager torch has: a permute_copy or expand_copy is followed by that clone). The ops to_edge or the export's
    passes split are recorded as their parts (_PORTABLE_DECOMPOSED: SiLU, addmm, _safe_softmax); a dropout's clone
    needs ExportedDropouts beside, the attention's math decomposition the MATH SDPA backend."""

    def __init__(self, preexisting: list[torch.Tensor] = (), portable: bool = False):
        super().__init__()
        self.portable = portable
        self.ops: list[dict] = []
        self._uid: dict[int, int] = {}        # a live storage -> its key (a storage freed and reused gets a new one)
        self._next = 0
        self._copies: dict[int, int] = {}     # id(a permuted view, alive) -> the key of the program's copy
        self._pre = {self.key(t) for t in preexisting}

    def key(self, t: torch.Tensor) -> int:
        """The tensor's storage as a key unique over the trace (nothing is kept alive: the eager trace beside this
        one frees what torch frees)."""
        st = t.untyped_storage()
        k = st._cdata
        if k not in self._uid:
            self._next += 1
            self._uid[k] = self._next
            weakref.finalize(st, self._uid.pop, k, None)
        return self._uid[k]

    def _alias(self, view: torch.Tensor, key: int) -> None:
        self._copies[id(view)] = key
        weakref.finalize(view, self._copies.pop, id(view), None)

    def _in_key(self, t: torch.Tensor) -> int:
        return self._copies.get(id(t)) or self.key(t)

    def _virtual_key(self) -> int:
        """A tensor the program has and eager torch does not (a permute's copy, SiLU's sigmoid)."""
        self._next += 1
        return self._next

    def _portable_op(self, func, args, kwargs, out):
        """__torch_dispatch__ for portable=True (class docstring)."""
        if func in _METADATA or func.namespace != "aten":
            return out
        src = args[0] if args and isinstance(args[0], torch.Tensor) else None
        views = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        kept = func is _aten.slice.Tensor and views[0].shape == src.shape
        if (func.is_view or func in _RESHAPES) and (func in _RESHAPES or kept):
            if src is not None and id(src) in self._copies:
                for v in views:
                    self._alias(v, self._copies[id(src)])        # a view of the program's copy reads the copy
            return out
        if func.is_view:
            copies = []
            for v in views:
                k = self._virtual_key()
                self._alias(v, k)
                copies.append((k, v.numel() * v.element_size()))
            self._record(False, func, [self._in_key(src)], copies, conv=None)
            return out
        ins = [self._in_key(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        outs = [(self.key(t), _nbytes(t)) for t in views]
        steps = _PORTABLE_DECOMPOSED.get(func)
        if steps is None:
            self._record(False, func, ins, outs, conv=None)
            return out
        keys = {"in": ins, "out": outs}                     # a step's name -> its (reads, or its buffer's) keys
        for name, op, reads, size in steps(args, out):
            if name == "out":
                self._record(False, op, [k for r in reads for k in keys[r]], outs, conv=None)
                break
            k = self._virtual_key()
            self._record(False, op, [k2 for r in reads for k2 in keys[r]], [(k, size)], conv=None)
            keys[name] = [k]
        return out

    def _record(self, xnn, func, inputs, outputs, **extra):
        self.ops.append({"xnnpack": xnn, "op": func, "inputs": inputs, "outputs": outputs, **extra})

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.portable:
            return self._portable_op(func, args, kwargs, out)
        if func in _PERMUTES and isinstance(out, torch.Tensor) and self.key(args[0]) not in self._pre \
                and out.dim() > 1 and out.shape != args[0].shape:
            copy = self._virtual_key()
            self._alias(out, copy)
            self._record(True, func, [self._in_key(args[0])], [(copy, out.numel() * out.element_size())], conv=None)
            return out
        if func.is_view or func in _METADATA or func.namespace != "aten":
            if func.is_view and isinstance(out, torch.Tensor) and isinstance(args[0], torch.Tensor) \
                    and id(args[0]) in self._copies:
                self._alias(out, self._copies[id(args[0])])      # a view of the program's copy reads the copy
            return out
        ins = [self._in_key(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        outs = [(self.key(t), _nbytes(t)) for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        if func is _aten.silu.default:
            sig = self._virtual_key()
            self._record(False, _aten.sigmoid.default, ins, [(sig, outs[0][1])])
            self._record(not self.portable, _aten.mul.Tensor, ins + [sig], outs, conv=None)
            return out
        conv = None
        if func is _aten.convolution.default:
            kh, kw = args[1].shape[2:] if args[1].dim() == 4 else (1, 1)
            oh, ow = (out.shape[2:] if out.dim() == 4 else (1, 1))
            conv = {"kernel": (int(kh), int(kw)), "out_pixels": int(oh) * int(ow), "input": self._in_key(args[0])}
        self._record(func in XNNPACK_OPS and not self.portable, func, ins, outs, conv=conv,
                     four_d=[self._in_key(t) for t in tree_flatten(args)[0]
                             if isinstance(t, torch.Tensor) and t.dim() == 4])
        return out


class ExportedDropouts(TorchFunctionMode):
    """F.dropout outside training as torch.export traces it: a clone (torch._decomp's dropout), a buffer of its own
    in the program where eager torch returns its input (AutoencoderKL's ResnetBlock2D before conv2, its attention's
    output projection). Entered beside ProgramOps(portable=True)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.dropout:
            p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
            train = args[2] if len(args) > 2 else kwargs.get("training", True)
            if not (train and p != 0):
                return args[0].clone()
        return func(*args, **kwargs)


def greedy_arena_bytes(specs: list[tuple[int, int, int]]) -> int:
    """ExecuTorch's greedy memory plan of (first step, last step, bytes) tensors, in definition order: the sum of its
    buckets (exir/memory_planning.py greedy with allow_overlapping_allocations, ExecuTorch 1.5.1), each buffer
    rounded up to PLAN_ALIGNMENT bytes."""
    specs = [(first, last, -(-n // PLAN_ALIGNMENT) * PLAN_ALIGNMENT) for first, last, n in specs]
    order = sorted(range(len(specs)), key=lambda i: (-specs[i][2], -i))
    buckets: list[dict] = []                           # {"size", "allocs": [(offset, first, last, bytes)]}

    def overlaps(a, first, last):
        return not (last < a[1] or first > a[2])
    for i in order:
        first, last, n = specs[i]
        placed = False
        for b in buckets:
            if not any(overlaps(a, first, last) for a in b["allocs"]):
                b["allocs"].append((0, first, last, n))
                placed = True
                break
        if not placed:
            for b in buckets:
                top = max((a[0] + a[3] for a in b["allocs"] if overlaps(a, first, last)), default=0)
                if top > 0 and top + n <= b["size"]:
                    b["allocs"].append((top, first, last, n))
                    placed = True
                    break
        if not placed:
            buckets.append({"size": n, "allocs": [(0, first, last, n)]})
    return sum(b["size"] for b in buckets)


def _delegates(ops: list[dict]) -> list[list[int]]:
    """Runs of consecutive delegated ops (op indices)."""
    runs, cur = [], []
    for i, o in enumerate(ops):
        if o["xnnpack"]:
            cur.append(i)
        elif cur:
            runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    return runs


def _delegate_workspace(ops: list[dict], members: list[int], read_after: set[int], sizes: dict[int, int]) -> int:
    """The delegate's internal values' peak (module docstring): its nodes in order, NHWC copies as nodes of their
    own, a value live from its node to its last reader (an NHWC output: to its copy out)."""
    inside = {k for i in members for k, _ in ops[i]["outputs"]}
    nhwc: set[int] = set()
    nodes: list[tuple[list[int], list[tuple[int, int]]]] = []    # (reads, writes (key, bytes)) per node
    copy_id = 0

    def to_nhwc(k):
        nonlocal copy_id
        copy_id -= 1
        c = ("nhwc", copy_id)
        nodes.append(([k], [(c, sizes.get(k, 0))]))
        return c

    for i in members:
        o = ops[i]
        reads = list(o["inputs"])
        if o["conv"] is not None:
            x = o["conv"]["input"]
            if x not in nhwc:
                c = to_nhwc(x)
                reads = [c if r == x else r for r in reads]
            nodes.append((reads, o["outputs"]))
            for k, _ in o["outputs"]:
                nhwc.add(k)
            continue
        layout_nhwc = any(r in nhwc for r in reads)
        if layout_nhwc and o["op"] in ELEMENTWISE:
            four = set(o.get("four_d", []))
            reads = [to_nhwc(r) if (r in four and r not in nhwc) else r for r in reads]
        nodes.append((reads, o["outputs"]))
        if layout_nhwc:
            for k, _ in o["outputs"]:
                nhwc.add(k)
    # the delegate's outputs: an NHWC one is copied out (it lives to that copy); an NCHW one is the external buffer
    outs = [k for k in inside if k in read_after]
    nodes.append(([k for k in outs if k in nhwc], []))
    born, last = {}, {}
    for n, (reads, writes) in enumerate(nodes):
        for r in reads:
            last[r] = n
        for k, b in writes:
            if not (k in read_after and k not in nhwc):      # internal, or an NHWC output's NHWC value
                born[k] = (n, b)
                last.setdefault(k, n)
    peak = 0
    for n in range(len(nodes)):
        peak = max(peak, sum(b for k, (s, b) in born.items() if s <= n <= last.get(k, s)))
    return peak


def xnnpack_program_memory(fn, preexisting: list[torch.Tensor], inputs: list[torch.Tensor]) -> dict:
    """Trace fn() (fake tensors) and predict its XNNPACK inference program's memory (module docstring), bytes:
    arena_bytes, workspace_bytes (the largest delegate's), workspace_peak_bytes (with the growth transient),
    indirection_bytes (all convolutions), peak_bytes (the program's, packed weights excluded), delegates."""
    rec = ProgramOps(preexisting)
    with torch.no_grad(), rec:
        result = fn()
    return program_memory_of(rec, preexisting, inputs, result)


def portable_program_memory(fn, preexisting: list[torch.Tensor], inputs: list[torch.Tensor], below=(),
                            above=()) -> dict:
    """Trace fn() (fake tensors) as the export traces an all-portable inference program (row-major pixel shuffles,
    math attention, dropouts as clones) and predict its memory with ProgramOps(portable=True): program_memory_of's
    figures, arena_bytes the greedy plan of every op's buffer. preexisting: what no op makes (weights; an input the
    program does not plan); inputs: the planned inputs. below / above: dispatch modes entered before / after the
    recording (e.g. a FLOP counter below; models/conv_matmul.ConvsAsMatmuls above, whose ops it then records)."""
    import contextlib

    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ..models.layout import contiguous_pixel_shuffles
    rec = ProgramOps(preexisting, portable=True)
    with contextlib.ExitStack() as stack:
        for mode in (torch.no_grad(), sdpa_kernel([SDPBackend.MATH]), contiguous_pixel_shuffles(), ExportedDropouts(),
                     *below, rec, *above):
            stack.enter_context(mode)
        result = fn()
    return program_memory_of(rec, preexisting, inputs, result)


def program_memory_of(rec: ProgramOps, preexisting: list[torch.Tensor], inputs: list[torch.Tensor], result) -> dict:
    """xnnpack_program_memory of ops already recorded (`rec` entered around fn() beside another trace of it)."""
    ops = rec.ops
    pre = {rec.key(t) for t in preexisting}
    sizes = {k: b for o in ops for k, b in o["outputs"]}
    sizes.update({rec.key(t): _nbytes(t) for t in list(inputs) + list(preexisting)})
    final = {rec.key(t) for t in tree_flatten(result)[0] if isinstance(t, torch.Tensor)}
    runs = _delegates(ops)
    step_of = {}                                        # op index -> program step (a delegate is one step)
    step = 0
    in_run = {i: r for r in runs for i in r}
    for i in range(len(ops)):
        if i in in_run and i != in_run[i][0]:
            step_of[i] = step_of[in_run[i][0]]
            continue
        step_of[i] = step
        step += 1
    steps = step
    last_step: dict[int, int] = {}
    for i, o in enumerate(ops):
        for k in o["inputs"]:
            last_step[k] = max(last_step.get(k, -1), step_of[i])
    # external values: the program's inputs, the portable ops' outputs, the delegates' outputs read by a later step
    # (or the result); a delegate's values read only inside it are internal (its workspace)
    internal: set[int] = set()
    delegate_rows = []
    for r in runs:
        s = step_of[r[0]]
        inside = {k for i in r for k, _ in ops[i]["outputs"]}
        read_after = {k for k in inside if last_step.get(k, -1) > s or k in final}
        internal |= inside - read_after
        delegate_rows.append({"step": s, "ops": len(r), "read_after": read_after, "members": r})
    delta = [0] * (steps + 2)
    specs: list[tuple[int, int, int]] = []             # (first step, last step, bytes) in definition order
    for t in inputs:
        k = rec.key(t)
        delta[0] += _nbytes(t)
        delta[last_step.get(k, 0) + 1] -= _nbytes(t)
        specs.append((0, last_step.get(k, 0), _nbytes(t)))
    for i, o in enumerate(ops):
        for k, b in o["outputs"]:
            if k in internal or k in pre:
                continue
            end = steps if k in final else max(last_step.get(k, step_of[i]), step_of[i])
            delta[step_of[i]] += b
            delta[end + 1] -= b
            specs.append((step_of[i], end, b))
    arena = greedy_arena_bytes(specs)
    arena_live, live = [], 0
    for s in range(steps + 1):
        live += delta[s]
        arena_live.append(live)
    # workspace (shared, grown with the old one resident during the growth) and indirection buffers, per step
    extra = [0] * (steps + 1)
    ws_max, indirection, largest = 0, 0, 0
    ws_at = {d["step"]: _delegate_workspace(ops, d["members"], d["read_after"], sizes) for d in delegate_rows}
    conv_ind = {}
    for i, o in enumerate(ops):
        c = o["conv"] if o["xnnpack"] else None
        if c and c["kernel"] != (1, 1):
            s = step_of[i]
            conv_ind[s] = conv_ind.get(s, 0) + c["kernel"][0] * c["kernel"][1] * c["out_pixels"] * POINTER_BYTES
    ws_peak = 0
    for s in range(steps + 1):
        indirection += conv_ind.get(s, 0)
        need = ws_at.get(s, 0)
        held = ws_max
        if need > ws_max:
            held = ws_max + need                 # the new workspace zeroed before the old one is freed
            ws_max = need
        ws_peak = max(ws_peak, held)
        extra[s] = held + indirection
        largest = max(largest, arena + extra[s])
    return {"arena_bytes": arena, "arena_live_bytes": max(arena_live), "workspace_bytes": ws_max,
            "workspace_peak_bytes": ws_peak,
            "indirection_bytes": indirection, "peak_bytes": largest, "delegates": len(runs),
            "workspaces_bytes": [ws_at[d["step"]] for d in delegate_rows]}
