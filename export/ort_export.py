"""A bundle's model-level and subject-level artifacts -> the ONNX Runtime programs under `programs/ort/`.

    open bundle -> SkipModel over the kept blocks with LoRA (as bundle_model.build_skip_model builds it)
      -> frozen linears and convolutions quantized (int8 codes or packed int4 + fp32 scales: QuantLinear,
         QuantConv2d; quantize.py)
      -> TrainingStep(skip model, cache decoder) as OrtStep -> ONNX (export/ort_graph.py)
      -> training / eval / optimizer models + checkpoint (export/ort_artifacts.py)
    PatchSampler(s_min) -> patch_sampler.onnx (inference model: photo [1, 3, H, W], crop_box [3] -> patch)
    the diffusers LoRA file format (keys + safetensors metadata), so the runtime writes it without diffusers

`program_json` is what the manifest records under `programs.ort`; the runtime trainer (export/ort_trainer.py)
reads only that, the artifacts and the bundle's subject files.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import onnx
import torch
import torch.nn as nn

from ditskip_edge.bundle_model import OpenBundle, build_skip_model
from ditskip_edge.lora import save_lora
from ditskip_edge.patch_sampling import PatchSampler
from ditskip_edge.quantize import QuantConv2d, QuantLinear, QuantSpec, quantize_frozen_layers
from ditskip_edge.sample_inputs import sample_noise
from ditskip_edge.training_step import IdentityDecoder, TrainingStep

from .ort_artifacts import ADAMW_VARIANT, ARTIFACT_FILES, generate_training_artifacts
from .ort_graph import (OPSET, RECOMPUTE_SESSION_CONFIG, OrtStep, StepSignature, export_step_onnx,
                        integer_initializers, recompute_frozen_in_gradient, rematerialize_blocks_onnx, step_inputs)

PROGRAM_DIR = "programs/ort"
PATCH_SAMPLER = "patch_sampler.onnx"
LORA_FORMAT = "lora_format.json"


@dataclass(frozen=True)
class OrtExportConfig:
    quant: QuantSpec = field(default_factory=lambda: QuantSpec(bits=8))
    opset: int = OPSET
    # issue 14: the gradient graph reads recomputed dequantized weights (ort_graph.recompute_frozen_in_gradient);
    # effective only in a session created with the program's `session_config` (ORT's CSE merges the copies back)
    recompute_frozen: bool = True
    remat: str = "none"             # "none" | "blocks" | "every:K": ort_graph.rematerialize_blocks_onnx (see there:
                                    # ORT's execution order hoists most copies, so it does not lower the peak)


def cache_decoder_and_entry(b: OpenBundle, index: int) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """The in-graph decoder for the bundle's cache codec and sample `index`'s entry as stored (encoded), so the
    exported graph contains the decode. A reader with `read_encoded` (the codec cache) brings its decoder module
    (`reader.decoder()`, i.e. residual_cache.decoder_for(codec, shapes)); the plain fp32 cache stores the residuals
    themselves (IdentityDecoder)."""
    reader = b.cache
    if hasattr(reader, "read_encoded"):
        decoder = reader.decoder() if hasattr(reader, "decoder") else _decoder_for(reader)
        return decoder, dict(reader.read_encoded(index))
    return IdentityDecoder(), reader.read(index)


def _decoder_for(reader) -> nn.Module:
    from ditskip_edge.residual_cache import decoder_for
    return decoder_for(reader.index["codec"], reader.index["shapes"])


def example_step(b: OpenBundle, model, decoder: nn.Module, entry: dict, sample_index: int = 0):
    sample = b.schedule.samples[sample_index]
    x0 = entry["x0"]
    noise = sample_noise(sample, tuple(x0.shape))
    t = torch.tensor([sample.t], dtype=torch.float32)
    signature = StepSignature.of(b.cond, entry)
    step = OrtStep(TrainingStep(model, decoder), signature)
    return step, step_inputs(signature, x0, noise, t, b.cond, entry)


def lora_file_format(b: OpenBundle, transformer: nn.Module, trainable: list[str]) -> dict:
    """Keys and safetensors metadata of the LoRA file the eager trainer writes (diffusers save_lora_weights),
    taken from a dry run of that writer, with each trainable ONNX parameter's file key."""
    from safetensors import safe_open
    from ditskip_edge.lora import lora_state_dict
    with tempfile.TemporaryDirectory() as tmp:
        path = save_lora(b.spec.arch, lora_state_dict(transformer), Path(tmp), b.lora, b.kept_block_names)
        with safe_open(str(path), "np") as f:
            metadata, file_keys = dict(f.metadata() or {}), set(f.keys())
    keys = {}
    for name in trainable:
        key = "transformer." + name.replace(".default.", ".")
        if key not in file_keys:
            raise ValueError(f"LoRA parameter {name}: expected key {key} in the diffusers LoRA file")
        keys[name] = key
    if set(keys.values()) != file_keys:
        raise ValueError(f"diffusers LoRA file has keys no ONNX parameter maps to: {sorted(file_keys - set(keys.values()))[:3]}")
    return {"file": path.name, "metadata": metadata, "keys": keys}


