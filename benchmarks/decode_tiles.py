"""Generation's decode program on one latent tile at real scale: the portable program against the XNNPACK one
(export/conv_matmul.py: every convolution as im2col bands + an XNNPACK bmm, the weights still program inputs read in
place from a mapped file), for SANA-1600M's DC-AE f32c32 on an 8 x 8-cell tile (256 px out: compile
--decode-tile-px 256) and FLUX.1-dev's AutoencoderKL on a 32 x 32 latent (256 px), published configs, random
weights (seed 0).

    PYTHONPATH=. nice -n 5 python benchmarks/decode_tiles.py [--models sana,flux] [--ways portable,xnnpack]
        [--band-mib 8]

Each program runs once in a fresh child process that imports only the runtime, with one ExecuTorch / XNNPACK thread
(bindings.set_executorch_threads(1)) and its weights as the runtime passes them (views of one memory-mapped file, no
copy): CPU seconds of the call (the calling thread's; XNNPACK runs on it with one thread), whole-process peak
RssAnon (dirty anonymous: what a phone counts; sampled every 2 ms, baseline before loading plus growth), the
program's planned arena (its manifest figure) and the estimate's (memory_estimate/generation.py
decoder_program_memory), and the image. Rows are merged into an existing result by (model, way), so a slow
portable row can be measured once and kept (--ways xnnpack). Writes benchmarks/results/decode_tiles.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from _meta import PEAK_WATCHER, provenance_md                                   # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
MIB = 1024 ** 2
REAL = Path("/tmp/real_scale")
KEPT = Path(tempfile.gettempdir()) / "decode_tiles_images"      # each way's image, for a later run's comparison
MODELS = {"sana": ("sana", REAL / "sana-1600m/pipeline/vae/config.json", 8, "SANA-1600M DC-AE f32c32"),
          "flux": ("flux", REAL / "flux-dev-width-2d4s/pipeline/vae/config.json", 32, "FLUX.1-dev AutoencoderKL")}

CHILD = r"""
import json, sys, time
import numpy as np
from device_tests.runtime_imports import forbid_host_modules
forbid_host_modules()
from ditskip_edge.runtime import bindings
bindings.set_executorch_threads(1)
load = bindings.executorch_inference()._load_for_executorch
import torch
spec = json.loads(sys.argv[1])
x = torch.from_numpy(np.load(spec["x"]))
flat = np.memmap(spec["weights"], dtype=np.float32, mode="r")
ws, at = [], 0
for shape in spec["shapes"]:
    n = int(np.prod(shape))
    ws.append(torch.from_numpy(flat[at:at + n].reshape(shape)))      # a view of the mapping (read-only: no copy)
    at += n
""" + PEAK_WATCHER + r"""
m = load(spec["pte"])
c0, w0 = time.thread_time(), time.perf_counter()
image = m.forward((x, *ws))[0].numpy().copy()
cpu, wall = time.thread_time() - c0, time.perf_counter() - w0
stop_watch()
np.save(spec["out"], image)
print(json.dumps({"cpu_s": cpu, "wall_s": wall, "baseline_anon_bytes": base.anon_bytes,
                  "peak_anon_growth_bytes": peak["anon"], "peak_file_growth_bytes": peak["file"]}))
