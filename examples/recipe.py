"""The demo's recipe: the `ditskip-edge compile` request `make demo` sends (examples/demo.py), which
examples/device_generation.py, benchmarks/compile_jobs.py and the testbed's experiments reuse or vary."""

from __future__ import annotations

from pathlib import Path

# the recipe testbed/results/testbed_ceiling.md found draws the star at this model's sizes: a LoRA on every linear
# layer of the kept blocks, trained on the whole photos (at 64 px data / 32 px train a low-noise patch is half the
# photo: the star seen in pieces), each with its own caption
STEPS = 200                        # x 4 samples, at LR: over 4 subjects x 3 training seeds no worse than 400 at 2e-3
                                   # (testbed/results/demo_subjects.md; 800 drew no more: demo_recipe*.md), and
                                   # half the train and residual-cache time
GUIDANCE = 6.0                     # classifier-free guidance of the pictures (diffusers' and the device's): the
                                   # prompted background and the subject's colour word held against the LoRA
                                   # (testbed/results/demo_recipe.md)
LR = 4e-3                          # the LoRA's learning rate: twice the best of 1e-3 / 2e-3 / 5e-3 at 400 steps on the
                                   # testbed's current weights (testbed/results/demo_recipe.md), for half the steps
RANK = 8                           # the LoRA's rank
TRAIN = ["--grad-accum", "4", "--lora-targets", "all-linear", "--no-dynamic-patches"]


def compile_args(prompt: str, photos: Path, bundle: Path, jobs: int = 2, steps: int = STEPS,
                 generation: bool = True, split: tuple[int, int] | None = None, lr: float = LR,
                 seed: int = 0, dynamic_patches: bool = False, rank: int = RANK,
                 t_sampling: str = "uniform", model: str = "flux-testbed", lr_schedule: str = "constant",
                 lora_targets: str | None = None) -> list[str]:
    """The demo's `ditskip-edge compile` request (benchmarks/compile_jobs.py times the same one;
    testbed/experiments/demo_recipe.py varies it, without the generation programs). `split` (front, back): skip those
    blocks instead of selecting a 50% split; `seed`: the schedule's (timesteps, crops, noise); `dynamic_patches`:
    train on the method's timestep-dependent crops instead of the whole photos; `rank`: the LoRA's;
    `t_sampling`: the training timesteps' distribution (compile --t-sampling); `model`: the testbed, or a
    .safetensors file of its weights (`loading.testbed_weights_spec`); `lr_schedule`: compile --lr-schedule;
    `lora_targets`: compile --lora-targets instead of the demo's all-linear."""
    train = [a for a in TRAIN if a != "--no-dynamic-patches"] if dynamic_patches else TRAIN
    if lora_targets is not None:
        at = train.index("--lora-targets") + 1
        train = [*train[:at], lora_targets, *train[at + 1:]]
    draw = ["--generation", "--guidance", str(GUIDANCE)] if generation else []
    skip = ["--skip-ratio", "0.5"] if split is None else ["--skip-front", str(split[0]), "--skip-back", str(split[1])]
    return ["compile", "--model", model, "--images", str(photos), "--prompt", prompt, *skip,
            "--photo-captions", "--steps", str(steps), "--lr", f"{lr:g}", "--lr-schedule", lr_schedule,
            "--rank", str(rank),
            "--t-sampling", t_sampling, *train, *draw, "--jobs", str(jobs),
            "--seed", str(seed), "--out", str(bundle), "--force"]