def export_patch_sampler(out_px: int, path: Path, example_hw: tuple[int, int], opset: int = OPSET) -> None:
    sampler = PatchSampler(out_px).eval()
    image = torch.rand(1, 3, *example_hw)
    box = torch.tensor([0.0, 0.0, float(min(example_hw))])
    torch.onnx.export(sampler, (image, box), str(path), input_names=["image", "crop_box"], output_names=["patch"],
                      dynamic_axes={"image": {2: "height_px", 3: "width_px"}}, dynamo=False, opset_version=opset)


def export_ort_programs(b: OpenBundle, out_dir: Path, cfg: OrtExportConfig = OrtExportConfig()) -> dict:
    """Write the ORT programs for bundle `b` into out_dir (= BUNDLE/programs/ort); return the manifest section
    with paths relative to out_dir."""
    import onnxruntime
    onnxruntime.set_default_logger_severity(3)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model, transformer, trainable = build_skip_model(b)
    n_quant = quantize_frozen_layers(model.view, cfg.quant)
    n_conv = sum(isinstance(m, QuantConv2d) for m in model.view.modules())
    n_lin = sum(isinstance(m, QuantLinear) for m in model.view.modules())
    decoder, entry = cache_decoder_and_entry(b, 0)
    step, inputs = example_step(b, model, decoder, entry)
    with tempfile.TemporaryDirectory() as tmp:
        graph = export_step_onnx(step, inputs, Path(tmp) / "training_step.onnx", transformer, cfg.opset)
        int_inits = integer_initializers(graph)
        o = b.optimizer
        generate_training_artifacts(graph, trainable, out_dir, o.betas, o.eps, o.weight_decay)
        frozen = {i.name for i in graph.graph.initializer} - set(trainable)
        memory_passes = rewrite_training_model(out_dir / ARTIFACT_FILES[0], frozen, cfg)
    lora_format = lora_file_format(b, transformer, trainable)
    (out_dir / LORA_FORMAT).write_text(json.dumps(lora_format, indent=1))
    photo_hw = tuple(int(v) for v in _photo_hw(b))
    export_patch_sampler(b.schedule.config.s_min_px, out_dir / PATCH_SAMPLER, photo_hw, cfg.opset)
    return {
        "runtime": "onnxruntime-training",
        "runtime_version": onnxruntime.__version__,
        "opset": cfg.opset,
        "artifacts": {f.removesuffix(".onnx"): f for f in ARTIFACT_FILES},
        "inputs": step.signature.to_json(),
        "input_dtypes": {n: str(v.dtype).removeprefix("torch.") for n, v in zip(step.signature.input_names, inputs)},
        "loss": "in graph: output 0 'loss' = loss_weight * mse(v_pred, noise - x0); artifacts built with loss=None",
        "trainable": trainable,
        "trainable_params": sum(p.numel() for n, p in transformer.named_parameters() if p.requires_grad),
        "quant": {"bits": cfg.quant.bits, "group_size": cfg.quant.group_size if cfg.quant.bits == 4 else None,
                  "quantized_layers": n_quant, "quantized_linears": n_lin, "quantized_convs": n_conv,
                  "integer_initializers": len(int_inits),
                  "integer_types": sorted({onnx.TensorProto.DataType.Name(t).lower() for t in int_inits.values()})},
        "memory_passes": memory_passes,
        # create the training session with these (onnxruntime.SessionOptions.add_session_config_entry), and with
        # SessionOptions.enable_cpu_mem_arena = False: ORT's CPU arena keeps its high-water mark (medium FLUX
        # layout: 57 -> 38 MiB step peak RssAnon without it; benchmarks/results/ort_memory.md)
        "session_config": dict(RECOMPUTE_SESSION_CONFIG) if memory_passes else {},
        "session_options": {"enable_cpu_mem_arena": False},
        "cache_codec": b.cache.index.get("codec", "fp32"),
        "cache_decoder": type(decoder).__name__,
        "optimizer": {"kind": "AdamW", "variant": ADAMW_VARIANT, "lr": o.lr, "betas": list(o.betas), "eps": o.eps,
                      "weight_decay": o.weight_decay,
                      "update": "ORT AdamWOptimizer adam_mode=1 (Hugging Face): bias correction on the step size, "
                                "weight decay after the update; not torch.optim.AdamW"},
        "lora_format": LORA_FORMAT,
        "patch_sampler": {"path": PATCH_SAMPLER, "inputs": ["image [1, 3, H, W] float32 in [-1, 1]",
                                                            "crop_box [3] float32 (x0_px, y0_px, side_px)"],
                          "output": f"patch [1, 3, {b.schedule.config.s_min_px}, {b.schedule.config.s_min_px}]"},
    }


def rewrite_training_model(path: Path, frozen: set[str], cfg: OrtExportConfig) -> dict:
    """Apply the memory passes of `cfg` to the training model generate_artifacts wrote at `path` (in place).
    Returns what each pass did ({} when none ran)."""
    from .remat import RematSpec
    spec = RematSpec.parse(cfg.remat)
    if not (cfg.recompute_frozen or spec.enabled):
        return {}
    model = onnx.load(str(path))
    done = {}
    if spec.enabled:
        done["remat"] = rematerialize_blocks_onnx(model, frozen, spec.every)
    if cfg.recompute_frozen:
        done["recompute_frozen"] = recompute_frozen_in_gradient(model, frozen)
    onnx.save(model, str(path))
    return done


def _photo_hw(b: OpenBundle) -> tuple[int, int]:
    from PIL import Image
    photos = b.manifest["subject_stage"]["photos"]
    with Image.open(b.root / photos[0]) as im:
        return im.height, im.width

