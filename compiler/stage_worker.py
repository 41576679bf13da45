"""Program stages that need no subject, exported by a second process while the subject stage runs (`--jobs 2`).

    worker = StageWorker.start(writer, [GenerationPrograms(...)], threads=1)   # before the model loads
    ... compile_subject_stage(writer, ...) ...                                  # meanwhile, in this process
    paths = worker.join(writer)          # its files are already under writer.root; its manifest fields merged here

The generation part (text encoder, every block's forward, decoder) reads only the manifest's model and LoRA fields
and loads the model itself, so it can run beside the residual cache; the training programs read the subject stage
and stay in this process. The worker is a fresh (spawned) interpreter: it holds its own copy of the model (memory:
a second copy of the frozen weights while both run). It writes into the same staging folder; what it adds to the
manifest comes back through a pipe and is merged on `join`. A failure on either side stops the other and the
bundle is not written (BundleWriter removes the staging folder).
"""

from __future__ import annotations

import copy
import logging
import multiprocessing as mp
import traceback
from pathlib import Path

from ditskip_edge.runtime.bundle import BundleWriter
from ditskip_edge.runtime.errors import UserError
from export.executorch_stage import ExecutorchPrograms, add_executorch_programs
from export.generation_stage import GenerationPrograms, add_generation_programs
from export.ort_stage import OrtPrograms, add_ort_programs

from .logs import configure_logging, quiet_third_parties

log = logging.getLogger(__name__)

PROGRAM_STAGES = {ExecutorchPrograms: add_executorch_programs, OrtPrograms: add_ort_programs,
                  GenerationPrograms: add_generation_programs}     # a program stage's config -> its exporter


def subject_independent(stage) -> bool:
    """A program stage that reads nothing of the subject stage (declared by the stage's config class)."""
    return bool(getattr(stage, "SUBJECT_INDEPENDENT", False))


class StageWorker:
    def __init__(self, process, conn, stages: list, sent_manifest: dict):
        self._process, self._conn, self.stages, self._sent = process, conn, stages, sent_manifest

    @classmethod
    def start(cls, writer: BundleWriter, stages: list, threads: int) -> "StageWorker":
        ctx = mp.get_context("spawn")             # not fork: the parent's OpenMP pool does not survive a fork
        receive, send = ctx.Pipe(duplex=False)
        sent = copy.deepcopy(writer.manifest)
        level = logging.getLogger("export").getEffectiveLevel()
        process = ctx.Process(target=_work, args=(str(writer.root), sent, stages, threads, level, send),
                              name="ditskip-edge program stages", daemon=True)
        process.start()
        send.close()
        log.info("exporting %s in a second process", ", ".join(type(s).__name__ for s in stages))
        return cls(process, receive, stages, sent)

    def join(self, writer: BundleWriter) -> list[list[str]]:
        """Wait for the worker; merge its manifest fields into `writer`. Returns each stage's program paths."""
        try:
            result = self._conn.recv()
        except EOFError:
            result = None
        self._process.join()
        if result is None:
            raise RuntimeError(f"the program export process died (exit code {self._process.exitcode})")
        if result.get("user_error"):
            raise UserError(result["user_error"])
        if result.get("error"):
            raise RuntimeError(f"the program export process failed:\n{result['error']}")
        merge_manifest(writer.manifest, self._sent, result["manifest"])
        return result["paths"]

    def cancel(self) -> None:
        if self._process.is_alive():
            self._process.terminate()
        self._process.join()


def merge_manifest(target: dict, sent: dict, worker: dict) -> None:
    """Fields the worker added or changed go into `target`; program entries it added are appended to target's."""
    for key, value in worker.items():
        if key == "programs":
            before = {p["path"] for p in sent.get("programs", [])}
            target["programs"] = target.get("programs", []) + [p for p in value if p["path"] not in before]
        elif sent.get(key) != value:
            target[key] = value


def _work(root: str, manifest: dict, stages: list, threads: int, log_level: int, conn) -> None:
    import torch

    quiet_third_parties(log_level <= logging.DEBUG)
    configure_logging(log_level)
    torch.set_num_threads(threads)
    writer = BundleWriter.attach(Path(root), manifest)
    try:
        paths = [PROGRAM_STAGES[type(stage)](writer, stage) for stage in stages]
        conn.send({"manifest": writer.manifest, "paths": paths})
    except UserError as e:
        conn.send({"user_error": str(e)})
    except BaseException:              # noqa: BLE001  (reported to the parent, which raises it)
        conn.send({"error": traceback.format_exc()})
    finally:
        conn.close()
