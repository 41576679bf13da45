"""Which ops an fp32 inference program may hand to XNNPACK and still give eager's numbers: the subject stage's block
programs, per op set, against eager fp32.

    python benchmarks/xnnpack_op_sets.py [--models flux-tiny,sana-tiny]   # -> benchmarks/results/xnnpack_op_sets.{json,md}

For the first and the last block of each model: the block's inputs are the embedded streams of a random photo patch
(the model's own autoencoder and embedders, eager); the block program is exported as the subject stage exports it
(export/executorch_subject.py: math attention, unused constants dropped) and lowered with
- `all ops`: XNNPACK's own partitioner, every op it supports (the subject stage's lowering before this measurement);
- `rounding-only ops`: export/xnnpack_partition.py `rounding_only_partitioner` (matmuls, convolutions, add / sub /
  mul, copies and layout: kernels that differ from the portable ones by the order of a sum);
- `portable`: no delegate.
Reported: the relative L2 error of each output stream and of its residual (output - input: what the residual cache
stores, so the figure the 1e-4 criterion is about) against the eager block, and the seconds per call (median of 7
after a warm-up, one thread).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks._meta import provenance, provenance_md  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
OP_SETS = ("all ops", "rounding-only ops", "portable")


def measure(model: str) -> list[dict]:
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower
    from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ditskip_edge.models.latents import LatentEncoder
    from ditskip_edge.models.loading import build_transformer, build_vae
    from ditskip_edge.models.specs import builtin_spec
    from ditskip_edge.models.text import encode_prompt
    from ditskip_edge.models.views import make_view
    from export.executorch_subject import BlockModule, EmbedModule
    from export.graph_passes import remove_unused_constants
    from export.xnnpack_partition import rounding_only_partitioner
    torch.set_num_threads(1)
    spec = builtin_spec(model)
    view = make_view(spec.arch, build_transformer(spec).eval())
    enc = LatentEncoder(spec.arch, build_vae(spec)).eval()
    cond = encode_prompt(spec, "a photo of sks toy")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        x0 = enc(torch.rand(1, 3, spec.train_px, spec.train_px, generator=g) * 2 - 1)
        streams, ctx = EmbedModule(view, list(cond)).run(x0, torch.randn(x0.shape, generator=g), torch.tensor([0.6]),
                                                         cond)
    sn, ct = sorted(streams), view.ctx_tensors(ctx)
    cn = sorted(ct)
    inputs = tuple(t.contiguous() for t in [streams[k] for k in sn] + [ct[k] for k in cn])
    rows = []
    for i in sorted({0, len(view.blocks) - 1}):
        block = BlockModule(view, view.blocks[i], sn, cn, ctx).eval()
        with sdpa_kernel([SDPBackend.MATH]), torch.no_grad():
            ref = block(*inputs)
            ep = torch.export.export(block, inputs, strict=False)
        remove_unused_constants(ep)
        for op_set in OP_SETS:
            part = {"all ops": [XnnpackPartitioner()], "rounding-only ops": [rounding_only_partitioner()],
                    "portable": []}[op_set]
            et = to_edge_transform_and_lower(ep, partitioner=part,
                                             compile_config=EdgeCompileConfig(_check_ir_validity=False)).to_executorch()
            program = _load_for_executorch_from_buffer(et.buffer)
            got = program.forward(list(inputs))
            times = []
            for _ in range(8):
                t0 = time.perf_counter()
                program.forward(list(inputs))
                times.append(time.perf_counter() - t0)
            row = {"model": model, "block": i, "op_set": op_set, "seconds_per_call": statistics.median(times[1:]),
                   "streams": {}}
            for k, r, o in zip(sn, ref, got):
                x = inputs[sn.index(k)]
                row["streams"][k] = {"output_rel": float((o - r).norm() / r.norm()),
                                     "residual_rel": float(((o - x) - (r - x)).norm() / (r - x).norm())}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="flux-tiny,sana-tiny")
    args = ap.parse_args()
    rows = [r for m in args.models.split(",") for r in measure(m)]
    prov = provenance()
    (RESULTS / "xnnpack_op_sets.json").write_text(json.dumps({"provenance": prov, "rows": rows}, indent=1))
    lines = ["| model | block | XNNPACK takes | stream | residual rel. error vs eager | output rel. error | ms per call |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        for k, e in r["streams"].items():
            lines.append(f"| {r['model']} | {r['block']} | {r['op_set']} | {k} | {e['residual_rel']:.1e} | "
                         f"{e['output_rel']:.1e} | {1e3 * r['seconds_per_call']:.2f} |")
    md = ("# XNNPACK op sets for fp32 inference programs: error against eager, and time\n\n" + provenance_md(prov)
          + "\n" + __doc__.split("\n\n", 2)[2].strip() + "\n\n" + "\n".join(lines) + "\n")
    (RESULTS / "xnnpack_op_sets.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
