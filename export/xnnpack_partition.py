"""XNNPACK partitions for a training program: small, one op (chain) each, never merged.

XNNPACK's own partitioner (`XnnpackPartitioner()`) builds the largest partitions it can, and merges even
independent ones ("horizontal fusion" in `CapabilityBasedPartitioner.propose_partitions`): a delegate call runs
when its last input is ready, so in a joint forward-backward graph forward operands merged with backward work stay
alive until the backward, and everything inside a partition lives in XNNPACK's own workspace, outside the planned
arena (causes D / D' in benchmarks/results/device_footprint_causes.md). One delegate per op avoids both, but the
ops left to the portable kernels are slow: in the medium FLUX layout the portable `permute_copy` (weight and
attention transposes) took 44% of the step.

`MatmulChainPartitioner` makes one delegate per bmm together with the permute / view nodes that feed only that bmm
(a transpose done by XNNPACK just before the multiply, its result internal to the call), and one delegate for each
other permute and for each op in `single_ops` (elementwise ops XNNPACK runs faster than the portable kernels; and
`dequantize_per_tensor`, the int8 codes' exact cast to fp32 written by graph_passes.casts_as_dequantize, whose
quantize(permute(dequantize)) of int8 codes is one delegate: XNNPACK's int8 transpose).
Nothing is merged, so each delegate sits where its op was and holds nothing longer than the op itself would.
With `elementwise_min_numel` (ExportConfig.xnnpack_elementwise, off by default) the cat / mul / add with at least that
many output elements get a delegate each too: exact, faster than the portable loops, but every delegate carries its
runtime state (about 2-3 KiB, benchmarks/results/delegate_state.md). At the 288M FLUX layout (65536 elements) the
native core's step went 1.107 -> 1.090 CPU s for +1.4 MiB RssAnon (benchmarks/results/step_profile.md): off.

With `dynamic_linears` (ExportConfig.integer_matmuls) each dynamically quantized linear of
graph_passes.dynamically_quantized_linears is one delegate: XNNPACK's LinearConfig match (the linear, its
activation's choose_qparams / quantize / dequantize, its weight's dequantize_per_channel and constants).

`rounding_only_partitioner` is for the inference programs (the subject stage's encode / embed / block programs, the
preprocess programs): XNNPACK takes only the ops whose fp32 kernels differ from the portable ones by the order of a
sum (matmuls, convolutions, elementwise add / sub / mul, copies and layout); softmax, GELU / tanh, sigmoid, rsqrt,
division and the rest stay on the portable kernels. Measured on a flux-tiny block (its residual, the difference the
cache stores, against eager fp32): every op on XNNPACK 1.3e-4 - 1.8e-4 relative, over the subject stage's 1e-4
criterion; this set 4.6e-7 - 5.7e-7, as the portable kernels (4.1e-7 - 5.4e-7); sana-tiny's blocks are at 2e-7
either way (benchmarks/results/xnnpack_op_sets.md, `python benchmarks/xnnpack_op_sets.py`; its times were taken under
load: between the all-ops and the portable programs). The offending kernels were found as a set, not op by op.
"""

from __future__ import annotations

import itertools

from executorch.backends.xnnpack.partition.config.gemm_configs import LinearConfig
from executorch.backends.xnnpack.partition.config.generic_node_configs import (AddConfig, BMMConfig, CatConfig,
                                                                                MulConfig,
                                                                                DeQuantizedPerTensorConfig,
                                                                                GeluConfig, PermuteConfig,
                                                                                QuantizedPerTensorConfig,
                                                                                SoftmaxConfig, TanhConfig,
                                                                                ViewCopyConfig)
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from torch.fx.passes.infra.partitioner import Partition

CHAIN_OPS = ("permute_copy.default",)
QDQ_OPS = ("dequantize_per_tensor.default", "quantize_per_tensor.default")
ROUNDING_ONLY_CONFIGS = ("LinearConfig", "AddmmConfig", "MMConfig", "BMMConfig", "ConvolutionConfig", "AddConfig",
                         "SubConfig", "MulConfig", "PermuteConfig", "ViewCopyConfig", "CatConfig", "CloneConfig",
                         "CloneDimOrderConfig", "ToDimOrderCopyConfig", "SliceCopyConfig", "UnsqueezeCopyConfig",
                         "ConstantPadConfig", "MaxPool2dConfig", "ReLUConfig", "ClampConfig", "MaximumConfig",
                         "MinimumConfig", "AbsConfig", "NegConfig")
