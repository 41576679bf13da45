"""Compile hook: `ditskip-edge compile --runtime ort` adds the ONNX Runtime programs to the bundle being written.

compile.py calls `add_to_bundle(writer, req)` inside its BundleWriter, after the model and subject stages: the files
go under programs/ort/, the manifest gets `programs.ort`, and the bundle is still committed all-or-nothing.
"""

from __future__ import annotations

from ditskip_edge.bundle import BundleWriter
from ditskip_edge.bundle_model import open_bundle
from ditskip_edge.quantize import QuantSpec

from .ort_export import PROGRAM_DIR, OrtExportConfig, export_ort_programs
from .ort_memory import disk_report


def add_to_bundle(writer: BundleWriter, req) -> dict:
    b = open_bundle(writer.root, verify=False, manifest=writer.manifest)
    quant = getattr(req, "quant", None) or QuantSpec(bits=8)
    section = export_ort_programs(b, writer.path(PROGRAM_DIR), OrtExportConfig(quant=quant))
    section["memory"] = disk_report(writer.path(PROGRAM_DIR), section["artifacts"])
    writer.manifest.setdefault("programs", {})["ort"] = section
    return section
