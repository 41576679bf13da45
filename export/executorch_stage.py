"""Compiler stage: put the ExecuTorch programs into a bundle being written (compile.RUNTIME_STAGES["executorch"]).

Writes under `programs/executorch/`:
  train_step_<q>.pte     joint forward-backward training step, frozen weights q = fp32 | int8 | int4
  preprocess_<H>x<W>.pte photo + crop box -> x0, one per distinct photo size
and adds to the manifest: `programs` (one export/contract.ProgramEntry each, with its memory report and op
placement) and `lora_file` (the diffusers LoRA file's keys and safetensors metadata, as save_lora_weights writes
them, so a runtime-only trainer writes the identical format).
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path

import torch

from ditskip_edge.bundle import MANIFEST
from ditskip_edge.bundle_model import OpenBundle, open_bundle
from ditskip_edge.quantize import QuantSpec

from .contract import METHOD, ProgramEntry

log = logging.getLogger(__name__)
PROGRAM_DIR = "programs/executorch"
QUANT_TAG = {16: "fp32", 8: "int8", 4: "int4"}


def open_in_progress(writer) -> OpenBundle:
    """open_bundle on the writer's temporary folder (its manifest is only written on commit: write it for the read,
    then remove it so the commit's file list stays right)."""
    path = writer.root / MANIFEST
    path.write_text(json.dumps(writer.manifest))
    try:
        return open_bundle(writer.root, verify=False)
    finally:
        path.unlink()


def lora_file_format(b: OpenBundle, transformer) -> dict:
    """Keys and metadata of the file ditskip_edge.lora.save_lora writes for this bundle's LoRA."""
    from safetensors import safe_open

    from ditskip_edge.lora import lora_state_dict, save_lora
    with tempfile.TemporaryDirectory() as d:
        path = save_lora(b.spec.arch, lora_state_dict(transformer), Path(d), b.lora, b.kept_block_names)
        with safe_open(str(path), "np") as f:
            return {"name": path.name, "keys": sorted(f.keys()), "metadata": f.metadata()}


def train_step_entry(b: OpenBundle, bits: int, backend: str, out_path: Path, rel: str, group_size: int = 32):
    from .executorch_program import ExportConfig, build_step, export_training_program
    quant = QuantSpec(bits=bits, group_size=group_size)
    step = build_step(b, quant)
    prog = export_training_program(step, ExportConfig(quant=quant, backend=backend))
    out_path.write_bytes(prog.buffer)
    shapes = {n: list(p.shape) for n, p in step.module.named_parameters() if p.requires_grad}
    entry = ProgramEntry(name="train_step", runtime="executorch", path=rel, method=METHOD, inputs=prog.inputs,
                         outputs=[{"name": "loss", "shape": [], "dtype": "float32"}], trainable=prog.lora_keys,
                         quant_bits=bits, backend=backend, memory=prog.memory, ops=prog.ops).to_json()
    entry["trainable_shapes"] = shapes
    entry["graph_passes"] = prog.passes
    return entry, step


def preprocess_entries(writer, b: OpenBundle, backend: str) -> list[dict]:
    from ditskip_edge.models.latents import LatentEncoder
    from ditskip_edge.models.loading import build_vae
    from ditskip_edge.patch_sampling import PatchSampler
    from PIL import Image

    from .executorch_preprocess import export_preprocess
    sampler = PatchSampler(b.schedule.config.s_min_px)
    encoder = LatentEncoder(b.spec.arch, build_vae(b.spec))
    shapes = []
    for rel in writer.manifest["subject_stage"]["photos"]:
        with Image.open(writer.root / rel) as im:
            shapes.append((im.size[1], im.size[0]))
    entries = []
    for h, w in sorted(set(shapes)):
        et, memory = export_preprocess(sampler, encoder, (h, w), backend)
        x0_shape = list(encoder(sampler(torch.zeros(1, 3, h, w), torch.tensor([0.0, 0.0, float(min(h, w))]))).shape)
        rel = f"{PROGRAM_DIR}/preprocess_{h}x{w}.pte"
        writer.path(rel).write_bytes(et.buffer)
        entries.append(ProgramEntry(
            name="preprocess", runtime="executorch", path=rel, method=METHOD,
            inputs=[{"name": "photo", "shape": [1, 3, h, w], "dtype": "float32"},
                    {"name": "crop_box", "shape": [3], "dtype": "float32"}],
            outputs=[{"name": "x0", "shape": x0_shape, "dtype": "float32"}], trainable={}, backend=backend,
            memory=memory).to_json())
    return entries


def add_to_bundle(writer, options: dict | None = None) -> dict:
    """options: quant_bits (list, default [8]), backend ("portable" | "xnnpack"), preprocess (bool, default True)."""
    options = dict(options or {})
    bits_list = [int(x) for x in options.get("quant_bits", [8])]
    backend = options.get("backend", "portable")
    b = open_in_progress(writer)
    programs = [p for p in writer.manifest.get("programs", []) if p.get("runtime") != "executorch"]
    step = None
    for bits in bits_list:
        rel = f"{PROGRAM_DIR}/train_step_{QUANT_TAG[bits]}.pte"
        log.info("exporting %s (%s)", rel, backend)
        entry, step = train_step_entry(b, bits, backend, writer.path(rel), rel)
        programs.append(entry)
    if options.get("preprocess", True):
        programs += preprocess_entries(writer, b, backend)
    writer.manifest["programs"] = programs
    if step is not None:
        writer.manifest["lora_file"] = lora_file_format(b, step.transformer)
    return {"executorch_programs": [p["path"] for p in programs if p["runtime"] == "executorch"]}
