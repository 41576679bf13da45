"""Personalization study on the planted-subject instrument (testbed/study.py and instrument.py do the work).

Trains one teacher per held-out subject (a long full fine-tune, kept in <out>/teachers), then for every subject x
training seed personalizes with full LoRA, BlockSkip 30% / 50% (splits by selection with the base and the tuned
probe), the compressed cache, the ExecuTorch and ORT trainers, the paper's split scaled and the paper's ablations
(no residual, skip first / last 50%, fixed resize), loads each LoRA into the full diffusers model and scores how much
of the base -> teacher distance it closes. Writes testbed/results/personalization_study.{json,md} and
testbed/results/fidelity_<subject>.{png,txt}. Run it niced on a shared machine:

    nice -n 10 python testbed/experiments/personalization_study.py --jobs 2
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks._meta import provenance                                                   # noqa: E402

from testbed.instrument import TeacherConfig                               # noqa: E402
from testbed.study import (StudyConfig, add_rows, add_units, check_names, project_units,  # noqa: E402
                                      run_study, summarize, to_markdown)


def load_result(path: Path) -> dict:
    """A saved personalization_study.json; ValueError (one line) for a missing file or anything else."""
    try:
        result = json.loads(path.read_text())
    except OSError as e:
        raise ValueError(f"{path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e.msg}, line {e.lineno})") from None
    if not isinstance(result, dict) or not {"units", "config"} <= result.keys():
        raise ValueError(f"{path}: not a personalization_study result (no units / config)")
    return result


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "testbed" / "results"))
    ap.add_argument("--teacher-dir", default=None,
                    help="where teachers are kept and reused, keyed by model, subject and config (default OUT/teachers)")
    ap.add_argument("--subjects", nargs="*", default=None)
    ap.add_argument("--methods", nargs="*", default=None,
                    help="the rows to run; with --from-json: the rows every result is cut to before --add-units joins "
                    "them (study.project_units)")
    ap.add_argument("--train-seeds", type=int, nargs="*", default=[0, 1, 2], help="units = subjects x these")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--grad-accum", type=int, default=4)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--lora-targets", nargs="*", default=[],
                    help="module suffixes inside a block (default: the arch default, attention projections)")
    ap.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2], help="sample noise seeds (paired samples)")
    ap.add_argument("--prompts", type=int, default=None)
    ap.add_argument("--photos-per-prompt", type=int, default=2, help="fresh photos per prompt (velocity inputs)")
    ap.add_argument("--teacher-mode", default=TeacherConfig.mode, choices=["lora", "full"],
                    help="lora: a planted low-rank change (the default; instrument_pilot.md); full: every weight")
    ap.add_argument("--teacher-rank", type=int, default=TeacherConfig.rank)
    ap.add_argument("--teacher-steps", type=int, default=TeacherConfig.steps)
    ap.add_argument("--teacher-lr", type=float, default=TeacherConfig.lr)
    ap.add_argument("--teacher-prior", type=float, default=TeacherConfig.prior_weight)
    ap.add_argument("--probe", default=None, choices=["base", "tuned"],
                    help="the probe of the blockskip_30 / _50 rows (default: SelectionConfig's)")
    ap.add_argument("--sample-steps", type=int, default=20)
    ap.add_argument("--guidance", type=float, default=3.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--model", default="flux-testbed",
                    help="the committed testbed (default), or a .safetensors file of other testbed weights "
                         "(pretrain_testbed.py --out, a grown testbed too)")
    ap.add_argument("--jobs", type=int, default=1, help="subjects in parallel worker processes (1 thread each)")
    ap.add_argument("--from-json", default=None, metavar="JSON",
                    help="no training: recompute the table and verdicts of a saved personalization_study.json (its "
                         "units) with this code's analysis, and rewrite it and its .md beside it")
    ap.add_argument("--add-units", nargs="*", default=[], metavar="JSON",
                    help="with --from-json: first add the units of these saved results (the same config key: "
                         "methods, training and teacher settings, model weights; no unit twice), e.g. a run of more "
                         "training seeds into another folder")
    ap.add_argument("--add-rows", nargs="*", default=[], metavar="JSON",
                    help="with --from-json: first add the rows of these saved results, runs of other methods on the "
                         "same units (subject x training seed; the same training, teacher and model weights; "
                         "study.add_rows), e.g. the remaining rows on the seeds a two-row run covered; then "
                         "--methods cuts and orders, then --add-units joins")
    args = ap.parse_args()
    if (args.add_units or args.add_rows) and not args.from_json:
        print("personalization_study: --add-units / --add-rows need --from-json (the result they are added to)",
              file=sys.stderr)
        return 2
    if args.from_json:
        path = Path(args.from_json)
        try:
            result = load_result(path)
            for other in args.add_rows:
                add_rows(result, load_result(Path(other)), other)
            if args.methods:                     # project every result onto these rows first (study.project_units)
                project_units(result, args.methods)
            for other in args.add_units:
                saved = load_result(Path(other))
                if args.methods:
                    project_units(saved, args.methods)
                add_units(result, saved, other)
        except ValueError as e:
            print(f"personalization_study: {e}", file=sys.stderr)
            return 2
        result.update(summarize(result["units"]))
        path.write_text(json.dumps(result, indent=1))
        path.with_suffix(".md").write_text(to_markdown(result))
        print(to_markdown(result))
        return 0
    torch.set_num_threads(args.threads)
    cfg = StudyConfig(out=Path(args.out), steps=args.steps, grad_accum=args.grad_accum, rank=args.rank, lr=args.lr,
                      train_seeds=args.train_seeds, seeds=args.seeds, prompts=args.prompts,
                      photos_per_prompt=args.photos_per_prompt, sample_steps=args.sample_steps,
                      guidance=args.guidance, methods=args.methods, jobs=args.jobs, lora_targets=args.lora_targets,
                      teacher=TeacherConfig(mode=args.teacher_mode, rank=args.teacher_rank,
                                            steps=args.teacher_steps, lr=args.teacher_lr,
                                            prior_weight=args.teacher_prior), probe=args.probe,
                      teacher_dir=Path(args.teacher_dir) if args.teacher_dir else None, model=args.model)
    if args.subjects:
        cfg.subjects = args.subjects
    prov = provenance()
    try:
        check_names(cfg)
    except ValueError as e:
        print(f"personalization_study: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    machine = (f"{prov['machine']}; {args.jobs} worker process(es) x 1 torch thread" if args.jobs > 1 else
               f"{prov['machine']}; {torch.get_num_threads()} torch thread(s)")

    def write(result: dict) -> None:            # after every unit (partial) and at the end
        result["machine"] = machine
        (out / "personalization_study.json").write_text(json.dumps(result, indent=1))
        (out / "personalization_study.md").write_text(to_markdown(result))

    result = run_study(cfg, prov["command"], on_unit=write)
    write(result)
    shutil.rmtree(out / "work", ignore_errors=True)
    print(to_markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
