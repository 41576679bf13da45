"""What XNNPACK's dynamically quantized linears (ExportConfig(integer_matmuls="qd8")) cost in fidelity, by a proxy:
the loss and the LoRA gradients of the qd8 training program against the current one (`base`: fp32 matmuls of the
cast int8 codes), on the same step inputs over several batches (x0 and noise drawn per seed) and timesteps.

    python benchmarks/qd8_fidelity.py --programs /tmp/qd8/headline --configs flux-layout-300m,sana-layout-250m \
        --variants qd8,qd8_linears
    -> benchmarks/results/step_profile_qd8_fidelity.{json,md}

The programs are step_profile.py's (`--variants base,qd8 --keep-programs DIR`: DIR/<config>_<variant>/train_step.pte,
.ptd, inputs.pt). LoRA B is zero at init, which makes every lora_A gradient zero; the script writes the same random B
(0.05 * N(0, 1), seed 0) into both programs' parameters first, so that both A and B gradients are compared. Per
batch: loss relative difference, gradient relative error (all LoRA gradients as one vector) and cosine, and the
worst single tensor's relative error; for scale, how far the current
program's own gradient moves from one batch to the next (the minibatch noise SGD averages over). The testbed's velocity-progress instrument is not run here (the report says
why).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
RESULTS = ROOT / "benchmarks" / "results"
TIMESTEPS = (0.1, 0.3, 0.5, 0.7, 0.9)


class _Program:
    """A training program loaded as step_profile.py's child loads it, with its parameters writable."""

    def __init__(self, folder: Path):
        from export.executorch_footprint import Trainer, _import_runtime
        load, _ = _import_runtime()
        self.trainer = Trainer(load(str(folder / "train_step.pte"), data_path=str(folder / "train_step.ptd")))

    def set_lora_b(self, inputs, seed: int = 0) -> int:
        """Write 0.05 * N(0, 1) (seed) into every lora_B parameter (the method's parameter outputs alias its state)."""
        import torch
        t = self.trainer
        g0, p0 = t._split
        out = t.method.call(inputs, clone_outputs=False)
        gen = torch.Generator().manual_seed(seed)
        n = 0
        for name, p in zip(t._names, out[p0:]):
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
                n += 1
        return n

    def step(self, inputs):
        loss = float(self.trainer.forward_backward(inputs)[0])
        return loss, {k: v.clone() for k, v in self.trainer.named_gradients().items()}


def batches(example: list, names: list[str] | None, count: int):
    """(seed, t, inputs): x0 and noise drawn per seed (their shapes), t from TIMESTEPS in turn; the rest as exported."""
    import torch
    for seed in range(count):
        gen = torch.Generator().manual_seed(1000 + seed)
        inputs = [x.clone() for x in example]
        inputs[0] = torch.randn(inputs[0].shape, generator=gen)          # x0
        inputs[1] = torch.randn(inputs[1].shape, generator=gen)          # noise
        t = TIMESTEPS[seed % len(TIMESTEPS)]
        inputs[2] = torch.full_like(inputs[2], t)                        # t
        yield seed, t, inputs


def compare(folder_base: Path, folder_qd8: Path, count: int) -> dict:
    import torch
    example = list(torch.load(folder_base / "inputs.pt", weights_only=True))
    progs = {"base": _Program(folder_base), "qd8": _Program(folder_qd8)}
    nb = {k: p.set_lora_b(example) for k, p in progs.items()}
    rows, previous = [], None
    for seed, t, inputs in batches(example, None, count):
        (la, ga), (lb, gb) = progs["base"].step(inputs), progs["qd8"].step(inputs)
        a = torch.cat([ga[k].reshape(-1) for k in sorted(ga)])
        b = torch.cat([gb[k].reshape(-1) for k in sorted(ga)])
        worst = max(float((ga[k] - gb[k]).norm() / ga[k].norm().clamp_min(1e-30)) for k in ga)
        zero_a = sum(int(ga[k].abs().sum() == 0) for k in ga if "lora_A" in k)
        rows.append({"seed": seed, "t": t, "loss_base": la, "loss_qd8": lb, "loss_rel_diff": abs(la - lb) / abs(la),
                     "grad_rel_error": float((a - b).norm() / a.norm()),
                     "grad_cosine": float(torch.nn.functional.cosine_similarity(a, b, dim=0)),
                     "worst_tensor_grad_rel_error": worst, "zero_lora_a_grads": zero_a,
                     "base_grad_rel_change_from_previous_batch": None if previous is None
                     else float((a - previous).norm() / previous.norm())})
        previous = a
    return {"lora_b_set": nb, "rows": rows}


def write_md(res: dict, stem: Path) -> None:
    from _meta import provenance_md
    lines = ["# qd8 (XNNPACK dynamically quantized linears) against the current program: loss and LoRA gradients",
             "", provenance_md(res["provenance"]), "", __doc__.split("\n\n")[2].replace("\n", " "), ""]
    lines += ["| config | batches | loss rel. diff (median / max) | grad rel. error (median / max) | grad cosine (min) "
              "| worst tensor rel. error (max) | base gradient change batch to batch (median) |",
              "|---|---|---|---|---|---|---|"]
    for name, r in res["configs"].items():
        rows = r["rows"]

        def med(k):
            v = sorted(x[k] for x in rows)
            return v[len(v) // 2]
        lines.append(f"| {name} | {len(rows)} | {med('loss_rel_diff'):.2e} / {max(x['loss_rel_diff'] for x in rows):.2e} "
                     f"| {med('grad_rel_error'):.2e} / {max(x['grad_rel_error'] for x in rows):.2e} | "
                     f"{min(x['grad_cosine'] for x in rows):.5f} | "
                     f"{max(x['worst_tensor_grad_rel_error'] for x in rows):.2e} | "
                     f"{sorted(x['base_grad_rel_change_from_previous_batch'] for x in rows[1:])[(len(rows) - 1) // 2]:.2f} |")
    lines += ["", "Per batch:", "", "| config | seed | t | loss base | loss qd8 | grad rel. error | grad cosine |",
              "|---|---|---|---|---|---|---|"]
    for name, r in res["configs"].items():
        for x in r["rows"]:
            lines.append(f"| {name} | {x['seed']} | {x['t']} | {x['loss_base']:.6g} | {x['loss_qd8']:.6g} | "
                         f"{x['grad_rel_error']:.2e} | {x['grad_cosine']:.5f} |")
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--programs", default="/tmp/qd8/headline")
    ap.add_argument("--configs", default="flux-layout-300m,sana-layout-250m")
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--variants", default="qd8", help="step_profile variants compared with base, e.g. qd8,qd8_linears")
    ap.add_argument("--out", default=str(RESULTS / "step_profile_qd8_fidelity"))
    args = ap.parse_args()
    import torch
    torch.set_num_threads(1)
    from _meta import provenance
    res = {"provenance": provenance(), "configs": {}}
    for name in [c for c in args.configs.split(",") if c]:
        for variant in [v for v in args.variants.split(",") if v]:
            d = Path(args.programs)
            if not (d / f"{name}_{variant}").is_dir():
                continue
            key = name if variant == "qd8" else f"{name} {variant}"
            res["configs"][key] = compare(d / f"{name}_base", d / f"{name}_{variant}", args.batches)
            print(key, json.dumps(res["configs"][key]["rows"][-1]), file=sys.stderr, flush=True)
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    write_md(res, out)


if __name__ == "__main__":
    main()
