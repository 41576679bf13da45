"""How far the back span's residual (constant, identity for gradients) bends the LoRA gradients.

For every split of the tiny FLUX and SANA models, one scheduled-like sample with a non-identity LoRA: loss and
LoRA-gradient cosine of the skip model vs the full model (LoRA only in the kept blocks in both). Front-only
splits must give cosine 1 (exact); back spans give < 1 (PAPER.md section 2, STACK.md).

    .venv/bin/python benchmarks/back_skip_gradients.py   # -> benchmarks/results/back_skip_gradients.{json,md}
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from _meta import provenance, provenance_md  # noqa: E402
from test_skip_model import _setup, full_and_skip  # noqa: E402

from ditskip_edge.plan import SkipPlan  # noqa: E402


def main() -> None:
    rows = []
    for name in ("flux-tiny", "sana-tiny"):
        for n_front, n_back in [(1, 0), (2, 0), (0, 1), (1, 1), (1, 2), (2, 2), (0, 3)]:
            plan = SkipPlan(6, n_front, n_back)
            spec, tr, trainable, batch = _setup(name, plan)
            lf, gf, ls, gs = full_and_skip(spec, tr, trainable, plan, batch)
            rows.append({"model": name, "n_front": n_front, "n_back": n_back,
                         "loss_rel_diff": abs(ls.item() - lf.item()) / lf.item(),
                         "lora_grad_cosine": F.cosine_similarity(gs, gf, dim=0).item(),
                         "lora_grad_rel_err": ((gs - gf).norm() / gf.norm()).item()})
    prov = provenance()
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "back_skip_gradients.json").write_text(json.dumps({"provenance": prov, "rows": rows}, indent=1))
    md = ["# LoRA gradients of the skip model vs the full model (random weights, non-identity LoRA)", "",
          provenance_md(prov), "| model | front n | back m | loss rel. diff | grad cosine | grad rel. err |",
          "|---|---|---|---|---|---|"]
    md += [f"| {r['model']} | {r['n_front']} | {r['n_back']} | {r['loss_rel_diff']:.2e} | "
           f"{r['lora_grad_cosine']:.4f} | {r['lora_grad_rel_err']:.3f} |" for r in rows]
    md += ["", "Residuals here are computed with the same (non-identity) LoRA in place, so the loss matches and "
           "only the gradients differ: the back span's Jacobian is replaced by the identity. In training the "
           "residuals come from the base model, which the LoRA equals only at step 0 (tests/test_skip_model.py)."]
    (out / "back_skip_gradients.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
