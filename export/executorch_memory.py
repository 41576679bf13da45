"""Memory report of an exported training program. Every figure is bytes and says what it counts.

- planned_arena_bytes: sum of the program's non-constant buffer sizes (the memory planner's arena: activations
  kept for the backward, gradients, the trainable LoRA weights and the step inputs, which are memory-planned, and
  temporaries).
- arena_lower_bound_bytes: the most planned bytes alive at one instruction under the program's own lifetimes: no
  placement of the same program can be smaller (memory_plan.lower_bound). arena_greedy_bytes: what ExecuTorch's
  default `greedy` placement would need for the same lifetimes (the planner actually used is `memory_planner`).
- arena_peak_by_op: at the instruction where the lower bound is reached, the live bytes grouped by the op that
  wrote them (what the arena holds at its peak).
- constant_bytes: frozen tensors the program reads (int8 codes / packed int4 + fp32 scales, float norms, ...);
  constant_bytes_in_pte: the part stored inside the .pte, external_data_bytes: the size of the external data files
  (.ptd) with `external_weights`.
- trainable_bytes: LoRA parameters (fp32). gradient_bytes: the same again (one gradient per parameter).
- optimizer_state_bytes: AdamW's two moments per trainable element (fp32), held by the runtime trainer.
- cache_bytes_per_sample: the cache-entry inputs of one step (as stored, i.e. encoded); input_bytes: all inputs.
- dequantized_weight_bytes: what the quantized linears' and convolutions' weights take as fp32: if the arena kept the
  dequantized weights alive from forward to backward it would grow by about this much (compare recompute on/off).

`traced_need(step, cfg)` is the same step run eagerly (math attention, dequantized weights recomputed in backward,
per-block torch.utils.checkpoint matching `cfg.remat`) under planner/tracker.py's StepMemoryTracker: the peak of
the bytes its tensors hold at once, as the planner traces a step. The program's arena also holds the inputs and
the LoRA parameters, which the trace counts as pre-existing: `traced_equivalent_bytes` adds them, and is what the
arena is compared with (`arena_over_traced`).
"""

from __future__ import annotations

import contextlib
from collections import Counter

import torch

from ditskip_edge.quantize import QUANT_LAYERS, QuantLinear


def _planned(et_program):
    from .memory_plan import planned_specs
    return planned_specs(et_program.exported_program().graph_module)


def arena_breakdown(et_program, top: int = 12) -> dict:
    """Lower bound, greedy's arena for the same lifetimes, and what is alive at the lower bound's instruction."""
    from executorch.exir.memory_planning import greedy

    from .memory_plan import lower_bound, peak_instruction
    specs = _planned(et_program)
    just = [s for s, _ in specs]
    gm = et_program.exported_program().graph_module
    try:
        # in the program's order, not a set's: greedy sorts by size with ties in the order it is given, and a set's
        # order (object ids) made the figure change from run to run
        greedy_bytes = sum(greedy(16, list(dict.fromkeys(just)), gm, None, 0).bufsizes)
    except Exception:     # noqa: BLE001 - a figure for the report only
        greedy_bytes = -1
    t = peak_instruction(just)
    by = Counter()
    for s, origin in specs:
        if s.lifetime[0] <= t <= s.lifetime[1]:
            by[origin] += s.allocated_memory
    return {"arena_lower_bound_bytes": lower_bound(just), "arena_greedy_bytes": greedy_bytes,
            "arena_peak_by_op": dict(by.most_common(top))}


def method_instructions(et_program) -> int:
    """Instructions of the program's method: one per portable kernel call, per delegate call, per move / free (what
    the estimate's program-state term counts, memory_estimate/memory.py)."""
    return sum(len(c.instructions) for c in et_program.executorch_program.execution_plan[0].chains)


def memory_report(et_program, step, pte_bytes: int, data_files: dict | None = None, cfg=None) -> dict:
    plan = et_program.executorch_program.execution_plan[0]
    arena = [int(x) for x in plan.non_const_buffer_sizes]
    fep = et_program.exported_program()
    const_bytes = 0
    for v in list(fep.state_dict.values()) + list(fep.constants.values()):
        if torch.is_tensor(v):
            const_bytes += v.numel() * v.element_size()
    external = sum(len(b) for b in (data_files or {}).values())
    trainable = sum(p.numel() * p.element_size() for p in step.module.parameters() if p.requires_grad)
    cache = sum(v.numel() * v.element_size() for n, v in zip(step.names, step.example) if n.startswith("entry."))
    quant = [m for m in step.module.modules() if isinstance(m, QUANT_LAYERS)]
    sizes = [4 * (m.out_features * m.in_features if isinstance(m, QuantLinear) else m.weight_shape[0] * m.flat_in)
             for m in quant]
    deq = sum(sizes)
    inputs = sum(v.numel() * v.element_size() for v in step.example)
    report = {"pte_bytes": pte_bytes, "planned_arena_bytes": sum(arena), "non_const_buffer_sizes": arena,
              "instructions": method_instructions(et_program), "xnnpack_delegates": len(plan.delegates),
              "constant_bytes": const_bytes, "constant_bytes_in_pte": _constant_bytes_in_pte(et_program),
              "external_data_bytes": external, "external_data_files": sorted((data_files or {}).keys()),
              "trainable_bytes": trainable, "gradient_bytes": trainable,
              "optimizer_state_bytes": 2 * trainable, "cache_bytes_per_sample": cache, "input_bytes": inputs,
              "quantized_linears": sum(isinstance(m, QuantLinear) for m in quant),
              "quantized_convs": len(quant) - sum(isinstance(m, QuantLinear) for m in quant),
              "dequantized_weight_bytes": deq, "largest_dequantized_weight_bytes": max(sizes, default=0)}
    if cfg is not None:
        report.update({"memory_planner": cfg.memory_planner, "remat": cfg.remat, "backend": cfg.backend,
                       "xnnpack_ops": cfg.xnnpack_ops if cfg.backend == "xnnpack" else None})
    report.update(arena_breakdown(et_program))
    return report


