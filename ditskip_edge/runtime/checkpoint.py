"""One checkpoint format for every runtime: `RUN/checkpoint.npz`, written atomically.

    step                  optimizer steps done
    losses                one loss per step done (float64)
    identity              what the run belongs to: SHA-256 of {runtime, program files' SHA-256, schedule SHA-256,
                          cache codec, LoRA spec, optimizer}; a checkpoint of another identity is refused on resume
    param/<name>          the trainable parameters (the runtime's own names)
    opt/<key>             the optimizer's state (runtime/adamw.py: step_count, m/<name>, v/<name>)

Resume rule: a run folder with a checkpoint of the same identity continues after its last step; another identity
is an error (delete the checkpoint or use another run folder); --no-resume starts over (the checkpoint is
replaced at the first save).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import UserError

CHECKPOINT = "checkpoint.npz"


def run_identity(runtime: str, program_sha256: str, bundle) -> str:
    doc = {"runtime": runtime, "program": program_sha256,
           "schedule": bundle.file_sha256(bundle.field("subject_stage", "schedule")),
           "codec": bundle.field("subject_stage", "cache_codec"), "lora": bundle.field("lora"),
           "optimizer": bundle.field("optimizer")}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


@dataclass
class Checkpoint:
    step: int
    losses: list[float]
    identity: str
    params: dict[str, np.ndarray]
    optimizer: dict[str, np.ndarray]

    def save(self, path: Path) -> None:
        arrays = {"step": np.array(self.step, np.int64), "losses": np.array(self.losses, np.float64),
                  "identity": np.array(self.identity)}
        arrays.update({f"param/{n}": np.asarray(a) for n, a in self.params.items()})
        arrays.update({f"opt/{k}": np.asarray(v) for k, v in self.optimizer.items()})
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez(tmp, **arrays)
        os.replace(tmp, path)

    @staticmethod
    def load(path: Path, identity: str) -> "Checkpoint":
        try:
            with np.load(path) as z:
                arrays = {k: z[k] for k in z.files}
            found = str(arrays["identity"])
            step, losses = int(arrays["step"]), [float(x) for x in arrays["losses"]]
        except (OSError, ValueError, KeyError) as e:
            raise UserError(f"{path}: unreadable checkpoint ({type(e).__name__}: {e}); delete it or pass "
                            f"--no-resume") from e
        if found != identity:
            raise UserError(f"{path}: checkpoint belongs to another bundle, program or schedule; delete it, pass "
                            f"--no-resume or use another --run-dir")
        return Checkpoint(step, losses, found, {k[6:]: v for k, v in arrays.items() if k.startswith("param/")},
                          {k[4:]: v for k, v in arrays.items() if k.startswith("opt/")})
