"""What FLUX.1-dev and SANA-1600M need on a phone: the planner at real scale (no weights), 50% and 30% skip.

    python benchmarks/phone_plan.py        # -> benchmarks/results/phone_plan.{json,md}

Each row is `ditskip-edge estimate --model M --skip-ratio R --precision P --json` (math attention: what the ExecuTorch
program runs; fp32 compute for int8/int4 as the device programs run, bf16 for --precision bf16; int8/int4 quantize the
frozen linears and convolutions (SANA's GLUMBConv: QuantConv2d) alike; rank 16; the model's
train resolution and text length unless the row says otherwise; runtime overhead 100 MiB assumed).
Goals (issue 7): FLUX.1-dev under 6 GiB, SANA-1600M under 2 GiB.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
GOALS_GIB = {"flux-dev": 6.0, "sana-1600m": 2.0}

ROWS = [(m, r, p, None, False) for m in ("flux-dev", "sana-1600m") for r in (0.5, 0.3) for p in ("bf16", "int8", "int4")]
ROWS += [("flux-dev", 0.5, "int8", 128, False), ("flux-dev", 0.5, "int4", 128, False),         # shorter prompts
         ("sana-1600m", 0.5, "int4", 128, False)]
ROWS += [("flux-dev", 0.5, "int8", None, True), ("flux-dev", 0.5, "int4", None, True), ("flux-dev", 0.3, "int4", None, True),
         ("sana-1600m", 0.5, "int8", None, True), ("sana-1600m", 0.5, "int4", None, True),        # what-if: block checkpointing
         ("sana-1600m", 0.3, "int4", None, True)]


def conv_weight_bytes(model: str, n_front: int, n_back: int) -> int:
    """fp32 bytes of the kept blocks' Conv2d weights (SANA's GLUMBConv; int8/int4 quantize them with the linears:
    this is what they would take in fp32)."""
    import torch.nn as nn
    from ditskip_edge.models.loading import build_transformer, resolve_spec
    from ditskip_edge.models.views import _blocks_of
    blocks = _blocks_of(build_transformer(resolve_spec(model), "meta"))
    kept = blocks[n_front:len(blocks) - n_back]
    return sum(m.weight.numel() * 4 for b in kept for m in b.modules() if isinstance(m, nn.Conv2d))


def main() -> None:
    from ditskip_edge.memory_estimate.request import EstimateRequest, estimate_memory
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    rows = []
    for model, ratio, precision, L, ckpt in ROWS:
        doc = estimate_memory(EstimateRequest(model=model, skip_ratio=ratio, precision=precision, text_tokens=L,
                                              remat="blocks" if ckpt else "none"))
        p = doc["plan"]
        conv = conv_weight_bytes(model, p["n_front"], p["n_back"])
        doc["conv_weights_fp32_bytes"] = conv
        doc["goal_gib"] = GOALS_GIB[model]
        doc["meets_goal"] = doc["memory"]["peak_gib"] < GOALS_GIB[model]
        rows.append(doc)
        m = doc["memory"]
        print(f"{model} {ratio} {precision} L={doc['step']['text_tokens']} ckpt={ckpt}: peak {m['peak_gib']} GiB "
              f"(weights {m['frozen_weights_gib']}, arena {m['activation_arena_gib']})", file=sys.stderr, flush=True)
    out = ROOT / "benchmarks" / "results" / "phone_plan"
    res = {"command": "python benchmarks/phone_plan.py", "date_utc": started, "nproc": os.cpu_count(), "rows": rows}
    out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    lines = ["# What a phone needs: planner at real scale", "", f"- command: `{res['command']}` (date {started} UTC)",
             "- each row = `ditskip-edge estimate --model M --skip-ratio R --precision P [--text-tokens L] --json`: math "
             "attention (the ExecuTorch program's), fp32 compute for int8/int4 (bf16 for bf16), LoRA rank 16 on the "
             "kept blocks, frozen linears and convolutions (SANA's GLUMBConv) quantized alike at int8/int4, "
             "dequantized weights recomputed in backward, runtime overhead 100 MiB (assumed); no "
             "weights needed (fake-tensor trace of the real architecture)",
             "- 'block ckpt (what-if)': each kept block's activations recomputed in backward (torch.utils.checkpoint "
             "in the planner's trace); no device runtime here does this yet, it shows what it would buy",
             "- storage: bundle = frozen kept weights at the precision + text conditioning; cache = 2000 samples "
             "(500 steps x 4) of fp32 residual-cache entries (uncompressed; issue 4 compresses)", "",
             "| model | skip | split (front, back) | precision | L | px | block ckpt (what-if) | frozen GiB | LoRA+AdamW GiB | arena GiB | peak GiB | "
             "goal | kept convs as fp32 GiB | bundle GiB | cache GiB | TFLOP/sample |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for d in rows:
        m, p, s, st = d["memory"], d["plan"], d["storage"], d["step"]
        lines.append(f"| {d['model']} | {int(100 * p['skip_ratio'])}% | ({p['n_front']}, {p['n_back']}) "
                     f"{p['split_chosen_by']} | {st['precision']} | {st['text_tokens']} | {st['resolution_px']} | "
                     f"{'yes' if st['remat'] != 'none' else ''} | "
                     f"{m['frozen_weights_gib']} | {round(m['lora_params_gib'] + m['adamw_states_gib'], 3)} | "
                     f"{m['activation_arena_gib']} | **{m['peak_gib']}** | < {d['goal_gib']}: "
                     f"{'yes' if d['meets_goal'] else 'no'} | {round(d['conv_weights_fp32_bytes'] / 2 ** 30, 3)} | "
                     f"{s['bundle_model_gib']} | {s['cache_gib']} | {d['tflops_per_sample']} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out}.json / .md", file=sys.stderr)


if __name__ == "__main__":
    main()
