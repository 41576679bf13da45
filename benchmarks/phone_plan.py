"""What FLUX.1-dev and SANA-1600M need on a phone: the memory estimate at real scale (no weights), 50% and 30% skip.

    python benchmarks/phone_plan.py        # -> benchmarks/results/phone_plan.{json,md}

Each row is `ditskip-edge estimate --model M --skip-ratio R --precision P --remat X --weights W [--text-tokens L]
--json` (math attention: what the ExecuTorch program runs; fp32 compute for int8/int4 as the device programs run, bf16
for --precision bf16; int8/int4 quantize the frozen linears and convolutions (SANA's GLUMBConv: QuantConv2d) alike;
rank 16; the model's train resolution and text length unless the row says otherwise; runtime overhead 100 MiB
assumed). Two kinds of rows: the program as first exported (no remat, frozen weights resident in anonymous memory)
and the program issue 14 makes (block remat, frozen weights memory-mapped from the external data file).
Footprint = dirty anonymous memory, what iOS (phys_footprint) and Android's limiter count; mapped weights are
file-backed, clean, and reported apart with the working set one block needs.
Targets (issue 14, for the program that exists): FLUX.1-dev 50% int4 <= 1.5 GiB (stretch 1 GiB), int8 <= 2 GiB;
SANA-1600M 50% int8 <= 0.75 GiB. Goals of issue 7 (whole peak): FLUX.1-dev < 6 GiB, SANA-1600M < 2 GiB.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TARGETS_GIB = {("flux-dev", "int4"): 1.5, ("flux-dev", "int8"): 2.0, ("sana-1600m", "int8"): 0.75}
FLASH_BYTES_PER_S = 1.5e9

# (model, skip ratio, precision, text tokens or None, remat, weights)
FIRST_EXPORT = [(m, r, p, None, "none", "resident") for m in ("flux-dev", "sana-1600m") for r in (0.5, 0.3)
                for p in ("bf16", "int8", "int4")]
PROGRAM = [("flux-dev", 0.5, p, None, remat, "mapped") for p in ("int8", "int4") for remat in ("blocks", "every:2")]
PROGRAM += [("flux-dev", 0.3, "int4", None, "blocks", "mapped"), ("flux-dev", 0.5, "int4", 128, "blocks", "mapped")]
PROGRAM += [("sana-1600m", r, p, None, "blocks", "mapped") for r in (0.5, 0.3) for p in ("int8", "int4")]
PROGRAM += [("flux-dev", 0.5, "int4", None, "none", "mapped"), ("sana-1600m", 0.5, "int8", None, "none", "mapped")]
ROWS = FIRST_EXPORT + PROGRAM


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
    for model, ratio, precision, L, remat, weights in ROWS:
        doc = estimate_memory(EstimateRequest(model=model, skip_ratio=ratio, precision=precision, text_tokens=L,
                                              remat=remat, weights=weights))
        p = doc["plan"]
        doc["conv_weights_fp32_bytes"] = conv_weight_bytes(model, p["n_front"], p["n_back"])
        target = TARGETS_GIB.get((model, precision)) if ratio == 0.5 and L is None else None
        doc["target_gib"] = target
        doc["meets_target"] = None if target is None else doc["memory"]["footprint_gib"] <= target
        rows.append(doc)
        m = doc["memory"]
        print(f"{model} {ratio} {precision} L={doc['step']['text_tokens']} remat={remat} weights={weights}: "
              f"footprint {m['footprint_gib']} GiB, file-backed {m['file_backed_gib']} GiB", file=sys.stderr, flush=True)
    out = ROOT / "benchmarks" / "results" / "phone_plan"
    res = {"command": "python benchmarks/phone_plan.py", "date_utc": started, "nproc": os.cpu_count(), "rows": rows}
    out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    lines = ["# What a phone needs: the memory estimate at real scale", "",
             f"- command: `{res['command']}` (date {started} UTC; {os.cpu_count()}-CPU dev machine, fake-tensor "
             "trace of the real architecture on the meta device: no weights)",
             "- each row = `ditskip-edge estimate --model M --skip-ratio R --precision P --remat X --weights W "
             "[--text-tokens L] --json`: math attention (the ExecuTorch program's), fp32 compute for int8/int4 (bf16 "
             "for bf16), LoRA rank 16 on the kept blocks, frozen linears and convolutions (SANA's GLUMBConv) "
             "quantized alike, dequantized weights recomputed in backward, runtime overhead 100 MiB (assumed)",
             "- **footprint** = dirty anonymous memory (what a phone counts: iOS phys_footprint, Android anonymous + "
             "swap): LoRA + AdamW + gradient sums + activation arena + step inputs + overhead (+ frozen weights when "
             "resident). **file-backed** = frozen weights mapped from the bundle's data file (clean pages, dropped "
             "under pressure, not counted); **working set** = what one step touches at a time (one kept block's "
             "weights + embedders/head). **reads/step** = bytes read from the mapped weights per step (forward, "
             "and remat's recompute, and backward) and their cost at 1.5 GB/s, a phone's sustained flash read, if "
             "none stayed in the page cache (worst case)",
             "- rows 'first export': the program before issue 14 (no remat, weights resident: what `phone_plan` "
             "showed before); rows 'program': block remat (`blocks` = a checkpoint at every kept block boundary, "
             "`every:2` = every second) with weights mapped",
             "- storage: bundle = frozen kept weights at the precision + text conditioning; cache = 2000 samples "
             "(500 steps x 4) of fp32 residual-cache entries (the default int8 codec stores about 1/4 of it; "
             "`ditskip-edge cache-report`)", "",
             "| model | skip | split (front, back) | precision | L | remat | weights | footprint GiB | target | "
             "file-backed GiB | working set GiB | LoRA+AdamW+grads GiB | arena GiB | reads/step GB (s at 1.5 GB/s) | "
             "bundle GiB | cache GiB | TFLOP/sample |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for d in rows:
        m, p, s, st, wr = d["memory"], d["plan"], d["storage"], d["step"], d["weight_reads"]
        target = "" if d["target_gib"] is None else f"<= {d['target_gib']}: {'yes' if d['meets_target'] else 'NO'}"
        states = round(m["lora_params_gib"] + m["adamw_states_gib"] + m["gradient_sums_gib"], 3)
        lines.append(f"| {d['model']} | {int(100 * p['skip_ratio'])}% | ({p['n_front']}, {p['n_back']}) "
                     f"{p['split_chosen_by']} | {st['precision']} | {st['text_tokens']} | {st['remat']} | "
                     f"{st['weights']} | **{m['footprint_gib']}** | {target} | {m['file_backed_gib']} | "
                     f"{m['file_backed_working_set_gib']} | {states} | {m['activation_arena_gib']} | "
                     f"{wr['bytes_per_step'] / 1e9:.2f} ({wr['flash_seconds_per_step_worst_case']}) | "
                     f"{s['bundle_model_gib']} | {s['cache_gib']} | {d['tflops_per_sample']} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out}.json / .md", file=sys.stderr)


if __name__ == "__main__":
    main()