SINGLE_CONFIGS = {"gelu.default": GeluConfig, "tanh.default": TanhConfig, "_softmax.default": SoftmaxConfig,
                  "dequantize_per_tensor.default": DeQuantizedPerTensorConfig,
                  "cat.default": CatConfig, "mul.Tensor": MulConfig, "add.Tensor": AddConfig}
ELEMENTWISE = ("cat.default", "mul.Tensor", "add.Tensor")     # exact in XNNPACK too (a copy, one rounding)


def _name(node) -> str:
    from executorch.exir.backend.canonical_partitioners.config_partitioner import format_target_name
    return format_target_name(getattr(node.target, "__name__", str(node.target)))


class MatmulChainPartitioner(XnnpackPartitioner):
    ACTIVATIONS = ("gelu.default", "tanh.default", "_softmax.default")

    def __init__(self, single_ops: tuple[str, ...] = ACTIVATIONS, elementwise_min_numel: int = 0,
                 dynamic_linears: bool = False):
        """elementwise_min_numel > 0: also one delegate per cat / mul / add whose output has at least that many
        elements (each delegate costs runtime state: benchmarks/results/delegate_state.md). dynamic_linears: one
        delegate per dynamically quantized linear (graph_passes.dynamically_quantized_linears: the linear with its
        activation's choose_qparams / quantize / dequantize and its weight's dequantize_per_channel and constants,
        XNNPACK's LinearConfig match)."""
        if elementwise_min_numel > 0:
            single_ops = tuple(single_ops) + ELEMENTWISE
        self.elementwise_min_numel = elementwise_min_numel
        configs = [BMMConfig, PermuteConfig, ViewCopyConfig] + [SINGLE_CONFIGS[o] for o in single_ops]
        if dynamic_linears:
            configs.append(LinearConfig)
        if "dequantize_per_tensor.default" in single_ops:
            configs.append(QuantizedPerTensorConfig)
        super().__init__(configs=configs, per_op_mode=True)
        self.single_ops = set(single_ops) | {"permute_copy.default"}

    def generate_per_op_partitions(self, ep) -> list[Partition]:
        matches = self.get_matched_nodes_from_configs(ep)
        supported = {n for match in matches for n in match}
        # a quantized op (a transpose of int8 codes: dequantize -> permute -> quantize) is one match, one delegate
        quantized = {n: match for match in matches if len(match) > 1
                     and all(_name(m) in QDQ_OPS or _name(m) in self.single_ops for m in match) for n in match}
        ids = itertools.count()
        taken: set = set()
        partitions = []
        for match in matches:               # a dynamically quantized linear and its q / dq / constants: one delegate
            if any(m.op == "call_function" and _name(m) == "linear.default" for m in match):
                taken.update(match)
                partitions.append(Partition(id=next(ids), nodes=dict.fromkeys(match)))
        nodes = [n for n in ep.graph_module.graph.nodes if n.op == "call_function"]
        for n in nodes:
            if n not in supported or _name(n) != "bmm.default":
                continue
            group = {n}
            frontier = list(n.all_input_nodes)
            while frontier:
                a = frontier.pop()
                if (a in supported and a not in taken and a not in group and _name(a) in CHAIN_OPS
                        and all(u in group for u in a.users)):
                    group.add(a)
                    frontier.extend(a.all_input_nodes)
            taken |= group
            partitions.append(Partition(id=next(ids), nodes=dict.fromkeys(group)))
        for n in nodes:
            if _name(n) in ELEMENTWISE and n.meta["val"].numel() < self.elementwise_min_numel:
                continue
            if n in supported and n not in taken and _name(n) in self.single_ops:
                group = quantized.get(n, [n])
                taken.update(group)
                partitions.append(Partition(id=next(ids), nodes=dict.fromkeys(group)))
        return partitions


def rounding_only_partitioner() -> XnnpackPartitioner:
    """XNNPACK for the ops of ROUNDING_ONLY_CONFIGS only (module docstring)."""
    from executorch.backends.xnnpack.partition.config import ALL_PARTITIONER_CONFIGS
    return XnnpackPartitioner(configs=[c for c in ALL_PARTITIONER_CONFIGS if c.__name__ in ROUNDING_ONLY_CONFIGS])
