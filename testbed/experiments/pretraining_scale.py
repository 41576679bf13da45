"""Does more pretraining carry a learned subject to new backgrounds? `make demo`'s path on three stages of the
testbed's own pretraining, read from `demo_subjects.py` results (no training here).

Issue 16 asks for the subject in 3 of 4 prompts on backgrounds no reference photo shows; no recipe lever got there
(`demo_levers.md`), and the lever left is a stronger testbed, i.e. more pretraining on a GPU. The committed weights
are the last of a chain whose earlier links are in git, so the question can be asked of the chain itself: the same
4 subjects x 3 training seeds, the demo's recipe as BlockSkip 50% (selected split) and as full LoRA (no block
skipped), drawn on the eval backgrounds (new) and on the references' own (seen), on each checkpoint:

    git show 8e37596:ditskip_edge/assets/flux-testbed/transformer.safetensors > /tmp/ckpt/cpu.safetensors
    git show 8831f5b:ditskip_edge/assets/flux-testbed/transformer.safetensors > /tmp/ckpt/gpu2.safetensors
    python testbed/experiments/demo_subjects.py --jobs 2 --model /tmp/ckpt/W.safetensors --train-seeds 0 1 2 \\
        --recipes 200x4e-3 200x4e-3+s0-0 --stem demo_subjects_weights_W                  # W = cpu, gpu2
    python testbed/experiments/demo_subjects.py --jobs 2 --model /tmp/ckpt/W.safetensors --no-base --backgrounds seen \\
        --train-seeds 0 1 2 --recipes 200x4e-3 200x4e-3+s0-0 --stem demo_subjects_weights_W_seen
    python testbed/experiments/pretraining_scale.py      # -> testbed/results/pretraining_scale.{json,md,png}

The committed weights' runs are the ones the lever table pairs with (`demo_subjects_prior`, `_unskipped_xeon`,
`_seen`, all on the same 2-core Intel Xeon). Runs pair across checkpoints by subject and training seed (the same
photos, captions, schedule seed and noise); a checkpoint's own split is selected on it, as the demo does.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks._meta import provenance, provenance_md, write_result                                # noqa: E402
from testbed.experiments.demo_levers import cpu, paired_cell                                         # noqa: E402
from testbed.experiments.demo_subjects import paired, runs_shown                                             # noqa: E402
from testbed.metrics import mean_ci                                           # noqa: E402

BLOCKSKIP, FULL = "200x4e-3", "200x4e-3+s0-0"
METHODS = {BLOCKSKIP: "BlockSkip 50%", FULL: "full LoRA"}
NEW, SEEN = "new", "seen"
BASE = "base (no LoRA)"
BAR = 0.75              # issue 16's 3 of 4 prompts, as a share of a run's pictures


@dataclass(frozen=True)
class Checkpoint:
    label: str
    commit: str               # the commit whose ditskip_edge/assets/flux-testbed/transformer.safetensors it is
    sha256: str               # the weights' (prefix)
    samples: int              # samples pretraining trained on, from the chain in the asset's pretrain_log.json
    how: str
    files: dict               # (recipe, backgrounds) -> result stem in testbed/results/


CHECKPOINTS = [
    Checkpoint("CPU weights", "8e37596", "fa6be47b", 363_872,
               "65 min + 4 stages on 2 CPU threads, batch 32 (276,928 samples on an earlier scene domain without the "
               "subjects' shapes, then 86,944 on this one)",
               {(r, b): f"demo_subjects_weights_cpu{'_seen' * (b == SEEN)}" for r in METHODS for b in (NEW, SEEN)}),
    Checkpoint("GPU stage 2", "8831f5b", "d9d5fa1f", 1_428_736,
               "from scratch, 2 stages on one H200 (687,360 + 741,376 samples)",
               {(r, b): f"demo_subjects_weights_gpu2{'_seen' * (b == SEEN)}" for r in METHODS for b in (NEW, SEEN)}),
    Checkpoint("GPU stage 4 (committed)", "094d29b", "14e7c5ad", 8_754_432,
               "stage 2 continued 2 more stages on the H200 (+5,122,048 + 2,203,648 samples, each batch trained 3x)",
               {(BLOCKSKIP, NEW): "demo_subjects_prior", (FULL, NEW): "demo_subjects_unskipped_xeon",
                (BLOCKSKIP, SEEN): "demo_subjects_seen", (FULL, SEEN): "demo_subjects_seen"}),
]


def load_runs(results: Path, stem: str, recipe: str | None) -> tuple[list[dict], dict]:
    """The runs of `recipe` (None: the base model's) in results/<stem>.json and that file's provenance; refuses a
    missing file or recipe in one line."""
    path = results / f"{stem}.json"
    if not path.is_file():
        raise SystemExit(f"pretraining_scale: no {path} (the demo_subjects.py commands in this script's docstring)")
    doc = json.loads(path.read_text())
    runs = [r for r in doc["runs"] if r["recipe"] == recipe]
    if not runs:
        raise SystemExit(f"pretraining_scale: no {recipe or 'base'} run in {path}")
    return runs, doc["run"]


def cell(checkpoint: str, method: str, recipe: str | None, backgrounds: str, runs: list[dict], stem: str) -> dict:
    return {"checkpoint": checkpoint, "method": method, "recipe": recipe, "backgrounds": backgrounds,
            "runs": len(runs), "recognised": mean_ci(r["recognised"] for r in runs),
            "similarity": mean_ci(r["similarity"] for r in runs), "shown": runs_shown(runs), "file": stem}


def collect(results: Path) -> dict:
    cells, sources, runs_of = [], {}, {}
    for ck in CHECKPOINTS:
        for (recipe, backgrounds), stem in ck.files.items():
            runs, sources[stem] = load_runs(results, stem, recipe)
            runs_of[(ck.label, recipe, backgrounds)] = runs
            cells.append(cell(ck.label, METHODS[recipe], recipe, backgrounds, runs, stem))
        stem = ck.files[(BLOCKSKIP, NEW)]
        cells.append(cell(ck.label, BASE, None, NEW, load_runs(results, stem, None)[0], stem))
    steps = []               # each checkpoint against the one before, and seen - new on each
    for before, after in zip(CHECKPOINTS, CHECKPOINTS[1:]):
        for recipe in METHODS:
            for backgrounds in (NEW, SEEN):
                a, b = runs_of[(before.label, recipe, backgrounds)], runs_of[(after.label, recipe, backgrounds)]
                steps.append({"pair": f"{after.label} - {before.label}", "method": METHODS[recipe],
                              "backgrounds": backgrounds, **paired(a, b)})
    carry = [{"checkpoint": ck.label, "method": METHODS[recipe],
              **paired(runs_of[(ck.label, recipe, NEW)], runs_of[(ck.label, recipe, SEEN)])}
             for ck in CHECKPOINTS for recipe in METHODS]
    return {"checkpoints": [vars(ck) | {"files": sorted(set(ck.files.values()))} for ck in CHECKPOINTS],
            "cells": cells, "steps": steps, "carry": carry, "trend": trend(cells), "sources": sources}


def trend(cells: list[dict], bar: float = BAR) -> list[dict]:
    """Per method and backgrounds, the last two checkpoints' rate (recognised per 10x samples, the same chain on the
    same scene domain) and the samples at which that rate would reach `bar`: a two-point extrapolation, a rough
    scale for what more pretraining of this model can buy, not a forecast."""
    samples = {ck.label: ck.samples for ck in CHECKPOINTS}
    before, last = CHECKPOINTS[-2].label, CHECKPOINTS[-1].label
    out = []
    for method in METHODS.values():
        for backgrounds in (NEW, SEEN):
            m = {c["checkpoint"]: c["recognised"]["mean"] for c in cells
                 if c["method"] == method and c["backgrounds"] == backgrounds}
            per_decade = (m[last] - m[before]) / math.log10(samples[last] / samples[before])
            at_bar = samples[last] * 10 ** ((bar - m[last]) / per_decade) if per_decade > 0 else None
            out.append({"method": method, "backgrounds": backgrounds, "per_10x_samples": round(per_decade, 4),
                        "samples_at_bar": at_bar})
    return out


def ci(m: dict) -> str:
    half = "" if math.isnan(m["ci95"]) else f" +- {m['ci95']:.2f}"
    return f"{m['mean']:.2f}{half}"


def markdown(doc: dict) -> str:
    lines = ["# `make demo`'s path on three stages of the testbed's pretraining", "", provenance_md(doc["run"]), "",
             "Per checkpoint (rows) the demo's recipe (200 steps x 4 samples, lr 4e-3) as BlockSkip 50% (selected "
             "split) and as full LoRA, 4 subjects x training seeds 0-2 = 12 runs; recognised = the share of a run's "
             "16 pictures (4 prompts x 4 noise seeds) with the subject's shape, colour, marking and the prompted "
             "background, mean +- 95% CI over runs; shown = runs with 3 of 4 prompts recognised at `make demo`'s "
             "noise (issue 16's bar); new = the 4 eval backgrounds no reference shows, seen = the first 4 "
             "references' own backgrounds; base = no LoRA (4 subjects, one run each).", "",
             "| checkpoint | samples pretrained | base, new | BlockSkip 50%, new | full LoRA, new | "
             "BlockSkip 50%, seen | full LoRA, seen |", "|---|---|---|---|---|---|---|"]
    by = {(c["checkpoint"], c["method"], c["backgrounds"]): c for c in doc["cells"]}
    for ck in doc["checkpoints"]:
        row = [by[(ck["label"], BASE, NEW)]] + [by[(ck["label"], METHODS[r], b)]
                                                            for b in (NEW, SEEN) for r in METHODS]
        cells = [ci(row[0]["recognised"])] + [f"{ci(c['recognised'])} (shown {c['shown']}/{c['runs']})"
                                              for c in row[1:]]
        lines.append(f"| {ck['label']} (`{ck['commit']}`, sha256 {ck['sha256']}...) | {ck['samples'] / 1e6:.2f}M | "
                     + " | ".join(cells) + " |")
    lines += ["", "## Each checkpoint against the one before (paired by subject and training seed)", "",
              "| pair | method | backgrounds | runs | recognised | similarity | shown (before; after) |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {s['pair']} | {s['method']} | {s['backgrounds']} | {s['runs']} | {paired_cell(s['recognised'])} | "
              f"{paired_cell(s['similarity'])} | {s['shown'][0]}; {s['shown'][1]} |" for s in doc["steps"]]
    lines += ["", "## Carrying the subject to new backgrounds: seen - new, per checkpoint (the same LoRAs)", "",
              "| checkpoint | method | recognised, seen - new |", "|---|---|---|"]
    lines += [f"| {c['checkpoint']} | {c['method']} | {paired_cell(c['recognised'])} |" for c in doc["carry"]]
    first, last = doc["checkpoints"][-2]["label"], doc["checkpoints"][-1]["label"]
    lines += ["", f"## At {first} -> {last}'s rate (a two-point extrapolation on a log scale of samples)", "",
              f"| method | backgrounds | recognised per 10x samples | samples at which it would reach {BAR} |",
              "|---|---|---|---|"]
    lines += [f"| {t['method']} | {t['backgrounds']} | {t['per_10x_samples']:+.3f} | "
              + (f"{t['samples_at_bar']:.2g}" if t["samples_at_bar"] else "never (no rise)") + " |"
              for t in doc["trend"]]
    lines += ["", "## Checkpoints", ""]
    lines += [f"- {ck['label']}: {ck['how']}; results {', '.join(f'`{f}.json`' for f in ck['files'])}"
              for ck in doc["checkpoints"]]
    lines += ["", "Sources (each result's command, machine, date):", ""]
    lines += [f"- `{stem}`: `{run['command']}` ({cpu(run['machine'])}, {run['date'][:16]})"
              for stem, run in doc["sources"].items()]
    lines += ["", f"Chart `{doc['png']}`: recognised against samples pretrained (log scale), per method and "
              "backgrounds, with 95% CIs (side by side at each checkpoint); dashed: issue 16's bar."]
    return "\n".join(lines) + "\n"


def chart(doc: dict, png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    samples = {ck["label"]: ck["samples"] for ck in doc["checkpoints"]}
    fig, ax = plt.subplots(figsize=(7, 4.2))
    styles = {("BlockSkip 50%", NEW): ("tab:blue", "-"), ("full LoRA", NEW): ("tab:red", "-"),
              ("BlockSkip 50%", SEEN): ("tab:blue", ":"), ("full LoRA", SEEN): ("tab:red", ":"),
              (BASE, NEW): ("grey", "-")}
    for k, ((method, backgrounds), (colour, ls)) in enumerate(styles.items()):
        cells = [c for c in doc["cells"] if c["method"] == method and c["backgrounds"] == backgrounds]
        xs = [samples[c["checkpoint"]] * 1.04 ** (k - 2) for c in cells]       # side by side: CIs apart
        ys = [c["recognised"]["mean"] for c in cells]
        errs = [0 if math.isnan(c["recognised"]["ci95"]) else c["recognised"]["ci95"] for c in cells]
        ax.errorbar(xs, ys, yerr=errs, color=colour, ls=ls, marker="o", capsize=3,
                    label=f"{method}, {backgrounds} backgrounds")
    ax.axhline(BAR, color="black", ls="--", lw=0.8, label=f"issue 16's bar ({BAR}: 3 of 4 prompts)")
    ax.set_xscale("log")
    ax.set_xticks([samples[ck["label"]] for ck in doc["checkpoints"]],
                  [f"{ck['label']}\n{ck['samples'] / 1e6:.2f}M" for ck in doc["checkpoints"]], fontsize=8)
    ax.set_ylim(-0.05, 1.3)                  # room for the legend above the data
    ax.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    ax.set_xlabel("samples pretrained (log scale)")
    ax.set_ylabel("recognised (share of a run's 16 pictures)")
    ax.set_title("make demo's path on three stages of the testbed's pretraining", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=str(ROOT / "testbed" / "results"),
                    help="where the demo_subjects results are and the table goes")
    args = ap.parse_args()
    results = Path(args.results)
    doc = {"run": provenance(), "png": "pretraining_scale.png", **collect(results)}
    stem = results / "pretraining_scale"
    print(write_result(doc, stem, markdown))
    chart(doc, stem.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
