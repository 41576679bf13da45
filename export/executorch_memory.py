"""Memory report of an exported training program. Every figure is bytes and says what it counts.

- planned_arena_bytes: sum of the program's non-constant buffer sizes (the memory planner's arena: activations
  kept for the backward, gradients, the trainable LoRA weights, which are memory-planned, and temporaries).
- constant_bytes: frozen tensors stored in the program (int8 codes / packed int4 + fp32 scales, float norms, ...).
- trainable_bytes: LoRA parameters (fp32). gradient_bytes: the same again (one gradient per parameter).
- optimizer_state_bytes: AdamW's two moments per trainable element (fp32), held by the runtime trainer.
- cache_bytes_per_sample: the cache-entry inputs of one step (as stored, i.e. encoded).
- dequantized_weight_bytes: what the quantized linears' and convolutions' weights take as fp32: if the arena kept the dequantized
  weights alive from forward to backward it would grow by about this much (compare recompute on/off).
"""

from __future__ import annotations

import torch

from ditskip_edge.quantize import QUANT_LAYERS, QuantLinear


def memory_report(et_program, step, pte_bytes: int) -> dict:
    plan = et_program.executorch_program.execution_plan[0]
    arena = [int(x) for x in plan.non_const_buffer_sizes]
    fep = et_program.exported_program()
    const_bytes = 0
    for v in list(fep.state_dict.values()) + list(fep.constants.values()):
        if torch.is_tensor(v):
            const_bytes += v.numel() * v.element_size()
    trainable = sum(p.numel() * p.element_size() for p in step.module.parameters() if p.requires_grad)
    cache = sum(v.numel() * v.element_size() for n, v in zip(step.names, step.example) if n.startswith("entry."))
    quant = [m for m in step.module.modules() if isinstance(m, QUANT_LAYERS)]
    sizes = [4 * (m.out_features * m.in_features if isinstance(m, QuantLinear) else m.weight_shape[0] * m.flat_in)
             for m in quant]
    deq = sum(sizes)
    inputs = sum(v.numel() * v.element_size() for v in step.example)
    return {"pte_bytes": pte_bytes, "planned_arena_bytes": sum(arena), "non_const_buffer_sizes": arena,
            "constant_bytes": const_bytes, "trainable_bytes": trainable, "gradient_bytes": trainable,
            "optimizer_state_bytes": 2 * trainable, "cache_bytes_per_sample": cache, "input_bytes": inputs,
            "quantized_linears": sum(isinstance(m, QuantLinear) for m in quant),
            "quantized_convs": len(quant) - sum(isinstance(m, QuantLinear) for m in quant),
            "dequantized_weight_bytes": deq, "largest_dequantized_weight_bytes": max(sizes, default=0)}
