"""The main job (`make demo`): compile a bundle for a built-in tiny model from the demo photos, train it with the
eager runtime, and print where the bundle and the LoRA are. Output goes to demo_out/ (replaced each run)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .cli import main as cli_main

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "demo_out"


def main() -> int:
    bundle = OUT / "bundle"
    args = ["compile", "--model", "flux-tiny", "--images", str(ROOT / "examples" / "photos"),
            "--prompt", "a photo of sks toy", "--skip-front", "1", "--skip-back", "2",
            "--steps", "200", "--grad-accum", "2", "--rank", "8", "--lr", "1e-3", "--out", str(bundle), "--force"]
    if cli_main(args) != 0:
        return 1
    if cli_main(["train", str(bundle), "--no-resume"]) != 0:
        return 1
    summary = json.loads((bundle / "runs" / "eager" / "summary.json").read_text())
    print(f"\nbundle: {bundle}\nLoRA:   {summary['lora']}\n"
          f"loss:   first step {summary['losses'][0]:.4f} -> last step {summary['losses'][-1]:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
