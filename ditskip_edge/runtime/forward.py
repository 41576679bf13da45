"""The frozen base model's forward on the device, one block at a time: the subject stage's programs (issue 15).

    fwd = ForwardPrograms(bundle)                         # the bundle's encode / embed / block programs
    x0 = fwd.x0(photo_pixels, sample.crop_box)            # runtime/patches.py crop + the encode program(s): the
                                                          # whole crop, or its tiles blended (encode_tiling)
    residuals = fwd.residuals(x0, noise, t, cond)         # {"front.img", "front.txt" (FLUX), "back.img"}: fp32

The residuals are skip_model.compute_residuals' (the host's definition): the embed program gives the streams
entering block 0 and the context every block reads; block programs run in order; the front residual is each stream
after block n_front - 1 minus the embedded stream, the back residual the img stream after the last block minus the
img stream entering block num_blocks - n_back. The arithmetic between programs is numpy float32.

Memory: a block program is loaded when its block runs and dropped before the next one loads (`keep_blocks=False`,
the default), and so are the encode and embed programs: one program's weights and planned arena live at a time,
besides the streams, the context and one sample's residuals (at the ~300M FLUX layout the embed program's 36 MB arena
stayed beside every block's 52 MB one). With `keep_blocks=True` every program stays loaded (for an x0-only or
cache-free run that computes residuals every step: no reload per sample); that costs every block's planned arena at
once, and its weights unless they are file-backed (a memory-mapped .ptd data file, ProgramEntry.data): at the ~300M
FLUX layout with mapped weights 669-681 MiB RssAnon over two runs against training's 75 MiB and 127-130 MiB one
block at a time (benchmarks/results/subject_stage_headline_computed.md), so it is opt-in.

ExecuTorch's inference bindings take and return torch tensors (no autograd is used); outputs are copied to numpy.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np

from . import bindings, tiling
from .bundle import Bundle
from .contract import BLOCK, CTX_PREFIX, EMBED, ENCODE, STREAM_PREFIX, encode_stage_names, ordered_inputs
from .errors import BundleError
from .patches import crop_patch

RUNTIME = "executorch"


def encode_tiling_of(bundle: Bundle) -> dict:
    """The manifest's encode_tiling record; a bundle written before it (one encode program) reads as untiled."""
    rec = bundle.manifest.get("encode_tiling")
    if rec is not None:
        return rec
    s_min = int(bundle.field("schedule", "s_min_px"))
    return {"tile_px": s_min, "stride_px": s_min, "scale": None, "tiled": False, "stages": 1,
            "programs": {tiling.tile_key(s_min, s_min): ENCODE}}


def subject_programs(bundle: Bundle) -> tuple[dict[str, list[dict]], dict, dict[int, dict]]:
    """({pixel tile key "HxW": its encode chain}, embed, {block index: entry}) of the bundle's manifest, or a
    BundleError naming what is missing. Untiled: one encode chain, keyed by the whole crop's shape. A chain is the
    encode program, or with encode_tiling.stages > 1 the encoder's stage programs in order (encode_stage_names)."""
    where = bundle.root / "manifest.json"
    progs = [p for p in bundle.programs if p.get("runtime") == RUNTIME]
    by_name: dict[str, list[dict]] = {}
    for p in progs:
        by_name.setdefault(str(p.get("name")), []).append(p)
    rec = encode_tiling_of(bundle)
    chains = {key: encode_stage_names(name, int(rec.get("stages", 1))) for key, name in rec["programs"].items()}
    missing = list(dict.fromkeys(n for n in (*(n for c in chains.values() for n in c), EMBED) if not by_name.get(n)))
    if missing:
        raise BundleError(f"{where}: no {', '.join(missing[:4])} program: this bundle cannot run the subject stage "
                          f"(compile it without --images: a model bundle)")
    encoders = {key: [by_name[n][0] for n in chain] for key, chain in chains.items()}
    blocks = {int(p["block"]): p for p in by_name.get(BLOCK, [])}
    plan = bundle.field("plan")
    need = list(range(int(plan["num_blocks"]))) if int(plan["n_back"]) else list(range(int(plan["n_front"])))
    absent = [i for i in need if i not in blocks]
    if absent:
        raise BundleError(f"{where}: no block program for blocks {absent[:5]} (the residuals "
                          f"need blocks 0..{need[-1]})")
    return encoders, by_name[EMBED][0], blocks


