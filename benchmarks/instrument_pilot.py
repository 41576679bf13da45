"""Which teacher and which measure give the planted-subject instrument its signal? A pilot before a study.

The study of 2026-12-01 (personalization_study_reading.md) found full LoRA's velocity closure 0.053 +- 0.178 over
6 units: no signal. Two suspects: the teacher (a full fine-tune of every weight, most of whose change a rank-8 LoRA
cannot make) and the measure (closure counts movement sideways of the base -> teacher direction as distance).
This pilot trains, per subject, two teachers and a few full LoRAs with the research loop (finetune.py, not the
product's trainer), and scores each LoRA at several lengths against each teacher with three measures:

    closure  = 1 - |v - v_T|^2 / |v_B - v_T|^2               (the study's; sideways movement lowers it)
    progress = <v - v_B, v_T - v_B> / |v_T - v_B|^2           (the share of the way along the teacher's direction)
    cosine   = cos(v - v_B, v_T - v_B)                         (direction only)

v = conditional velocity on the held-out velocity inputs (instrument.held_out: fresh photos on unseen backgrounds,
noised at 3 times). Teachers: "full" = every weight (TeacherConfig), "lora" = a planted low-rank change: the
students' own LoRA family (rank 8, same targets) trained long. Units = subjects x student seeds; mean +- 95%
Student-t CI; the issue's bar: full LoRA's score >= 10 CI half-widths above the base's 0.

    python benchmarks/instrument_pilot.py --subjects teal_star pink_heart --seeds 0 1 2 --jobs 2
Writes benchmarks/results/instrument_pilot.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _meta import provenance, provenance_md                                      # noqa: E402
from benchmarks.testbed import instrument as ins                                  # noqa: E402
from benchmarks.testbed.finetune import FinetuneConfig, finetune                  # noqa: E402
from benchmarks.testbed.metrics import mean_ci                                    # noqa: E402
from benchmarks.testbed.scenes import SUBJECTS, reference_images, subject_prompt  # noqa: E402
from ditskip_edge.models.loading import build_transformer                         # noqa: E402
from ditskip_edge.models.specs import builtin_spec                                # noqa: E402

MEASURES = ("closure", "progress", "cosine")


def scores(v: torch.Tensor, v_base: torch.Tensor, v_teacher: torch.Tensor) -> dict:
    """The instrument's closure and progress, and the cosine between the method's and the teacher's directions."""
    d, d_t = (v - v_base).flatten().double(), (v_teacher - v_base).flatten().double()
    return {"closure": ins.closure(v, v_base, v_teacher), "progress": ins.progress(v, v_base, v_teacher),
            "cosine": float(d @ d_t) / max(float(d.norm() * d_t.norm()), 1e-30)}


