"""A bundle: a directory with manifest.json at its root listing every file with its SHA-256 and size.

Two kinds (manifest `bundle_kind`):
- a *subject bundle* ("subject", what every runtime trains): the model part plus one subject's photos, schedule, text
  conditioning and residual cache; compiled on the host from the photos, or written on the device by the subject
  stage (runtime/subject.py) from a model bundle;
- a *model bundle* ("model", `ditskip-edge compile` without --images): the model part alone, with the subject
  stage's forward programs and one or more prompts' text conditioning, and no photo, latent or residual.

The file layout (one name per file, used by the compiler that writes and every runtime that reads):

    manifest.json                              everything below, with SHA-256 and size; its own digest (below)
    model/kept_weights.safetensors             embedders, kept blocks, head (the eager runtime's weights)
    model/text/prompt_NNN.safetensors          model bundle: each prompt's text conditioning
    subject/schedule.json                      per sample: photo, t, crop box, noise seed
    subject/photos/NNN.png                     the normalised photos
    subject/text_conditioning.safetensors      the prompt's conditioning, batch 1; with per-photo captions
                                               (subject_stage.text_rows "per_photo") one row per photo, in order
    subject/cache/                             residual cache (runtime/cache.py); x0 only in x0-only mode, absent in
                                               cache-free mode
    programs/<runtime>/...                     device programs, listed in the manifest's `programs`

Cache modes (subject bundles, manifest `subject_stage.cache_mode`): "stored" (the residual cache holds one entry per
scheduled sample), "x0-only" (the cache holds each sample's clean latents x0 alone, a few percent of a stored entry;
each training step computes its sample's residuals from them with the skipped blocks' forward programs first) or
"cache-free" (nothing stored: each step also encodes its crop first; runtime/inputs.py).

The manifest verifies itself: its first line is `{"manifest_sha256": "<hex>",` and <hex> is the SHA-256 of every
byte after that line, so a change to any field (a learning rate, a rank) is refused like a changed file.

Writing is all-or-nothing: files go to a temporary sibling directory, the manifest is written last, and the
directory is renamed into place; on any error the temporary directory is removed, so a failed compile leaves no
half-written bundle. Reading checks the manifest's digest and every listed file's size and hash before anything
is used.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .errors import BundleError, UserError
from .schedule import Schedule

MANIFEST = "manifest.json"
BUNDLE_FORMAT = "ditskip-edge-bundle"
BUNDLE_FORMAT_VERSION = 3          # 3: bundle_kind (model | subject), cache modes, schedule algorithm 2;
                                   # 2: self-verifying manifest, one `programs` list for every runtime
MODEL_WEIGHTS = "model/kept_weights.safetensors"
PROMPTS_DIR = "model/text"
MODEL_BUNDLE, SUBJECT_BUNDLE = "model", "subject"
STORED, X0_ONLY, CACHE_FREE = "stored", "x0-only", "cache-free"
CACHE_MODES = (STORED, X0_ONLY, CACHE_FREE)
SHARED_TEXT, PER_PHOTO_TEXT = "shared", "per_photo"     # subject_stage.text_rows: one prompt, or per-photo captions
TEXT_ROWS = (SHARED_TEXT, PER_PHOTO_TEXT)
SCHEDULE_FILE = "subject/schedule.json"
TEXT_FILE = "subject/text_conditioning.safetensors"
CACHE_DIR = "subject/cache"
PHOTOS_DIR = "subject/photos"
PROGRAMS_DIR = "programs"
DIGEST_KEY = "manifest_sha256"
_DIGEST_LINE = re.compile(rb'\A\{"manifest_sha256": "([0-9a-f]{64})",\n')


def sha256_file(path: Path, chunk_bytes: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk_bytes):
            h.update(block)
    return h.hexdigest()


LR_SCHEDULES = ("constant", "linear")      # the learning rate over the schedule's optimizer steps (lr_at)


@dataclass(frozen=True)
class OptimizerSpec:
    """AdamW, as torch.optim.AdamW computes it (the reference for every runtime's own implementation), at a learning
    rate that is `lr` at every step ("constant") or falls linearly from `lr` towards 0 over the bundle's optimizer
    steps ("linear": lr x (1 - step / steps), so the LoRA a run ends with is not the last of several large steps)."""
    lr: float = 1e-4
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 1e-4
    lr_schedule: str = "constant"

    def __post_init__(self):
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule {self.lr_schedule!r}: expected one of {', '.join(LR_SCHEDULES)}")

    def lr_at(self, step: int, steps: int) -> float:
        """The learning rate of optimizer step `step` (0-based) of `steps`: what the loop sets before each update, so
        a resumed run takes the rates an uninterrupted one would."""
        return self.lr if self.lr_schedule == "constant" else self.lr * (1.0 - step / steps)

    def to_json(self) -> dict:
        return {**asdict(self), "betas": list(self.betas)}

    @staticmethod
    def from_json(d: dict) -> "OptimizerSpec":
        return OptimizerSpec(lr=float(d["lr"]), betas=(float(d["betas"][0]), float(d["betas"][1])),
                             eps=float(d["eps"]), weight_decay=float(d["weight_decay"]),
                             lr_schedule=str(d.get("lr_schedule", "constant")))   # absent: bundles before v8


# ---------------------------------------------------------------------------------------------- the manifest file

def manifest_bytes(manifest: dict[str, Any]) -> bytes:
    """The manifest as written: a first line carrying the SHA-256 of all the bytes after it."""
    body = json.dumps({k: v for k, v in manifest.items() if k != DIGEST_KEY}, indent=1).encode()
    rest = body[2:]                                   # after "{\n"
    return b'{"%s": "%s",\n' % (DIGEST_KEY.encode(), hashlib.sha256(rest).hexdigest().encode()) + rest


def write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    Path(path).write_bytes(manifest_bytes(manifest))


def parse_manifest(raw: bytes, where: Path) -> tuple[dict[str, Any], str]:
    """Check the digest line, then parse. Any edit after the first line, or to the digest itself, is refused.
    Returns the manifest (without its digest) and the digest."""
    m = _DIGEST_LINE.match(raw)
    if m is None:
        raise BundleError(f"{where}: first line is not {{\"{DIGEST_KEY}\": \"<64 hex digits>\", (not a bundle "
                          f"manifest of format version {BUNDLE_FORMAT_VERSION}, or edited)")
    if hashlib.sha256(raw[m.end():]).hexdigest() != m.group(1).decode():
        raise BundleError(f"{where}: contents do not match {DIGEST_KEY} (the manifest was edited or is corrupt)")
    try:
        manifest = json.loads(raw)
    except ValueError as e:
        raise BundleError(f"{where}: not valid JSON ({e})") from e
    return manifest, manifest.pop(DIGEST_KEY)


def read_manifest(bundle_dir: str | Path, verify: bool = True) -> dict[str, Any]:
    return _read_manifest(bundle_dir, verify)[0]


def _read_manifest(bundle_dir: str | Path, verify: bool) -> tuple[dict[str, Any], str]:
    bundle_dir = Path(bundle_dir)
    mpath = bundle_dir / MANIFEST
    if not bundle_dir.is_dir():
        raise BundleError(f"bundle {bundle_dir} is not a folder")
    if not mpath.is_file():
        raise BundleError(f"{bundle_dir}: not a bundle (no {MANIFEST})")
    manifest, digest = parse_manifest(mpath.read_bytes(), mpath)
    if manifest.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"{mpath}: format is {manifest.get('format')!r}, expected {BUNDLE_FORMAT!r}")
    if manifest.get("format_version") != BUNDLE_FORMAT_VERSION:
        raise BundleError(f"{mpath}: format_version {manifest.get('format_version')} is not supported "
                          f"(this tool reads {BUNDLE_FORMAT_VERSION})")
    if verify:
        verify_files(bundle_dir, manifest)
    return manifest, digest


def verify_files(bundle_dir: Path, manifest: dict[str, Any], only: list[str] | None = None) -> None:
    for rel, info in manifest.get("files", {}).items():
        if only is not None and rel not in only:
            continue
        p = Path(bundle_dir) / rel
        if not p.is_file():
            raise BundleError(f"{p}: listed in the manifest but missing")
        if p.stat().st_size != info["bytes"]:
            raise BundleError(f"{p}: {p.stat().st_size} bytes, manifest says {info['bytes']}")
        if sha256_file(p) != info["sha256"]:
            raise BundleError(f"{p}: SHA-256 does not match the manifest (file changed or corrupt)")


class BundleWriter:
    """with BundleWriter(out_dir) as w: write files under w.root ...; w.manifest.update(...)  -> committed on exit.

    `work_dir`: a fixed working folder instead of a fresh temporary one (the device's subject stage: an interrupted
    run leaves it, and the next run continues its residual cache). It is kept when the run is interrupted
    (KeyboardInterrupt, or the process killed) and removed on any other error."""

    def __init__(self, out_dir: str | Path, overwrite: bool = False, work_dir: str | Path | None = None):
        self.out_dir = Path(out_dir)
        if self.out_dir.exists() and not overwrite:
            raise UserError(f"{self.out_dir} already exists: choose another --out or pass --force")
        if self.out_dir.exists() and not self.out_dir.is_dir():
            raise UserError(f"{self.out_dir} exists and is not a folder")
        self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        self.work_dir = Path(work_dir) if work_dir is not None else None
        self.root: Path | None = None
        self.manifest: dict[str, Any] = {"format": BUNDLE_FORMAT, "format_version": BUNDLE_FORMAT_VERSION}
        self._known: dict[str, dict] = {}

    @classmethod
    def attach(cls, root: Path, manifest: dict[str, Any]) -> "BundleWriter":
        """A writer onto another writer's staging folder (a second process's program stages: compiler/
        stage_worker.py); it commits nothing, the owner of the folder does."""
        w = cls.__new__(cls)
        w.out_dir, w.work_dir, w.root, w.manifest, w._known = None, None, Path(root), manifest, {}
        return w

    def __enter__(self) -> "BundleWriter":
        if self.work_dir is not None:
            self.work_dir.mkdir(parents=True, exist_ok=True)
            self.root = self.work_dir
        else:
            self.root = Path(tempfile.mkdtemp(prefix=f".{self.out_dir.name}.tmp-", dir=self.out_dir.parent))
        return self

    def path(self, rel: str) -> Path:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def link(self, src: Path, rel: str, info: dict | None = None) -> Path:
        """Put file `src` at `rel` as a hard link (a copy where linking fails: another file system). `info`
        ({sha256, bytes}, e.g. from the verified manifest it came from) spares hashing it again on commit."""
        dst = self.path(rel)
        if dst.exists():
            dst.unlink()
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)
        if info is not None:
            self._known[rel] = {"sha256": info["sha256"], "bytes": int(info["bytes"])}
        return dst

    def view(self) -> "Bundle":
        """The bundle as written so far (files unverified: their hashes are only taken on commit)."""
        return Bundle(self.root, dict(self.manifest))

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            if self.work_dir is None or not issubclass(exc_type, KeyboardInterrupt):
                shutil.rmtree(self.root, ignore_errors=True)
            return
        try:
            files = {}
            for p in sorted(self.root.rglob("*")):
                if p.is_file():
                    rel = p.relative_to(self.root).as_posix()
                    known = self._known.get(rel)
                    if known is not None and p.stat().st_size == known["bytes"]:
                        files[rel] = dict(known)
                    else:
                        files[rel] = {"sha256": sha256_file(p), "bytes": p.stat().st_size}
            self.manifest["files"] = files
            write_manifest(self.root / MANIFEST, self.manifest)
            if self.out_dir.exists():
                shutil.rmtree(self.out_dir)
            os.replace(self.root, self.out_dir)
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise


def cache_identity(model: dict, plan: dict, schedule: Schedule) -> dict:
    """What a residual cache is computed for: the manifest's model and plan fields and the schedule
    (runtime/cache.py refuses a cache made for another)."""
    return {"model": model["name"], "transformer_config": model["transformer_config"],
            "plan": [plan["num_blocks"], plan["n_front"], plan["n_back"]], "schedule": schedule.to_json()}


# ------------------------------------------------------------------------------------------- an opened bundle

class Bundle:
    """A bundle as a runtime reads it: the verified manifest and typed access to what it names. numpy only."""

    def __init__(self, root: Path, manifest: dict[str, Any], manifest_sha256: str = ""):
        self.root = Path(root)
        self.manifest = manifest
        self.manifest_sha256 = manifest_sha256          # "" for a bundle still being written
        self._schedule: Schedule | None = None

    @staticmethod
    def open(bundle_dir: str | Path, verify: bool = True) -> "Bundle":
        root = Path(bundle_dir)
        return Bundle(root, *_read_manifest(root, verify))

    def field(self, *path: str):
        """manifest[path[0]][path[1]]..., or a BundleError naming the missing field."""
        node: Any = self.manifest
        for i, key in enumerate(path):
            if not isinstance(node, dict) or key not in node:
                if i == 0 and key == "subject_stage" and self.kind == MODEL_BUNDLE:
                    raise BundleError(f"{self.root}: a model bundle (no photos, no schedule, no cache): run the "
                                      f"subject stage first: python -m ditskip_edge.runtime personalize {self.root} "
                                      f"--photos DIR --out SUBJECT_BUNDLE")
                raise BundleError(f"{self.root / MANIFEST}: missing field {'.'.join(path[:i + 1])}")
            node = node[key]
        return node

    @property
    def kind(self) -> str:
        """"subject" (photos, schedule, residuals or their programs: what a runtime trains) or "model"."""
        kind = self.manifest.get("bundle_kind", SUBJECT_BUNDLE)
        if kind not in (MODEL_BUNDLE, SUBJECT_BUNDLE):
            raise BundleError(f"{self.root / MANIFEST}: bundle_kind {kind!r}, expected {MODEL_BUNDLE!r} or "
                              f"{SUBJECT_BUNDLE!r}")
        return kind

    @property
    def cache_mode(self) -> str:
        """"stored" (a residual cache), "x0-only" (a cache of x0: residuals computed each step) or "cache-free"
        (x0 and residuals computed each step)."""
        mode = self.field("subject_stage").get("cache_mode", STORED)
        if mode not in CACHE_MODES:
            raise BundleError(f"{self.root / MANIFEST}: subject_stage.cache_mode {mode!r}, expected one of "
                              f"{', '.join(CACHE_MODES)}")
        return mode

    @property
    def codec_spec(self) -> str:
        section = "model_bundle" if self.kind == MODEL_BUNDLE else "subject_stage"
        return self.field(section, "cache_codec")

    @property
    def entry_shapes(self) -> dict[str, tuple[int, ...]]:
        section = "model_bundle" if self.kind == MODEL_BUNDLE else "subject_stage"
        return {k: tuple(int(x) for x in v) for k, v in self.field(section, "entry_shapes").items()}

    def prompts(self) -> list[str]:
        """A model bundle's prompts, in order."""
        return [p["prompt"] for p in self.field("model_bundle", "prompts")]

    def prompt_conditioning(self, index: int = 0) -> dict:
        """A model bundle's text conditioning of prompt `index` ({key: float32 array})."""
        from safetensors.numpy import load_file
        return load_file(str(self.root / self.field("model_bundle", "prompts")[index]["text_conditioning"]))

    def file_sha256(self, rel: str) -> str:
        files = self.field("files")
        if rel not in files:
            raise BundleError(f"{self.root / MANIFEST}: {rel} is not listed in files")
        return files[rel]["sha256"]

    @property
    def schedule(self) -> Schedule:
        if self._schedule is None:
            self._schedule = Schedule.load(self.root / self.field("subject_stage", "schedule"))
        return self._schedule

    @property
    def optimizer(self) -> OptimizerSpec:
        try:
            return OptimizerSpec.from_json(self.field("optimizer"))
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise BundleError(f"{self.root / MANIFEST}: malformed field optimizer ({e})") from e

    @property
    def programs(self) -> list[dict]:
        programs = self.manifest.get("programs", [])
        if not isinstance(programs, list):
            raise BundleError(f"{self.root / MANIFEST}: field programs must be a list")
        return programs

    @property
    def cache_identity(self) -> dict:
        return cache_identity(self.field("model"), self.field("plan"), self.schedule)

    @property
    def text_rows(self) -> str:
        """"shared" (one prompt's conditioning for every photo) or "per_photo" (per-photo captions: row i of each
        stored tensor is photo i's; manifest subject_stage.text_rows, absent = shared)."""
        rows = self.field("subject_stage").get("text_rows", SHARED_TEXT)
        if rows not in TEXT_ROWS:
            raise BundleError(f"{self.root / MANIFEST}: subject_stage.text_rows {rows!r}, expected one of "
                              f"{', '.join(TEXT_ROWS)}")
        return rows

    def text_conditioning(self, photo: int | None = None) -> dict:
        """{key: float32 array}: as the compiler stored it (photo None), or the conditioning photo `photo`'s samples
        train with, batch 1: the prompt's, or with per-photo captions row `photo` of each tensor (read alone). Every
        tensor must have the rows text_rows says (one per photo, or one), checked from the header before reading."""
        from safetensors import safe_open
        path = self.root / self.field("subject_stage", "text_conditioning")
        per_photo = self.text_rows == PER_PHOTO_TEXT
        want = len(self.field("subject_stage", "photos")) if per_photo else 1
        if per_photo and photo is not None and not 0 <= photo < want:
            raise BundleError(f"{self.root}: no photo {photo} (the bundle holds {want})")
        out = {}
        with safe_open(str(path), "np") as f:
            for key in f.keys():
                rows = f.get_slice(key)
                shape = list(rows.get_shape())
                if not shape or shape[0] != want:
                    raise BundleError(f"{self.root}: text conditioning {key} has shape {shape}, expected {want} "
                                      f"row(s) ({self.text_rows})")
                out[key] = rows[photo:photo + 1] if photo is not None and per_photo else f.get_tensor(key)
        return out

    def cache(self):
        from .cache import CacheReader
        if self.cache_mode == CACHE_FREE:
            raise BundleError(f"{self.root}: a cache-free bundle (no stored residuals): its residuals are computed "
                              f"each step by the skipped blocks' programs (runtime/inputs.py)")
        # an x0-only cache holds {"x0"} alone: its index's shapes say so, and readers take the residuals elsewhere
        return CacheReader(self.root / self.field("subject_stage", "cache"), self.cache_identity,
                           expected_entries=self.schedule.num_samples)
