"""Benchmark: the memory a training program's .ptd (external frozen weights) costs when the runtime reads it with
ExecuTorch's FileDataLoader (what the Android TrainingModule.load(model, data) JNI does) vs MmapDataLoader without
mlock, measured in a C++ process (device_tests/native/ptd_loader_check.cpp, built against the executorch wheel).

FileDataLoader copies every frozen weight into heap memory (RssAnon, what a phone counts against the app);
MmapDataLoader leaves them in clean file-backed pages (RssFile, which the kernel can drop and reload).

Programs, both exported by the project's own exporter (export/executorch_program.py, ExportConfig(external_weights=
True), the joint forward-backward "forward" method, portable kernels):
- `wide-int8`: one FLUX double block 384 wide (6 heads x 64), LoRA rank 4, int8 frozen weights: a .ptd of a few MiB
  (the program tests/test_native_ptd.py checks);
- `flux-tiny`: train_step_fp32 of a flux-tiny bundle (conftest.compile_tiny + ExecutorchPrograms), fed the bundle's
  first sample; its .ptd is small (toy width 32), so the difference is small too.

    PYTHONPATH=. nice python benchmarks/ptd_loader.py [--steps 2] [--no-bundle]

Writes benchmarks/results/ptd_loader.{json,md} with the command, machine and date.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._meta import provenance, provenance_md          # noqa: E402
from device_tests import native_ptd                              # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
MIB = 2**20


def export_wide_step(out_dir, heads: int = 6, precision: str = "int8") -> tuple[Path, Path, list[np.ndarray]]:
    """One FLUX double block (heads x 64 wide), LoRA rank 4 with random B, frozen weights quantized to `precision`,
    exported as the project exports a train step with external weights. Returns (.pte, .ptd, inputs)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import flux_step_module
    from ditskip_edge.quantize import QuantSpec
    from export.executorch_program import ExportConfig, export_training_program
    step = flux_step_module(precision, heads=heads, head_dim=64)
    example = step.example
    prog = export_training_program(step, ExportConfig(quant=QuantSpec(precision), external_weights=True,
                                                      trace_need=False))
    pte, ptd = prog.write(Path(out_dir) / "train_step.pte")
    return pte, ptd, [t.detach().numpy().copy() for t in example]


def tiny_bundle_step(out_dir) -> tuple[Path, Path, list[np.ndarray]]:
    """train_step_fp32 (+ .ptd) of a flux-tiny bundle and the step inputs of its first sample."""
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import compile_tiny
    from ditskip_edge.runtime.bundle import Bundle
    from ditskip_edge.runtime.inputs import StepInputs
    from export.executorch_stage import ExecutorchPrograms
    bundle_dir = compile_tiny(Path(out_dir) / "bundle", "flux-tiny",
                              programs=[ExecutorchPrograms(("fp32",), preprocess=False)])
    manifest = json.loads((bundle_dir / "manifest.json").read_text())
    entry = next(p for p in manifest["programs"] if p["name"] == "train_step" and p["runtime"] == "executorch")
    b = Bundle.open(bundle_dir)
    inputs = StepInputs(b)(b.schedule.samples[0])
    arrays = [np.asarray(inputs[spec["name"]], dtype=spec["dtype"]).reshape(spec["shape"]) for spec in entry["inputs"]]
    return bundle_dir / entry["path"], bundle_dir / entry["data"][0], arrays


def compare(binary, pte, ptd, inputs, steps: int = 2) -> dict[str, dict]:
    """loader -> the checker's reading, each in a fresh process."""
    return {loader: native_ptd.run(binary, pte, ptd, loader, "forward", steps, inputs) for loader in native_ptd.LOADERS}


def rows(program: str, readings: dict[str, dict]) -> list[dict]:
    out = []
    for loader, r in readings.items():
        out.append({"program": program, "loader": loader,
                    "rss_anon_over_baseline_mib": round((r["rss_anon_kib"] - r["baseline_rss_anon_kib"]) / 1024, 3),
                    "rss_file_mib": round(r["rss_file_kib"] / 1024, 3),
                    "rss_file_over_baseline_mib": round((r["rss_file_kib"] - r["baseline_rss_file_kib"]) / 1024, 3),
                    "ptd_mib": round(r["ptd_bytes"] / MIB, 3), "first_output": r["outputs0"], "raw": r})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--no-bundle", action="store_true", help="skip the flux-tiny bundle program")
    args = ap.parse_args()
    prov = {**provenance(), "nproc": os.cpu_count(), "uname": " ".join(platform.uname())}
    table, timing = [], {}
    with tempfile.TemporaryDirectory(prefix="ptd_loader_") as tmp:
        tmp = Path(tmp)
        t = time.time()
        binary = native_ptd.build(tmp / "bin")
        timing["build_s"] = round(time.time() - t, 1)
        programs = [("wide-int8", lambda d: export_wide_step(d))]
        if not args.no_bundle:
            programs.append(("flux-tiny", tiny_bundle_step))
        for name, make in programs:
            d = tmp / name
            d.mkdir()
            t = time.time()
            pte, ptd, inputs = make(d)
            timing[f"{name}_export_s"] = round(time.time() - t, 1)
            table += rows(name, compare(binary, pte, ptd, inputs, args.steps))
    result = {**prov, "steps": args.steps, "timing": timing, "rows": table}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ptd_loader.json").write_text(json.dumps(result, indent=2) + "\n")
    md = ["# .ptd loader: FileDataLoader vs MmapDataLoader (NoMlock), C++ process", "", provenance_md(prov) + f"uname: `{prov['uname']}`\n",
          f"Method `forward` (joint forward-backward) run {args.steps}x; RSS from /proc/self/status after the steps; "
          "baseline = before the loaders are made (inputs already read).", "",
          "| program | loader | RssAnon over baseline MiB | RssFile MiB | .ptd MiB | first output |",
          "|---|---|---|---|---|---|"]
    for r in table:
        md.append(f"| {r['program']} | {r['loader']} | {r['rss_anon_over_baseline_mib']:.2f} | {r['rss_file_mib']:.2f}"
                  f" | {r['ptd_mib']:.2f} | {r['first_output']!r} |")
    md += ["", "With `file` the .ptd's bytes are heap (RssAnon); with `mmap` they move to clean file-backed pages "
           "(RssFile), and the first output (the loss) is the same bit for bit. RssFile also counts the shared "
           "libraries (about 4 MiB at baseline).", ""]
    (RESULTS / "ptd_loader.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
