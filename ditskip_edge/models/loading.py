"""Building and loading models: random-weight tiny models, meta-device real sizes, local diffusers folders.

`resolve_spec(name_or_path)` turns a CLI model argument into a ModelSpec: a built-in name, a local diffusers
pipeline folder, or a `.safetensors` file of `flux-testbed` weights (`testbed_weights_spec`: weights that
testbed/pretrain_testbed.py wrote, grown ones included, used without replacing the committed asset).
`build_transformer(spec, device)` returns the diffusers transformer with weights:
  - builtin tiny: random from spec.seed (zero-initialised modulation / output layers get small random values so
    that every block matters, as in a trained model);
  - device="meta": structure only (real sizes, planning);
  - local folder: `from_pretrained(folder/transformer)`.
  - builtin pretrained (`flux-testbed`): built from its config, then its committed weights
    (ditskip_edge/assets/<spec.weights>, safetensors) loaded strictly;
`build_vae(spec)` likewise for the autoencoder (a pixel-space spec gets the weightless PixelAutoencoder).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn as nn

from ..runtime.errors import UserError
from .specs import FLUX_ARCH, SANA_ARCH, ModelSpec, TextSpec, builtin_spec

ASSETS = Path(__file__).resolve().parent.parent / "assets"
_PIPELINE_ARCH = {"FluxPipeline": FLUX_ARCH, "SanaPipeline": SANA_ARCH}
TINY_TEXT_FILE = "ditskip_text.json"   # a saved tiny model's settings: "text" (its text encoder is the built-in hash
                                       # encoder) and / or "data_px" / "train_px" (resolutions for a toy-size model)
TESTBED = "flux-testbed"               # the built-in model a weights file stands in for (testbed_weights_spec)
FLUX_STACKS = {"num_layers": "transformer_blocks", "num_single_layers": "single_transformer_blocks"}  # count: prefix


def transformer_class(arch: str):
    from diffusers import FluxTransformer2DModel, SanaTransformer2DModel
    return {FLUX_ARCH: FluxTransformer2DModel, SANA_ARCH: SanaTransformer2DModel}[arch]


def vae_class(arch: str):
    from diffusers import AutoencoderDC, AutoencoderKL
    return {FLUX_ARCH: AutoencoderKL, SANA_ARCH: AutoencoderDC}[arch]


def flux_block_counts(keys) -> dict[str, int]:
    """{"num_layers": double blocks, "num_single_layers": single blocks} of a FLUX transformer's state-dict keys."""
    return {count: len({key.split(".")[1] for key in keys if key.startswith(prefix + ".")})
            for count, prefix in FLUX_STACKS.items()}


def testbed_weights_spec(path: Path) -> ModelSpec:
    """`flux-testbed` with the weights of `path` (a FLUX transformer's safetensors, as pretrain_testbed.py --out
    writes them) and the block counts they hold: other pretrained or grown weights compile, train and draw like
    the committed ones. Named "flux-testbed@<path>"; its weights are checked strictly when the model is built."""
    if path.suffix != ".safetensors":
        raise UserError(f"{path}: a model is a built-in name, a diffusers pipeline folder or a .safetensors file of "
                        f"{TESTBED} weights")
    from safetensors import safe_open
    try:
        with safe_open(str(path), framework="pt") as f:
            keys = list(f.keys())
    except Exception as e:                     # truncated, not safetensors
        raise UserError(f"{path}: not a readable safetensors file ({e})") from e
    counts = flux_block_counts(keys)
    if not any(counts.values()):
        raise UserError(f"{path}: holds no FLUX transformer blocks (expected {TESTBED} weights, e.g. "
                        f"testbed/pretrain_testbed.py --out)")
    base = builtin_spec(TESTBED)
    return replace(base, name=f"{TESTBED}@{path}", transformer_config={**base.transformer_config, **counts},
                   weights=str(path.resolve()))


