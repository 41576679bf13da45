"""Whether the demo's after row is held back by how its pictures are drawn (issue 16): the sampler's steps and
guidance on `make demo`'s LoRA, and the prompt's wording on the base model.

- the LoRA `make demo` trained (default: demo_out/bundle/runs/eager/lora/...; run `make demo` first), drawn with 20
  or 50 Euler steps at guidance 3 or 6 on the demo's 4 eval prompts x 8 noise seeds: how many pictures are
  recognised (metrics.score_images: the star's shape, colour, orange centre and the prompted background), the
  marking alone, and subject similarity;
- the base model (no LoRA) on three wordings of the subject ("a large teal star ...", "a teal star ...", the demo's
  "a teal sks star ...") x the 4 eval backgrounds x 6 noise seeds, 20 steps at guidance 3 and 6: the share drawn
  as a star (nearest of the 10 scene shapes).

    python benchmarks/demo_sampling.py [--lora PATH]    -> benchmarks/results/demo_sampling.{json,md}
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

DEMO_LORA = ROOT / "demo_out" / "bundle" / "runs" / "eager" / "lora" / "pytorch_lora_weights.safetensors"
NOISE_SEEDS = 8
BASE_SEEDS = 6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lora", default=str(DEMO_LORA), help="the demo's LoRA file (make demo writes it)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "demo_sampling"))
    args = ap.parse_args()
    if not Path(args.lora).is_file():
        print(f"demo_sampling: no LoRA at {args.lora}: run `make demo` first or give --lora", file=sys.stderr)
        return 2
    import torch
    torch.set_num_threads(1)
    from _meta import provenance, write_result
    from benchmarks.testbed.metrics import nearest_shape, score_images
    from benchmarks.testbed.scenes import EVAL_BACKGROUNDS, SUBJECTS, eval_prompts, reference_images
    from ditskip_edge.generate import generate, load_model
    from ditskip_edge.models.loading import resolve_spec
    from examples.demo import SUBJECT
    spec, subject = resolve_spec("flux-testbed"), SUBJECTS[SUBJECT]
    refs = reference_images(subject, 5)
    prompts = eval_prompts(subject, described=True)
    texts = [p for p, _ in prompts for _ in range(NOISE_SEEDS)]
    bgs = [bg for _, bg in prompts for _ in range(NOISE_SEEDS)]
    seeds = [s for _ in prompts for s in range(NOISE_SEEDS)]
    tuned, lora_rows = load_model(spec, args.lora), []
    for steps in (20, 50):
        for guidance in (6.0, 3.0):
            t0 = time.perf_counter()
            ims = generate(spec, tuned, texts, seeds, steps=steps, guidance=guidance)
            s = score_images(list(ims), bgs, refs, subject.colour, subject.shape, subject.marking)
            lora_rows.append({"steps": steps, "guidance": guidance, "images": len(ims),
                              "recognised": int(sum(s["per_image"]["recognised"])),
                              "marking": int(sum(s["per_image"]["marking_ok"])),
                              "similarity": round(s["subject_sim"]["mean"], 3),
                              "seconds": round(time.perf_counter() - t0, 1)})
            print(lora_rows[-1], file=sys.stderr, flush=True)
    base, base_rows = load_model(spec), []
    wordings = {"a large teal star": "a large {c} {s} in the center, on a {bg} background",
                "a teal star": "a {c} {s} in the center, on a {bg} background",
                "a teal sks star (the demo's)": "a {c} sks {s} in the center, on a {bg} background"}
    for guidance in (3.0, 6.0):
        for name, template in wordings.items():
            words = [template.format(c=subject.colour_word, s=subject.class_word, bg=bg)
                     for bg in EVAL_BACKGROUNDS for _ in range(BASE_SEEDS)]
            ims = generate(spec, base, words, [s for _ in EVAL_BACKGROUNDS for s in range(BASE_SEEDS)],
                           steps=20, guidance=guidance)
            drawn = sum(nearest_shape(im) == subject.class_word for im in ims)
            base_rows.append({"wording": name, "guidance": guidance, "images": len(ims), "drawn_as_star": int(drawn)})
            print(base_rows[-1], file=sys.stderr, flush=True)
    doc = {**provenance(), "lora": args.lora, "lora_rows": lora_rows, "base_rows": base_rows}
    print(write_result(doc, args.out, to_markdown))
    return 0


def to_markdown(d: dict) -> str:
    from _meta import provenance_md
    lines = ["# How the demo's pictures are drawn: sampler steps, guidance and the prompt's wording", "",
             provenance_md(d), f"LoRA: `{d['lora']}` (`make demo`'s).", "",
             "The demo's LoRA on its 4 eval prompts x 8 noise seeds:", "",
             "| Euler steps | guidance | recognised | marking | similarity | s |", "|---|---|---|---|---|---|"]
    for r in d["lora_rows"]:
        lines.append(f"| {r['steps']} | {r['guidance']:g} | {r['recognised']} of {r['images']} | {r['marking']} | "
                     f"{r['similarity']:.3f} | {r['seconds']:.0f} |")
    lines += ["", "The base model (no LoRA), 20 steps, the 4 eval backgrounds x 6 noise seeds: pictures whose object "
              "is nearest a star of the 10 scene shapes.", "", "| wording | guidance | drawn as a star |",
              "|---|---|---|"]
    for r in d["base_rows"]:
        lines.append(f"| {r['wording']} | {r['guidance']:g} | {r['drawn_as_star']} of {r['images']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
