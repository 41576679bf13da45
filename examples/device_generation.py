"""The picture the phone draws after training, beside the one diffusers draws: `make demo`'s generation step.

    python -m examples.device_generation [--bundle B --lora L]      # default: builds demo_out/bundle_gen itself

For each prompt: `python -m ditskip_edge.runtime generate` in a child process (the device stand-in: runtime package
only, the bundle's generation programs, the LoRA merged at the weights' bit width) and the host's picture from the
full diffusers model with the LoRA loaded (ditskip_edge/generate.py diffusers_reference), from the same portable-RNG
noise, prompt, steps and guidance. Writes demo_out/device_generation.png (rows: diffusers, device; at fp32 they agree
to <= 1e-3 mean absolute pixel error, printed) and demo_out/device_<i>.png (the runtime's own PNGs).

examples/demo.py calls `device_vs_diffusers(bundle, lora, prompts)` after training on its int8 bundle (the rows then
differ by the quantization, ~4e-3 on flux-testbed); run alone, this builds the demo's bundle (examples/recipe.py) at
fp32.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "demo_out"


def start_runtime_generate(bundle: Path, lora: Path | None, prompt: str, seed: int, steps: int,
                           out: Path) -> subprocess.Popen:
    """The device stand-in in its own process (it imports the runtime package only); `finish_runtime_generate`
    waits for it, so the caller can draw the host's picture meanwhile."""
    cmd = [sys.executable, "-m", "ditskip_edge.runtime", "generate", str(bundle), "--prompt", prompt, "--seed", str(seed),
           "--steps", str(steps), "--out", str(out), "--json"] + (["--lora", str(lora)] if lora else [])
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(ROOT))


def finish_runtime_generate(proc: subprocess.Popen) -> dict:
    stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit((stderr.strip().splitlines() or [f"runtime generate exited with {proc.returncode}"])[-1])
    return json.loads(stdout)


def device_vs_diffusers(bundle: Path, lora: Path | None, prompts: list[str], seed: int = 0, steps: int | None = None,
                        out_dir: Path = OUT, labels: list[str] | None = None) -> dict:
    """`labels`: the picture's column labels (default "prompt 1", "prompt 2", ..)."""
    import torch
    from PIL import Image

    from ditskip_edge.generate import diffusers_reference, grid
    from ditskip_edge.images import to_uint8_image
    from ditskip_edge.models.specs import ModelSpec
    from ditskip_edge.runtime import rng
    from ditskip_edge.runtime.bundle import read_manifest
    m = read_manifest(bundle, verify=False)
    gen = m["generation"]
    steps = steps or gen["sampler"]["default_steps"]
    spec = ModelSpec.from_json(m["model"])
    lora_file = None if lora is None else (Path(lora) / m["lora_file"]["name"] if Path(lora).is_dir() else Path(lora))
    device, host, rows = [], [], []
    for i, prompt in enumerate(prompts):
        png = out_dir / f"device_{i}.png"
        proc = start_runtime_generate(bundle, lora, prompt, seed, steps, png)
        noise = torch.from_numpy(rng.normal(seed, tuple(gen["latent_shape"])))       # the host's twin meanwhile
        host.append(diffusers_reference(spec, lora_file, prompt, noise, steps, gen["sampler"]["guidance_scale"]).numpy())
        summary = finish_runtime_generate(proc)
        device.append(np.asarray(Image.open(png), np.float32) / 255)
        rows.append({"prompt": prompt, "device_png": str(png), "seconds": summary["seconds"],
                     "precision": summary["precision"],
                     "mean_abs_pixel_error": float(np.abs(device[-1] - host[-1]).mean())})
    images = torch.from_numpy(np.stack(host + device)).permute(0, 3, 1, 2) * 2 - 1
    picture = to_uint8_image(grid(images, len(prompts)))
    path = out_dir / "device_generation.png"
    labelled(picture.resize((picture.width * 4, picture.height * 4), 0), images.shape[-1] * 4 + 4,
             ["diffusers (host, LoRA loaded)", f"device runtime ({rows[0]['precision']}, LoRA merged)"],
             labels or [f"prompt {i + 1}" for i in range(len(prompts))]).save(path)
    return {"picture": str(path), "rows": "diffusers (host), device runtime", "images": rows}


LABEL_LEFT_PX, LABEL_TOP_PX = 210, 22      # `labelled`'s margins: the row labels' column, the column labels' line


def labelled(picture, step_px: int, row_labels: list[str], col_labels: list[str]):
    """The picture with a label left of each row and above each column (tiles `step_px` apart)."""
    from PIL import Image, ImageDraw
    left, top = LABEL_LEFT_PX, LABEL_TOP_PX
    canvas = Image.new("RGB", (picture.width + left, picture.height + top), "white")
    canvas.paste(picture, (left, top))
    draw = ImageDraw.Draw(canvas)
    for i, text in enumerate(row_labels):
        draw.text((6, top + i * step_px + step_px // 2 - 6), text, fill="black")
    for j, text in enumerate(col_labels):
        draw.text((left + j * step_px + 6, 5), text, fill="black")
    return canvas


def build_demo_bundle(out: Path) -> tuple[Path, Path]:
    """The demo's bundle (flux-testbed, teal star, BlockSkip 50%) with the generation part, trained as the demo does."""
    from compiler.cli import main as cli_main
    from testbed.scenes import SUBJECTS, subject_prompt, write_reference_photos
    subject = SUBJECTS["teal_star"]
    photos = out / "photos"
    write_reference_photos(subject, photos, 5, captions=True, described=True)    # the demo's captioned photos
    bundle = out / "bundle_gen"
    from examples.recipe import compile_args
    args = [*compile_args(subject_prompt(subject, described=True), photos, bundle, jobs=1), "--precision", "fp32"]
    if cli_main(args) != 0 or cli_main(["train", str(bundle), "--no-resume"]) != 0:
        raise SystemExit(1)
    return bundle, bundle / "runs" / "eager" / "lora"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", default=None)
    ap.add_argument("--lora", default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=None)
    args = ap.parse_args()
    import torch
    torch.set_num_threads(1)
    OUT.mkdir(exist_ok=True)
    if args.bundle:
        bundle, lora = Path(args.bundle), (Path(args.lora) if args.lora else None)
    else:
        bundle, lora = build_demo_bundle(OUT)
    from testbed.scenes import SUBJECTS, eval_prompts
    prompts = [p for p, _ in eval_prompts(SUBJECTS["teal_star"], described=True)]
    result = device_vs_diffusers(bundle, lora, prompts, args.seed, args.steps)
    for r in result["images"]:
        print(f"{r['prompt']!r}: device {r['seconds']:.1f} s, mean |device - diffusers| = {r['mean_abs_pixel_error']:.2e}")
    print(f"picture: {result['picture']} (rows: {result['rows']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