def _constant_bytes_in_pte(et_program) -> int:
    """Bytes of constant data stored in the .pte: its constant segment plus any inline constant buffers."""
    prog = et_program.executorch_program
    size = sum(len(b.storage) for b in (prog.constant_buffer or []))
    cs = getattr(prog, "constant_segment", None)
    if cs is not None and prog.segments and 0 <= cs.segment_index < len(prog.segments):
        size += int(prog.segments[cs.segment_index].size)
    return size


# --------------------------------------------------------------------------------------------- traced need

@contextlib.contextmanager
def _eager_like_program(module: torch.nn.Module, remat_every: int):
    """The eager twin of the exported program: dequantized weights recomputed in backward (as
    graph_passes.recompute_frozen_in_backward does) and, with remat_every = K >= 1, torch.utils.checkpoint around
    each run of K kept blocks but the last (as remat.rematerialize_blocks does)."""
    from torch.utils.checkpoint import checkpoint

    from ditskip_edge.models.views import DiTView
    quant = [m for m in module.modules() if isinstance(m, QUANT_LAYERS)]
    saved = [m.recompute_in_backward for m in quant]
    for m in quant:
        m.recompute_in_backward = True
    views = [m for m in module.modules() if isinstance(m, DiTView)] if remat_every else []
    patched = []
    for view in views:
        index = {id(b): i for i, b in enumerate(view.blocks)}
        blocks = list(view.blocks)
        had = "run_block" in view.__dict__
        inner = view.run_block

        def run_group(streams, ctx, i, inner=inner, blocks=blocks):
            for b in blocks[i:i + remat_every]:
                streams = inner(b, streams, ctx)
            return streams

        def run_block(block, streams, ctx, index=index, run_group=run_group, last=(len(blocks) - 1) // remat_every):
            i = index[id(block)]
            if i % remat_every:
                return streams              # ran inside its group's checkpoint
            if i // remat_every == last:    # the last group is kept, not recomputed (remat.py)
                return run_group(streams, ctx, i)
            return checkpoint(run_group, streams, ctx, i, use_reentrant=False)

        view.run_block = run_block
        patched.append((view, had, inner))
    try:
        yield
    finally:
        for m, s in zip(quant, saved):
            m.recompute_in_backward = s
        for view, had, inner in patched:
            if had:
                view.run_block = inner
            else:
                del view.run_block


def traced_need(step, cfg=None, tracker_cls=None) -> dict:
    """Peak bytes of the tensors one eager step creates (see the module docstring), plus what the program's arena
    holds that the trace counts as pre-existing. tracker_cls: a StepMemoryTracker subclass to trace with (it gets the
    pre-existing storage keys); the tracker is returned under "tracker" only when one is given."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ditskip_edge.memory_estimate.tracker import StepMemoryTracker, storage_keys

    from .remat import RematSpec
    every = RematSpec.parse(cfg.remat).every if cfg is not None else 0
    module = step.module
    params = [p for p in module.parameters() if p.requires_grad]
    grads = [p.grad for p in params]
    pre = storage_keys(list(module.parameters()) + list(module.buffers()) + list(step.example))
    tracker = (tracker_cls or StepMemoryTracker)(pre)
    try:
        for p in params:
            p.grad = None
        with _eager_like_program(module, every), sdpa_kernel([SDPBackend.MATH]), tracker:
            loss = module(*step.example)
            loss.backward()
        loss = float(loss.detach())
    finally:
        for p, g in zip(params, grads):
            p.grad = g
    trainable = sum(p.numel() * p.element_size() for p in params)
    inputs = sum(v.numel() * v.element_size() for v in step.example)
    out = {"traced_step_bytes": tracker.peak_bytes, "traced_equivalent_bytes": tracker.peak_bytes + trainable + inputs,
           "traced_remat_every": every, "traced_loss": loss}
    if tracker_cls is not None:
        out["tracker"] = tracker
    return out
