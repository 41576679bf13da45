"""Compiler stage: the ExecuTorch programs of a bundle being written.

    add_executorch_programs(writer, ExecutorchPrograms(precisions=("int8",), backend="portable", preprocess=True))

writes under `programs/executorch/`:
  train_step_<precision>.pte   joint forward-backward training step, frozen weights fp32 | int8 | int4, with block
                               rematerialization `remat` (ditskip_edge/remat.py; default every kept block)
  train_step_<precision>.ptd   its frozen weights (weights="mapped", the default): the runtime memory-maps this file,
                               clean file-backed pages a phone does not count; listed in the entry's `data`
  preprocess_<H>x<W>.pte       photo + crop box -> x0, one per distinct photo size
and adds one `runtime/contract.py` ProgramEntry per program to the manifest's `programs` list.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from ditskip_edge.bundle_model import OpenBundle, open_bundle
from ditskip_edge.quantize import QuantSpec
from ditskip_edge.remat import RematSpec
from ditskip_edge.runtime.bundle import PROGRAMS_DIR, BundleWriter
from ditskip_edge.runtime.contract import (PREPROCESS, TRAIN_STEP, WEIGHT_PLACEMENTS, ProgramEntry,
                                           check_precisions)
from ditskip_edge.runtime.errors import UserError

log = logging.getLogger(__name__)
PROGRAM_DIR = f"{PROGRAMS_DIR}/executorch"
BACKENDS = ("portable", "xnnpack")
WEIGHTS = WEIGHT_PLACEMENTS                     # frozen weights inside the .pte | in a .ptd beside it, mapped


@dataclass(frozen=True)
class ExecutorchPrograms:
    precisions: tuple[str, ...] = ("int8",)     # one train_step program per precision of the frozen weights
    backend: str = "portable"                   # "portable" | "xnnpack"
    preprocess: bool = True                     # also the photo -> x0 programs
    group_size: int = 32                        # int4: input features per scale
    remat: str = "blocks"                       # none | blocks | every:K (ditskip_edge/remat.py)
    weights: str = "mapped"                     # mapped: frozen weights in a .ptd data file | resident: in the .pte
    transposed_codes: bool = False              # ExportConfig.transposed_codes (compile --transposed-codes)
    integer_matmuls: str = "off"                # ExportConfig.integer_matmuls (compile --integer-matmuls)

    def validate(self) -> None:
        check_precisions(self.precisions)
        if self.backend not in BACKENDS:
            raise UserError(f"executorch backend {self.backend!r}: expected one of {', '.join(BACKENDS)}")
        RematSpec.parse(self.remat)
        if self.weights not in WEIGHTS:
            raise UserError(f"--weights {self.weights}: expected one of {', '.join(WEIGHTS)}")


def train_step_entry(b: OpenBundle, precision: str, config: ExecutorchPrograms, writer: BundleWriter) -> dict:
    from .executorch_program import ExportConfig, build_step, export_training_program
    rel = f"{PROGRAM_DIR}/{TRAIN_STEP}_{precision}.pte"
    remat = str(RematSpec.parse(config.remat))
    log.info("exporting %s (%s, remat %s, weights %s)", rel, config.backend, remat, config.weights)
    quant = QuantSpec(precision, group_size=config.group_size)
    step = build_step(b, quant)
    prog = export_training_program(step, ExportConfig(quant=quant, backend=config.backend, remat=remat,
                                                      external_weights=config.weights == "mapped",
                                                      transposed_codes=config.transposed_codes,
                                                      integer_matmuls=config.integer_matmuls))
    data = [f"{PROGRAM_DIR}/{name}" for name in prog.data_file_names(rel).values()]
    prog.write(writer.path(rel))
    shapes = {n: list(p.shape) for n, p in step.module.named_parameters() if p.requires_grad}
    return ProgramEntry(name=TRAIN_STEP, runtime="executorch", path=rel, inputs=prog.inputs,
                        outputs=[{"name": "loss", "shape": [], "dtype": "float32"}], trainable=prog.lora_keys,
                        trainable_shapes=shapes, precision=precision, backend=config.backend, data=data,
                        remat=remat, memory=prog.memory, ops=prog.ops, graph_passes=prog.passes).to_json()


def preprocess_entries(writer: BundleWriter, b: OpenBundle, backend: str) -> list[dict]:
    from PIL import Image

    from ditskip_edge.models.latents import LatentEncoder
    from ditskip_edge.models.loading import build_vae
    from ditskip_edge.patch_sampling import PatchSampler

    from .executorch_preprocess import export_preprocess
    sampler = PatchSampler(b.schedule_config.s_min_px)
    # the host's tiled encode (diffusers' tiled_encode, traced into the program) when the bundle's x0 was made so
    encoder = LatentEncoder(b.spec.arch, build_vae(b.spec), writer.manifest.get("encode_tiling"))
    shapes = []
    for rel in writer.manifest["subject_stage"]["photos"]:
        with Image.open(writer.root / rel) as im:
            shapes.append((im.size[1], im.size[0]))
    entries = []
    for h, w in sorted(set(shapes)):
        pte, memory = export_preprocess(sampler, encoder, (h, w), backend)
        x0_shape = list(encoder(sampler(torch.zeros(1, 3, h, w), torch.tensor([0.0, 0.0, float(min(h, w))]))).shape)
        rel = f"{PROGRAM_DIR}/{PREPROCESS}_{h}x{w}.pte"
        writer.path(rel).write_bytes(pte)
        entries.append(ProgramEntry(
            name=PREPROCESS, runtime="executorch", path=rel,
            inputs=[{"name": "photo", "shape": [1, 3, h, w], "dtype": "float32"},
                    {"name": "crop_box", "shape": [3], "dtype": "float32"}],
            outputs=[{"name": "x0", "shape": x0_shape, "dtype": "float32"}], backend=backend,
            memory=memory).to_json())
    return entries


def add_executorch_programs(writer: BundleWriter, config: ExecutorchPrograms) -> list[str]:
    """Export the programs into the bundle being written; returns their paths."""
    config.validate()
    b = open_bundle(writer.view())
    entries = [train_step_entry(b, p, config, writer) for p in config.precisions]
    if config.preprocess:
        entries += preprocess_entries(writer, b, config.backend)
    writer.manifest["programs"] = [p for p in writer.manifest.get("programs", [])
                                   if p["runtime"] != "executorch" or p["name"] not in (TRAIN_STEP, PREPROCESS)] + entries
    return [e["path"] for e in entries]
