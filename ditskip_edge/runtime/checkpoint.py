"""One checkpoint format for every runtime and the demo apps: `RUN/checkpoint.safetensors`, written atomically.

    tensors   param/<name>       the trainable parameters (the runtime's own names), float32
              m/<name>, v/<name> AdamW's moments (runtime/adamw.py), float32
    metadata  step               optimizer steps done
              losses             JSON list, one loss per step done
              optimizer_steps    AdamW's step count
              identity           what the run belongs to (below)

identity = lowercase hex SHA-256 of the UTF-8 text
    "ditskip-edge checkpoint v1\\n" + runtime + "\\n" + program + "\\n" + manifest_sha256
where program is the SHA-256 of the program's files as the manifest lists them, joined by "+" (the eager runtime:
the kept weights file), and manifest_sha256 the bundle manifest's own digest, which covers the schedule, the
cache codec, the LoRA spec and the optimizer. Resume rule: a run folder with a checkpoint of the same identity
continues after its last step; another identity is an error (delete the checkpoint, pass --no-resume or use
another run folder); --no-resume starts over and replaces the checkpoint at its first save.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import UserError
from .safetensors_io import read_safetensors, write_safetensors

CHECKPOINT = "checkpoint.safetensors"
IDENTITY_PREFIX = "ditskip-edge checkpoint v1"


def run_identity(runtime: str, program_sha256: str, manifest_sha256: str) -> str:
    text = f"{IDENTITY_PREFIX}\n{runtime}\n{program_sha256}\n{manifest_sha256}"
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class Checkpoint:
    step: int
    losses: list[float]
    identity: str
    params: dict[str, np.ndarray]
    optimizer: dict[str, np.ndarray]       # runtime/adamw.py state: step_count, m/<name>, v/<name>

    def save(self, path: Path) -> None:
        tensors = {f"param/{n}": np.asarray(a, np.float32) for n, a in self.params.items()}
        tensors.update({k: np.asarray(v, np.float32) for k, v in self.optimizer.items() if k != "step_count"})
        meta = {"step": str(self.step), "losses": json.dumps(self.losses), "identity": self.identity,
                "optimizer_steps": str(int(self.optimizer.get("step_count", 0)))}
        write_safetensors(path, tensors, meta)

    @staticmethod
    def load(path: Path, identity: str) -> "Checkpoint":
        try:
            tensors, meta = read_safetensors(path)
            found, step, losses = meta["identity"], int(meta["step"]), [float(x) for x in json.loads(meta["losses"])]
            opt_steps = int(meta["optimizer_steps"])
        except Exception as e:  # noqa: BLE001 - any unreadable checkpoint is the same user-facing problem
            raise UserError(f"{path}: unreadable checkpoint ({type(e).__name__}: {e}); delete it or pass "
                            f"--no-resume") from e
        if found != identity:
            raise UserError(f"{path}: checkpoint belongs to another bundle, program or schedule; delete it, pass "
                            f"--no-resume or use another --run-dir")
        params = {k[len("param/"):]: v for k, v in tensors.items() if k.startswith("param/")}
        opt = {k: v for k, v in tensors.items() if not k.startswith("param/")}
        opt["step_count"] = np.array(opt_steps, np.int64)
        return Checkpoint(step, losses, found, params, opt)