def executorch_call(fn, what: str, program: Path, data: Path | None = None):
    """fn() (an ExecuTorch load or run) with ExecuTorch's log lines kept off the user's stderr (its Python bindings
    write them to sys.stderr: XNNPACK's cpuinfo probe on a delegated program's first run, a failure's reasons); a
    failure is one BundleError naming the program (or its data file) with the first lines that say why."""
    log = io.StringIO()
    try:
        with contextlib.redirect_stderr(log):
            return fn()
    except Exception as e:  # noqa: BLE001 - ExecuTorch reports failures as RuntimeError with an error code
        lines = [ln.strip() for ln in log.getvalue().splitlines() if ln.strip() and "cpuinfo" not in ln]
        why = "; ".join([f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'no message'}"] + lines[:2])
        if data is not None:
            raise BundleError(f"{data}: does not match its program {program.name} (ExecuTorch could not "
                              f"{what} it: {why})") from e
        raise BundleError(f"{program}: ExecuTorch could not {what} the program ({why})") from e


class ProgramRunner:
    """One forward-only ExecuTorch program: load (with its data file), call with named inputs, named outputs.
    ExecuTorch's log lines (its Python bindings write them to sys.stderr) are kept out of the user's stderr and put
    into the one-line error when loading or running fails."""

    def __init__(self, bundle: Bundle, entry: dict):
        import torch
        self._torch = torch
        self.entry = entry
        self.path = bundle.root / entry["path"]
        self.data = [bundle.root / d for d in entry.get("data", [])]
        load = bindings.executorch_inference()._load_for_executorch
        args = (str(self.path), str(self.data[0])) if self.data else (str(self.path),)
        self.module = self._guarded(lambda: load(*args), "load")

    def _guarded(self, fn, what: str):
        return executorch_call(fn, what, self.path, self.data[0] if self.data else None)

    def check(self) -> None:
        """Run once on zeros: the method (and every weight it takes from its data file) is resolved on first run."""
        self({s["name"]: np.zeros(s["shape"], dtype=np.dtype(s.get("dtype", "float32"))) for s in self.entry["inputs"]})

    def __call__(self, named: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        tensors = [self._torch.from_numpy(a) for a in ordered_inputs(self.entry, named)]
        outs = self._guarded(lambda: self.module.forward(tuple(tensors)), "run")
        specs = self.entry["outputs"]
        if len(outs) != len(specs):
            raise BundleError(f"{self.path}: {len(outs)} outputs, the manifest lists {len(specs)}")
        return {s["name"]: np.array(o.numpy(), dtype=np.float32, copy=True) for s, o in zip(specs, outs)}


class ForwardPrograms:
    def __init__(self, bundle: Bundle, keep_blocks: bool = False):
        self.bundle = bundle
        self.encode_entries, self.embed_entry, self.block_entries = subject_programs(bundle)
        self.encode_tiling = encode_tiling_of(bundle)
        plan = bundle.field("plan")
        self.num_blocks, self.n_front, self.n_back = int(plan["num_blocks"]), int(plan["n_front"]), int(plan["n_back"])
        self.s_min_px = int(bundle.field("schedule", "s_min_px"))
        self.keep_blocks = keep_blocks
        self._encode: dict[tuple[str, int], ProgramRunner] = {}   # (tile key, stage) -> runner (one at a time
                                                                   # unless keep_blocks)
        self._embed: ProgramRunner | None = None
        self._blocks: dict[int, ProgramRunner] = {}

    def check_loads(self) -> None:
        """Load and run every program once on zeros (dropping the blocks again): a damaged program or a data file
        that does not match its program is refused before any work."""
        for key, chain in self.encode_entries.items():
            for k in range(len(chain)):
                self.encoder(key, k).check()          # one encode program loaded at a time unless keep_blocks
        self.embedder().check()
        if not self.keep_blocks:
            self._encode, self._embed = {}, None
        for i in sorted(self.block_entries):
            self.block(i).check()
            if not self.keep_blocks:
                self.release(i)

    def encoder(self, key: str, stage: int = 0) -> ProgramRunner:
        """Stage `stage` of the encode chain of pixel tile shape `key` ("HxW"); with keep_blocks=False the only
        encode program loaded."""
        if (key, stage) not in self._encode:
            if not self.keep_blocks:
                self._encode = {}
            self._encode[key, stage] = ProgramRunner(self.bundle, self.encode_entries[key][stage])
        return self._encode[key, stage]

    def encode_shape(self, tiles: list[np.ndarray]) -> list[np.ndarray]:
        """Tiles of one pixel shape -> their latents [1, C, th / f, tw / f]: each program of the shape's chain is
        loaded once and run on every tile before the next one loads (a staged encoder: one stage's weights at a
        time, besides every tile's features at the stage boundary)."""
        key = tiling.tile_key(tiles[0].shape[2], tiles[0].shape[3])
        chain = self.encode_entries[key]
        xs = tiles
        for k, entry in enumerate(chain):
            runner = self.encoder(key, k)
            x_in, y_out = entry["inputs"][0]["name"], entry["outputs"][0]["name"]
            xs = [runner({x_in: x})[y_out] for x in xs]
            del runner
        return xs

    def embedder(self) -> ProgramRunner:
        if self._embed is None:
            self._embed = ProgramRunner(self.bundle, self.embed_entry)
        return self._embed

    def block(self, i: int) -> ProgramRunner:
        if i not in self._blocks:
            self._blocks[i] = ProgramRunner(self.bundle, self.block_entries[i])
        return self._blocks[i]

    def release(self, i: int) -> None:
        """Drop block i's program: its memory (planned arena, constants) is freed with the last reference."""
        self._blocks.pop(i, None)

    def x0(self, photo: np.ndarray, crop_box) -> np.ndarray:
        """photo [3, H, W] in [-1, 1] (runtime/photos.py), crop box -> clean latents x0 [1, C, h, w]."""
        patch = crop_patch(photo, crop_box, self.s_min_px)
        t = self.encode_tiling
        if t["tiled"]:          # runtime/tiling.py: the tiles of one shape in a row, each shape's program loaded once
            x0 = tiling.encode_tiled(patch, None, int(t["tile_px"]), int(t["stride_px"]), int(t["scale"]),
                                     encode_shape=self.encode_shape)
        else:
            x0 = self.encode_shape([patch])[0]
        if not self.keep_blocks:
            self._encode = {}
        return x0

    def residuals(self, x0: np.ndarray, noise: np.ndarray, t: np.ndarray, cond: dict[str, np.ndarray]) -> dict:
        """One sample's residuals, fp32, per stream (cond: {"cond.<key>": array} as the step takes it)."""
        out = self.embedder()({"x0": x0, "noise": noise, "t": t, **cond})
        if not self.keep_blocks:
            self._embed = None
        streams = {k: v for k, v in out.items() if k.startswith(STREAM_PREFIX)}
        ctx = {k: v for k, v in out.items() if k.startswith(CTX_PREFIX)}
        embedded = dict(streams)
        res: dict[str, np.ndarray] = {}
        back_start = self.num_blocks - self.n_back
        last = self.num_blocks if self.n_back else self.n_front
        kept_out = None
        for i in range(last):
            if i == self.n_front and self.n_front:
                res.update({f"front.{k[len(STREAM_PREFIX):]}": streams[k] - embedded[k] for k in streams})
            if i == back_start:
                kept_out = streams[STREAM_PREFIX + "img"]
            streams = self.block(i)({**streams, **ctx})
            if not self.keep_blocks:
                self.release(i)
        if self.n_front and last == self.n_front:            # no back span: the front span ends the forward
            res.update({f"front.{k[len(STREAM_PREFIX):]}": streams[k] - embedded[k] for k in streams})
        if self.n_back:
            res["back.img"] = streams[STREAM_PREFIX + "img"] - kept_out
        return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in res.items()}


def program_files(bundle: Bundle) -> list[Path]:
    enc, emb, blocks = subject_programs(bundle)
    return [bundle.root / p["path"] for p in [*(e for c in enc.values() for e in c), emb, *blocks.values()]]