def subject_run(args: tuple) -> dict:
    sname, seeds, cfg = args
    torch.set_num_threads(1)
    spec = builtin_spec("flux-testbed")
    subject = SUBJECTS[sname]
    refs = reference_images(subject, cfg["n_references"])
    prompt = subject_prompt(subject)
    held = ins.held_out(spec, subject, photos_per_prompt=2, sample_seeds=[0])
    v_base = ins.velocities(spec, build_transformer(spec).eval(), held)
    t0 = time.perf_counter()
    teachers = {}
    full = finetune(spec, build_transformer(spec), refs, prompt, ins.TeacherConfig(
        mode="full", steps=cfg["teacher_full_steps"], lr=cfg["teacher_full_lr"], seed=100).finetune_config())
    teachers["full"] = ins.velocities(spec, full, held)
    del full
    planted = finetune(spec, build_transformer(spec), refs, prompt, ins.TeacherConfig(
        mode="lora", steps=cfg["teacher_lora_steps"], lr=cfg["lr"], seed=100).finetune_config())
    teachers["lora"] = ins.velocities(spec, planted, held)
    del planted
    teacher_s = time.perf_counter() - t0
    rows = []
    for seed in seeds:
        def score(k, model, seed=seed):
            if k in cfg["at_steps"]:
                v = ins.velocities(spec, model, held)
                rows.append({"subject": sname, "seed": seed, "steps": k,
                             **{f"{t}_{m}": x for t, vt in teachers.items()
                                for m, x in scores(v, v_base, vt).items()}})
        finetune(spec, build_transformer(spec), refs, prompt,
                 FinetuneConfig(mode="lora", steps=max(cfg["at_steps"]), lr=cfg["lr"], rank=8, seed=seed),
                 on_step=score)
    dist = {t: float(((vt - v_base) ** 2).mean()) for t, vt in teachers.items()}
    return {"subject": sname, "rows": rows, "teacher_s": round(teacher_s, 1), "base_teacher_mse": dist,
            "teacher_teacher_cosine": scores(teachers["lora"], v_base, teachers["full"])["cosine"]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subjects", nargs="*", default=["teal_star", "pink_heart"])
    ap.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    ap.add_argument("--at-steps", type=int, nargs="*", default=[50, 100, 200, 400])
    ap.add_argument("--teacher-full-steps", type=int, default=400)
    ap.add_argument("--teacher-full-lr", type=float, default=6e-4)
    ap.add_argument("--teacher-lora-steps", type=int, default=800)
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args()
    unknown = [s for s in args.subjects if s not in SUBJECTS]
    if unknown:
        print(f"instrument_pilot: unknown subject(s) {unknown}; expected some of {list(SUBJECTS)}", file=sys.stderr)
        return 2
    cfg = {"teacher_full_steps": args.teacher_full_steps, "teacher_full_lr": args.teacher_full_lr,
           "teacher_lora_steps": args.teacher_lora_steps, "lr": args.lr, "at_steps": sorted(set(args.at_steps)),
           "n_references": 5}
    prov = provenance()
    t0 = time.perf_counter()
    work = [(s, args.seeds, cfg) for s in args.subjects]
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            subjects = list(pool.map(subject_run, work))
    else:
        subjects = [subject_run(w) for w in work]
    rows = [r for s in subjects for r in s["rows"]]
    table = {k: {f"{t}_{m}": mean_ci([r[f"{t}_{m}"] for r in rows if r["steps"] == k])
                 for t in ("full", "lora") for m in MEASURES} for k in cfg["at_steps"]}
    out = Path(args.out)
    (out / "instrument_pilot.json").write_text(json.dumps({**prov, "config": cfg, "seconds": round(
        time.perf_counter() - t0, 1), "subjects": subjects, "table": table}, indent=1))
    md = ["# Instrument pilot: which teacher and which measure see full LoRA learn the subject", "",
          provenance_md(prov),
          f"Units: subjects {args.subjects} x student seeds {args.seeds} (full LoRA rank 8, lr {args.lr}, batch 4, "
          "research loop `finetune.py`), scored during one run at each length. Teachers per subject: full = every "
          f"weight, {args.teacher_full_steps} steps lr {args.teacher_full_lr}; lora = rank-8 LoRA (the students' "
          f"family) {args.teacher_lora_steps} steps lr {args.lr}; both with pretraining scenes at weight 0.5. "
          "Mean +- 95% Student-t CI over units; `x CI` = mean / CI half-width (the issue's bar: 10).", "",
          "| LoRA steps | teacher | closure | progress | cosine | progress x CI |", "|---|---|---|---|---|---|"]
    for k, t in table.items():
        for teacher in ("full", "lora"):
            p = t[f"{teacher}_progress"]
            md.append(f"| {k} | {teacher} | " + " | ".join(
                f"{t[f'{teacher}_{m}']['mean']:.3f} +- {t[f'{teacher}_{m}']['ci95']:.3f}" for m in MEASURES) +
                f" | {p['mean'] / max(p['ci95'], 1e-12):.1f} |")
    md += ["", "Per subject: base -> teacher velocity MSE " + "; ".join(
        f"{s['subject']}: full {s['base_teacher_mse']['full']:.4f}, lora {s['base_teacher_mse']['lora']:.4f} "
        f"(cosine between the two teachers' directions {s['teacher_teacher_cosine']:.2f})" for s in subjects), ""]
    (out / "instrument_pilot.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