def resolve_spec(name_or_path: str) -> ModelSpec:
    p = Path(name_or_path)
    if not p.exists():
        if p.suffix == ".safetensors":
            raise UserError(f"{p}: no such weights file")
        return builtin_spec(name_or_path)
    if p.is_file():
        return testbed_weights_spec(p)
    index = p / "model_index.json"
    if not index.is_file():
        raise UserError(f"{p}: not a diffusers pipeline folder (no model_index.json)")
    try:
        cls_name = json.loads(index.read_text())["_class_name"]
    except (ValueError, KeyError) as e:
        raise UserError(f"{index}: unreadable ({e}); expected a diffusers model_index.json with _class_name") from e
    if cls_name not in _PIPELINE_ARCH:
        raise UserError(f"{index}: _class_name {cls_name!r} is not supported; expected one of {list(_PIPELINE_ARCH)}")
    arch = _PIPELINE_ARCH[cls_name]
    tcfg_path, vcfg_path = p / "transformer" / "config.json", p / "vae" / "config.json"
    for f in (tcfg_path, vcfg_path):
        if not f.is_file():
            raise UserError(f"{f}: missing; a pipeline folder needs transformer/ and vae/ subfolders")
    tcfg = {k: v for k, v in json.loads(tcfg_path.read_text()).items() if not k.startswith("_")}
    vcfg = {k: v for k, v in json.loads(vcfg_path.read_text()).items() if not k.startswith("_")}
    if arch == FLUX_ARCH:
        vae_scale = 2 ** (len(vcfg.get("block_out_channels", [0] * 4)) - 1)
        data_px, train_px = 512, 256
    else:
        vae_scale = 2 ** (len(vcfg.get("encoder_block_out_channels", [0] * 6)) - 1)
        data_px, train_px = 1024, 512
    tiny_text = p / TINY_TEXT_FILE
    extra = json.loads(tiny_text.read_text()) if tiny_text.is_file() else {}
    data_px, train_px = int(extra.get("data_px", data_px)), int(extra.get("train_px", train_px))
    if "text" in extra:
        text = TextSpec(**extra["text"])
    elif arch == FLUX_ARCH:
        text = TextSpec("pipeline", seq_len=512, dim=int(tcfg.get("joint_attention_dim", 4096)),
                        pooled_dim=int(tcfg.get("pooled_projection_dim", 768)))
    else:
        text = TextSpec("pipeline", seq_len=300, dim=int(tcfg.get("caption_channels", 2304)))
    guidance = 3.5 if (arch == FLUX_ARCH and tcfg.get("guidance_embeds")) else None
    return ModelSpec(name=p.name, arch=arch, transformer_config=tcfg, vae_config=vcfg, text=text,
                     vae_scale_factor=vae_scale, data_px=data_px, train_px=train_px, guidance=guidance,
                     source=str(p.resolve()))


def _randomize_zero_params(module: nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in module.parameters():
            if p.numel() and p.abs().sum() == 0:
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)


def build_transformer(spec: ModelSpec, device: str = "cpu") -> nn.Module:
    cls = transformer_class(spec.arch)
    if device == "meta":
        with torch.device("meta"):
            return cls.from_config(spec.transformer_config).eval()
    if spec.source != "builtin":
        return cls.from_pretrained(Path(spec.source) / "transformer", dtype=torch.float32).eval()
    if spec.vae_config is None:
        raise UserError(f"model '{spec.name}' has no weights here (real-size config): use it with `plan`, "
                        f"or pass a local diffusers folder")
    torch.manual_seed(spec.seed)
    model = cls.from_config(spec.transformer_config).eval()
    if spec.weights:
        load_builtin_weights(model, spec)
        return model
    _randomize_zero_params(model, spec.seed)
    return model


def builtin_weights_path(spec: ModelSpec) -> Path:
    """The file under ditskip_edge/assets/, or a weights file's absolute path (`testbed_weights_spec`)."""
    return ASSETS / spec.weights


def load_builtin_weights(model: nn.Module, spec: ModelSpec) -> None:
    from safetensors.torch import load_file
    path = builtin_weights_path(spec)
    if not path.is_file():
        raise UserError(f"{path}: the pretrained weights of '{spec.name}' are missing (made by "
                        f"testbed/pretrain_testbed.py)")
    try:
        result = model.load_state_dict(load_file(str(path)), strict=False)
    except RuntimeError as e:                  # a tensor of another shape (another width)
        raise UserError(f"{path}: does not match the '{spec.name}' config: "
                        f"{str(e).strip().splitlines()[-1].strip()}") from e
    if result.missing_keys or result.unexpected_keys:
        raise UserError(f"{path}: does not match the '{spec.name}' config: missing {result.missing_keys[:3]}, "
                        f"unexpected {result.unexpected_keys[:3]}")


def build_vae(spec: ModelSpec) -> nn.Module:
    if spec.vae_config is not None and spec.vae_config.get("kind") == "pixel":
        from .latents import PixelAutoencoder
        return PixelAutoencoder(spec.vae_config["factor"], spec.vae_config.get("in_channels", 3)).eval()
    cls = vae_class(spec.arch)
    if spec.source != "builtin":
        return cls.from_pretrained(Path(spec.source) / "vae", dtype=torch.float32).eval()
    if spec.vae_config is None:
        raise UserError(f"model '{spec.name}' has no autoencoder weights here")
    torch.manual_seed(spec.seed + 7)
    return cls.from_config(spec.vae_config).eval()


def save_pipeline_folder(spec: ModelSpec, transformer: nn.Module, vae: nn.Module, folder: Path) -> Path:
    """Save a model as a diffusers pipeline folder (transformer/, vae/, scheduler/ (diffusers' default
    FlowMatchEulerDiscreteScheduler), model_index.json). For tiny models the built-in hash text encoder is recorded in
    ditskip_text.json, as no real encoder ships with them."""
    from diffusers import FlowMatchEulerDiscreteScheduler
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    transformer.save_pretrained(folder / "transformer")
    vae.save_pretrained(folder / "vae")
    FlowMatchEulerDiscreteScheduler().save_pretrained(folder / "scheduler")
    cls_name = {FLUX_ARCH: "FluxPipeline", SANA_ARCH: "SanaPipeline"}[spec.arch]
    (folder / "model_index.json").write_text(json.dumps({"_class_name": cls_name, "_diffusers_version": "0.42.1"}))
    if spec.text.kind == "hash":
        (folder / TINY_TEXT_FILE).write_text(json.dumps(
            {"text": vars(spec.text), "data_px": spec.data_px, "train_px": spec.train_px}))
    return folder
