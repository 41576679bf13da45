"""Predicted memory of one training step and storage of a bundle, from the architecture alone (no weights).

The step program (program.py) is built with fake CPU tensors and one step (forward + backward) is traced op by op
(tracker.py): the tracker's peak is the activation arena. Everything else is counted from the program:

    footprint_bytes  (dirty anonymous memory: what a phone counts)
               = lora_params         fp32 (bf16 with --precision bf16)
               + adamw_states        exp_avg + exp_avg_sq: 2 x lora_params
               + gradient_sums       the loop's per-step gradient accumulators: 1 x lora_params
               + activation_arena    peak of the tensors the step creates: saved activations (with remat: the
                                     segment boundaries' streams and one segment's internals), the largest
                                     transients, the LoRA gradients (traced)
               + step_inputs         one residual-cache entry (x0 + residuals), text conditioning, noise
               + program_inputs      an exported program only: the same inputs again, in the program's planned
                                     input buffers (the runtime copies its own into them every call)
               + program_state       the ExecuTorch method's tables and XNNPACK delegates' runtimes: per
                                     instruction and per delegate (fitted by benchmarks/delegate_state.py), counted
                                     on the exported program when there is one, else from the trace
               + xnnpack_workspace   an XNNPACK program only: the workspace its bmm delegates share, as large as
                                     the largest right operand one of them packs (tracker.py `workspace_bytes`;
                                     heaptrack of ditskip-run train: xnn_plan_memory, SANA layout 5.31 MB)
               + runtime_overhead    the process itself (given: interpreter / runtime library, not traced)
               + frozen_weights      only when resident: kept blocks + embedders + head, at the given precision
                                     (int codes + scales; linears and convolutions, quantize.py)
    file-backed (weights "mapped": a memory-mapped data file, clean pages a phone does not count)
               = frozen_weights, of which one kept block's (+ the embedders and head) is the working set a
                 block-at-a-time pass needs resident at once
    peak_bytes = footprint_bytes + the file-backed working set

With `backend` given, the exported program's copies are added where they are live (tracker.py: portable programs
copy `w.t()` for the forward's matmul; XNNPACK programs for the backward's, export/graph_passes.py mm_to_bmm keeping
weights out of XNNPACK's workspace that way; the copy of the integer codes every dequantization reads; a bmm operand
eager torch passes as a strided view), and the XNNPACK workspace and the planned input buffers outside the trace.
Attention: "flash" traces torch's CPU flash kernel (what eager CPU runs: no N x N matrix kept); "math" the plain
softmax(QK^T)V graph (what the ExecuTorch program runs, STACK.md: no SDPA backward kernel there).
FLOPs come from torch's FlopCounterMode over the same traced step (matmuls and attention, forward + backward).
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass

from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.flop_counter import FlopCounterMode

from ..runtime.contract import WEIGHT_PLACEMENTS
from .program import StepConfig, build_step_program
from .tracker import SavedTensorBytes, StepMemoryTracker, storage_keys

GIB = 1024 ** 3
MIB = 1024 ** 2


@dataclass
class StepTrace:
    frozen_weights_bytes: int
    lora_params_bytes: int
    lora_grads_bytes: int
    activation_arena_bytes: int            # traced step peak (includes the LoRA gradients)
    saved_activations_bytes: int           # of which: what autograd saves for backward (distinct storages)
    cache_entry_bytes: int                 # x0 + residuals, as the step reads them
    cache_entry_stored_bytes: int          # the same, as residual_cache.py stores them (fp32)
    text_conditioning_bytes: int
    noise_bytes: int
    flops: int                             # forward + backward, one step
    lora_param_count: int
    frozen_param_count: int
    largest_block_frozen_bytes: int = 0    # one kept block's frozen weights
    non_block_frozen_bytes: int = 0        # embedders + head
    kernel_calls: int = 0                  # ops of the step that are kernel calls (not views): stands in for the
                                           # program's instructions
    xnnpack_delegates: int = 0             # backend "xnnpack": the program's delegates for these ops (tracker.py)
    backend: str | None = None             # the ExecuTorch program's backend traced for; None: eager torch
    xnnpack_workspace_bytes: int = 0       # backend "xnnpack": the largest right operand a bmm delegate packs


def _sdpa_context(attention: str):
    if attention == "flash":
        return contextlib.nullcontext()
    if attention == "math":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel([SDPBackend.MATH])
    raise ValueError(f"attention {attention!r}: expected 'flash' or 'math'")


def program_preexisting(prog) -> set[int]:
    x0, noise, t, cond, entry = prog.inputs
    return storage_keys(list(prog.module.parameters()) + [b for b in prog.module.buffers()]
                        + [x0, noise, t, *cond.values(), *entry.values()])


def trace_step(cfg: StepConfig, attention: str = "flash", count_flops: bool = True,
               backend: str | None = None) -> StepTrace:
    """backend: the ExecuTorch program's backend ("portable" | "xnnpack"), whose transposed weight copies around
    matmuls the tracker adds (tracker.py `weight_transposes`); None: the step as eager torch runs it."""
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    prog = build_step_program(cfg, fake_mode=fake)
    flops = FlopCounterMode(display=False) if count_flops else contextlib.nullcontext()
    with fake:
        pre = program_preexisting(prog)
        saved = SavedTensorBytes(pre)
        tracker = StepMemoryTracker(pre, weight_transposes=backend)
        # FlopCounterMode (and an outer saved-tensor hook) keep the activations torch.utils.checkpoint would drop:
        # with checkpointing, memory is traced alone and FLOPs are counted in a second pass
        ckpt = cfg.gradient_checkpointing or bool(cfg.remat_every)
        count_saved = saved if not ckpt else (lambda: contextlib.nullcontext())
        with _sdpa_context(attention), (contextlib.nullcontext() if ckpt else flops), tracker:
            with count_saved():
                loss = prog.loss()
            loss.backward()
        if ckpt and count_flops:
            with _sdpa_context(attention), flops:
                prog.loss().backward()
        lora_bytes = prog.lora_bytes()
        largest_lora = max((p.numel() * p.element_size() for p in prog.lora_params), default=0)
        # AdamW's step (after backward, activations freed): gradients + about two parameter-sized temporaries
        # a program's arena: graph lifetimes (a tensor freed after its last reader, tracker.graph_peak_bytes), as its
        # memory plan has them; eager torch keeps what Python still references
        traced = tracker.graph_peak_bytes() if backend else tracker.peak_bytes
        arena = max(traced, lora_bytes + 2 * largest_lora)
        inputs = prog.input_bytes()
        x0, _, _, _, entry = prog.inputs
        stored = sum(v.numel() * 4 for v in [x0, *entry.values()])
        return StepTrace(
            frozen_weights_bytes=prog.frozen_bytes(), lora_params_bytes=lora_bytes, lora_grads_bytes=lora_bytes,
            activation_arena_bytes=arena, saved_activations_bytes=saved.bytes,
            cache_entry_bytes=inputs["cache_entry_bytes"], cache_entry_stored_bytes=stored,
            text_conditioning_bytes=inputs["text_conditioning_bytes"], noise_bytes=inputs["noise_bytes"],
            flops=int(flops.get_total_flops()) if count_flops else 0,
            lora_param_count=sum(p.numel() for p in prog.lora_params),
            frozen_param_count=_frozen_param_count(prog),
            largest_block_frozen_bytes=prog.largest_block_frozen_bytes(),
            non_block_frozen_bytes=prog.frozen_bytes() - sum(_block_sizes(prog)),
            kernel_calls=tracker.kernel_calls, xnnpack_delegates=tracker.xnnpack_delegates, backend=backend,
            xnnpack_workspace_bytes=tracker.workspace_bytes)


def _block_sizes(prog) -> list[int]:
    blocks = set(map(id, getattr(getattr(prog.module, "view", None), "blocks", [])))
    return [b for m, b in zip(prog.frozen_modules, prog.frozen_bytes_per_module()) if id(m) in blocks]


def _frozen_param_count(prog) -> int:
    seen, n = set(), 0
    for m in prog.frozen_modules:
        for name, p in m.named_parameters():
            if "lora_" not in name and id(p) not in seen:
                seen.add(id(p))
                n += p.numel()
        for name, b in m.named_buffers():          # quantized linears / convs: count the weight they stand for
            if name.endswith("w_codes") and id(b) not in seen:
                seen.add(id(b))
                n += b.numel()
            elif name.endswith("w_packed") and id(b) not in seen:
                seen.add(id(b))
                n += 2 * b.numel()
    return n


WEIGHTS = WEIGHT_PLACEMENTS
# What an ExecuTorch method holds beyond its planned arena per instruction (every kernel or delegate call, move and
# free: the method's instruction, argument and value tables) and in addition per XNNPACK delegate (its XNNPACK
# runtime), in RssAnon bytes. Fitted apart from any model on chains of small matmuls (benchmarks/delegate_state.py ->
# benchmarks/results/delegate_state.md).
PROGRAM_STATE_BYTES_PER_INSTRUCTION = 528
PROGRAM_STATE_BYTES_PER_DELEGATE = 2665


def program_state_bytes(instructions: int, delegates: int) -> int:
    return PROGRAM_STATE_BYTES_PER_INSTRUCTION * instructions + PROGRAM_STATE_BYTES_PER_DELEGATE * delegates


@dataclass
class MemoryEstimate:
    weights: str                           # "resident" (in anonymous memory) | "mapped" (a clean file mapping)
    frozen_weights_bytes: int
    lora_params_bytes: int
    adamw_states_bytes: int
    gradient_sums_bytes: int
    activation_arena_bytes: int
    step_inputs_bytes: int
    runtime_overhead_bytes: int
    program_state_bytes: int               # the method's tables and XNNPACK runtimes (program_state_bytes())
    program_inputs_bytes: int              # the program's planned input buffers (a program: step_inputs again)
    xnnpack_workspace_bytes: int           # XNNPACK's shared workspace (an XNNPACK program)
    footprint_bytes: int                   # dirty anonymous memory: what a phone counts
    file_backed_bytes: int                 # mapped frozen weights (0 when resident)
    file_backed_working_set_bytes: int     # of which resident at once in a block-at-a-time pass
    peak_bytes: int                        # footprint + the file-backed working set

    @staticmethod
    def from_trace(tr: StepTrace, runtime_overhead_bytes: int, weights: str = "resident",
                   program: dict | None = None) -> "MemoryEstimate":
        """program: {"instructions", "xnnpack_delegates"} of the exported program when there is one; without it
        the trace's counts stand in (its kernel calls for the instructions; delegates predicted by tracker.py's
        rule); a trace of eager torch (no backend) has no program state."""
        if weights not in WEIGHTS:
            raise ValueError(f"weights {weights!r}: expected one of {WEIGHTS}")
        inputs = tr.cache_entry_bytes + tr.text_conditioning_bytes + tr.noise_bytes
        counts = program or {"instructions": tr.kernel_calls, "xnnpack_delegates": tr.xnnpack_delegates}
        exported = bool(program or tr.backend)
        state = program_state_bytes(counts["instructions"], counts["xnnpack_delegates"]) if exported else 0
        anon = dict(lora_params_bytes=tr.lora_params_bytes, adamw_states_bytes=2 * tr.lora_params_bytes,
                    gradient_sums_bytes=tr.lora_params_bytes, activation_arena_bytes=tr.activation_arena_bytes,
                    step_inputs_bytes=inputs, runtime_overhead_bytes=runtime_overhead_bytes,
                    program_state_bytes=state, program_inputs_bytes=inputs if exported else 0,
                    xnnpack_workspace_bytes=tr.xnnpack_workspace_bytes)
        mapped = weights == "mapped"
        footprint = sum(anon.values()) + (0 if mapped else tr.frozen_weights_bytes)
        working = tr.largest_block_frozen_bytes + tr.non_block_frozen_bytes if mapped else 0
        return MemoryEstimate(weights=weights, frozen_weights_bytes=tr.frozen_weights_bytes, **anon,
                              footprint_bytes=footprint, file_backed_bytes=tr.frozen_weights_bytes if mapped else 0,
                              file_backed_working_set_bytes=working, peak_bytes=footprint + working)

    @property
    def step_bytes(self) -> int:
        """Peak minus the runtime overhead: what the model and the step add to a process."""
        return self.peak_bytes - self.runtime_overhead_bytes

    def to_json(self) -> dict:
        d = asdict(self)
        d.update({k.replace("_bytes", "_gib"): round(v / GIB, 3) for k, v in asdict(self).items()
                  if k.endswith("_bytes")})
        return d


def weight_reads(tr: StepTrace, remat_every: int, flash_bytes_per_s: float = 1.5e9) -> dict:
    """What one step reads of the frozen weights: forward, backward (the dequantized weights are recomputed for the
    input gradients) and, with remat, the recomputed forward (all of it: an upper bound, the program keeps the last
    group's activations instead). From a mapped file these reads come from the page
    cache while the weights stay resident, from flash when the system has dropped them (the worst case priced at
    a phone's sustained flash read, default 1.5 GB/s)."""
    passes = 2 + (1 if remat_every else 0)
    read = passes * tr.frozen_weights_bytes
    return {"passes_over_frozen_weights": passes, "bytes_per_step": read,
            "flash_seconds_per_step_worst_case": round(read / flash_bytes_per_s, 3),
            "flash_bytes_per_s": flash_bytes_per_s}


def storage_estimate(tr: StepTrace, num_samples: int) -> dict:
    """Bytes on flash: the bundle's model part (frozen kept weights at the precision + text conditioning) and the
    residual cache (one fp32 entry per scheduled sample; a cache codec compresses it, see cache-report)."""
    bundle = tr.frozen_weights_bytes + tr.text_conditioning_bytes
    cache = num_samples * tr.cache_entry_stored_bytes
    return {"bundle_model_bytes": bundle, "cache_entry_bytes": tr.cache_entry_stored_bytes,
            "num_samples": num_samples, "cache_bytes": cache,
            "bundle_model_gib": round(bundle / GIB, 3), "cache_gib": round(cache / GIB, 3)}
