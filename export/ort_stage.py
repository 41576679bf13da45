"""Compiler stage: the ONNX Runtime Training programs of a bundle being written.

    add_ort_programs(writer, OrtPrograms(precisions=("int8",)))

writes `programs/ort/<precision>/training_model.onnx` and `.../checkpoint` per precision and adds one
`runtime/contract.py` ProgramEntry each to the manifest's `programs` list.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ditskip_edge.bundle_model import open_bundle
from ditskip_edge.quantize import QuantSpec
from ditskip_edge.runtime.bundle import PROGRAMS_DIR, BundleWriter
from ditskip_edge.runtime.contract import check_precisions

log = logging.getLogger(__name__)
PROGRAM_DIR = f"{PROGRAMS_DIR}/ort"


@dataclass(frozen=True)
class OrtPrograms:
    precisions: tuple[str, ...] = ("int8",)
    group_size: int = 32                        # int4: input features per scale

    def validate(self) -> None:
        check_precisions(self.precisions)


def add_ort_programs(writer: BundleWriter, config: OrtPrograms) -> list[str]:
    """Export the programs into the bundle being written; returns their paths."""
    from .ort_export import export_ort_train_step
    config.validate()
    b = open_bundle(writer.view())
    entries = []
    for precision in config.precisions:
        rel = f"{PROGRAM_DIR}/{precision}"
        log.info("exporting %s (onnxruntime-training)", rel)
        entries.append(export_ort_train_step(b, QuantSpec(precision, group_size=config.group_size),
                                             writer.path(rel + "/x").parent, rel).to_json())
    writer.manifest["programs"] = [p for p in writer.manifest.get("programs", [])
                                   if p["runtime"] != "ort"] + entries
    return [e["path"] for e in entries]