"""


def run_child(spec: dict) -> dict:
    env = {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "65536",
           "MALLOC_TRIM_THRESHOLD_": "131072"}
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", CHILD, json.dumps(spec)], capture_output=True,
                         text=True, cwd=str(ROOT), env=env)
    if out.returncode != 0:
        raise SystemExit(f"child failed\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(model: str, ways: list[str], band_bytes: int, work: Path) -> list[dict]:
    import torch
    from ditskip_edge.memory_estimate.generation import decoder_program_memory
    from ditskip_edge.models.latents import LatentEncoder
    from ditskip_edge.models.loading import vae_class
    from export.executorch_preprocess import export_module_program
    from export.generation_modules import Decode, PlainDecode, decoder_states
    arch, path, side, title = MODELS[model]
    config = json.loads(path.read_text())
    torch.manual_seed(0)
    plain = PlainDecode(LatentEncoder(arch, vae_class(arch).from_config(config).eval()))
    x = torch.randn(1, int(config["latent_channels"]), side, side, generator=torch.Generator().manual_seed(1))
    states = decoder_states(plain, x)
    decode = Decode(plain, list(states))
    weights = [v.detach().contiguous() for v in states.values()]
    np.save(work / "x.npy", x.numpy())
    with open(work / "weights.bin", "wb") as f:
        for w in weights:
            f.write(w.numpy().tobytes())
    with torch.no_grad():
        np.save(KEPT / f"{model}_eager.npy", decode(x, *weights).numpy())      # the host's torch decode
    rows = []
    for way in ways:
        t0 = time.perf_counter()
        kw = {"conv_band_bytes": band_bytes} if way == "xnnpack" else {}
        pte, sizes = export_module_program(decode, (x, *weights), way, planned_inputs=False, mm_rewrite=True, **kw)
        export_s = time.perf_counter() - t0
        (work / f"{way}.pte").write_bytes(pte)
        est = decoder_program_memory(arch, config, (side, side), band_bytes if way == "xnnpack" else None)
        print(f"{model} {way}: exported in {export_s:.0f} s, arena {sizes['planned_arena_bytes']}, estimate {est}",
              file=sys.stderr, flush=True)
        m = run_child({"x": str(work / "x.npy"), "weights": str(work / "weights.bin"),
                       "shapes": [list(w.shape) for w in weights], "pte": str(work / f"{way}.pte"),
                       "out": str(work / f"{model}_{way}.npy")})
        image = np.load(work / f"{model}_{way}.npy")
        rows.append({"model": model, "title": title, "way": way, "latent_tile": [side, side],
                     "image_px": list(image.shape[2:]), "band_bytes": band_bytes if way == "xnnpack" else None,
                     "cpu_s": round(m["cpu_s"], 2), "wall_s": round(m["wall_s"], 2),
                     "peak_rss_anon_mib": round((m["baseline_anon_bytes"] + m["peak_anon_growth_bytes"]) / MIB, 1),
                     "rss_anon_growth_mib": round(m["peak_anon_growth_bytes"] / MIB, 1),
                     "rss_file_growth_mib": round(m["peak_file_growth_bytes"] / MIB, 1),
                     "planned_arena_bytes": sizes["planned_arena_bytes"], "estimate_arena_bytes": est["arena_bytes"],
                     "estimate_workspace_bytes": est["workspace_bytes"], "constant_bytes": sizes["constant_bytes"],
                     "pte_bytes": sizes["pte_bytes"], "export_s": round(export_s, 1),
                     "weights_bytes": sum(w.numel() * 4 for w in weights)})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="sana,flux")
    ap.add_argument("--ways", default="portable,xnnpack")
    ap.add_argument("--band-mib", type=float, default=8.0, help="im2col band bound (export/conv_matmul.py)")
    ap.add_argument("--out", default=str(RESULTS / "decode_tiles"))
    ap.add_argument("--merge-only", action="store_true", help="only recompute the differences from the kept images")
    args = ap.parse_args()
    if args.merge_only:
        merge(Path(args.out), [], None)
        return 0
    from _meta import provenance, write_result
    out = Path(args.out)
    band = int(args.band_mib * MIB)
    KEPT.mkdir(exist_ok=True)
    prov = provenance()
    new = []
    for model in args.models.split(","):
        with tempfile.TemporaryDirectory(prefix="decode_tiles_") as tmp:
            work = Path(tmp)
            rows = measure(model, args.ways.split(","), band, work)
            for r in rows:
                np.save(KEPT / f"{model}_{r['way']}_band{r['band_bytes']}.npy",
                        np.load(work / f"{model}_{r['way']}.npy"))
            new += rows
    merge(out, new, prov)
    return 0


def merge(out: Path, new: list[dict], prov: dict | None) -> None:
    """New rows into the result as it is now (another run may have written it meanwhile), by (model, way, band);
    each XNNPACK row's max abs difference against the portable program's image and every row's against the host's
    torch decode, from the images kept in KEPT."""
    from _meta import write_result
    doc = json.loads(out.with_suffix(".json").read_text()) if out.with_suffix(".json").exists() else {"rows": []}
    runs = doc.setdefault("runs", [])
    if prov is not None:
        runs.append(prov)
    for r in new:
        r["run"] = len(runs) - 1
    done = {(n["model"], n["way"], n["band_bytes"]) for n in new}
    doc["rows"] = [r for r in doc["rows"] if (r["model"], r["way"], r["band_bytes"]) not in done] + new
    for r in doc["rows"]:
        mine = KEPT / f"{r['model']}_{r['way']}_band{r['band_bytes']}.npy"
        portable = KEPT / f"{r['model']}_portable_bandNone.npy"
        eager = KEPT / f"{r['model']}_eager.npy"
        if r["way"] == "xnnpack" and mine.exists() and portable.exists():
            r["max_abs_diff_vs_portable"] = float(np.abs(np.load(mine) - np.load(portable)).max())
        if mine.exists() and eager.exists():
            r["max_abs_diff_vs_eager"] = float(np.abs(np.load(mine) - np.load(eager)).max())
    print(write_result(doc, out, to_markdown))
    return 0


def to_markdown(d: dict) -> str:
    lines = ["# Generation's decode program on one tile: portable against XNNPACK (weights mapped inputs)", ""]
    for i, p in enumerate(d["runs"]):
        lines.append(f"Run {i}: " + provenance_md(p))
    lines += ["Random weights (seed 0) in the published configs; one call of the program in a fresh child process "
              "(runtime imports only), one ExecuTorch / XNNPACK thread, weights as views of one mapped file. CPU s: "
              "the calling thread's CPU time of the call (the machine is shared: wall is not the figure). Peak "
              "RssAnon: the whole child process (baseline before loading + growth, sampled every 2 ms). Arena: "
              "the program's planned arena and memory_estimate/generation.py decoder_program_memory's; workspace: "
              "the estimate's largest band XNNPACK packs. Max diff: the XNNPACK image against the portable one "
              "(images in [-1, 1] before postprocessing).", "",
              "| model | latent tile | way | band MiB | CPU s | peak RssAnon MiB | arena bytes | estimate arena | "
              "estimate workspace | max abs diff vs portable | vs host torch | export s | run |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(d["rows"], key=lambda r: (r["model"], r["way"] != "portable", r["band_bytes"] or 0)):
        diff, eager = r.get("max_abs_diff_vs_portable"), r.get("max_abs_diff_vs_eager")
        lines.append(f"| {r['title']} | {r['latent_tile'][0]}x{r['latent_tile'][1]} -> {r['image_px'][0]} px | "
                     f"{r['way']} | {'' if r['band_bytes'] is None else round(r['band_bytes'] / MIB, 1)} | "
                     f"{r['cpu_s']} | {r['peak_rss_anon_mib']} | {r['planned_arena_bytes']:,} | "
                     f"{r['estimate_arena_bytes']:,} | {r['estimate_workspace_bytes']:,} | "
                     f"{'' if diff is None else f'{diff:.2e}'} | {'' if eager is None else f'{eager:.2e}'} | "
                     f"{r['export_s']} | {r['run']} |")
    return "\n".join(lines) + "\n" + "".join(f"\n{n}\n" for n in d.get("notes", []))


if __name__ == "__main__":
    sys.exit(main())
