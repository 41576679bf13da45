"""Host driver of `device_tests/native/ptd_loader_check`: one ExecuTorch program run from C++ with its .ptd (external
frozen weights) loaded by FileDataLoader (`file`, what the Android TrainingModule JNI does: every weight copied into
heap memory) or by MmapDataLoader without mlock (`mmap`: clean file-backed pages, which phones do not count against
the app), and the process's RssAnon / RssFile after the steps.

    binary = build(Path("build"))                                   # device_tests/native/build.sh, g++ + the wheel
    r = run(binary, pte, ptd, "mmap", "forward", 2, inputs)         # inputs: numpy arrays in the method's order
    r["rss_anon_kib"] - r["baseline_rss_anon_kib"]                  # heap the program added

Inputs go to a temporary folder as `input_<k>.bin` (raw little-endian bytes) plus `inputs.txt`, one line per input:
`<dtype> <ndim> <d0> ... <d(ndim-1)>`. No torch needed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
NATIVE = HERE / "native"
LOADERS = ("file", "mmap")
DTYPES = {np.dtype("float32"): "float32", np.dtype("float64"): "float64", np.dtype("int64"): "int64",
          np.dtype("int32"): "int32", np.dtype("int8"): "int8", np.dtype("uint8"): "uint8", np.dtype("bool"): "bool"}


class NativeBuildError(RuntimeError):
    pass


def build(out_dir, python: str | None = None) -> Path:
    """Compile ptd_loader_check into `out_dir` against the executorch wheel of `python` (default: the repo's venv,
    else this interpreter). Raises NativeBuildError (g++ missing, wheel without headers, compile error)."""
    cxx = os.environ.get("CXX", "g++")
    if shutil.which(cxx) is None:
        raise NativeBuildError(f"{cxx} not found: the native .ptd loader check needs a C++17 compiler "
                               f"(apt-get install g++)")
    out = Path(out_dir).resolve() / "ptd_loader_check"
    env = dict(os.environ)
    venv_py = HERE.parent / ".venv" / "bin" / "python"
    env["PYTHON"] = python or (str(venv_py) if venv_py.exists() else sys.executable)
    r = subprocess.run(["bash", str(NATIVE / "build.sh"), str(out)], env=env, capture_output=True, text=True)
    if r.returncode != 0 or not out.exists():
        raise NativeBuildError(f"build.sh failed (rc {r.returncode}):\n{r.stdout}{r.stderr}")
    return out


def write_inputs(folder, inputs: list[np.ndarray]) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for k, a in enumerate(inputs):
        a = np.asarray(a)
        if a.dtype not in DTYPES:
            raise ValueError(f"input {k}: dtype {a.dtype} not supported ({sorted(DTYPES.values())})")
        np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tofile(folder / f"input_{k}.bin")
        lines.append(" ".join([DTYPES[a.dtype], str(a.ndim), *map(str, a.shape)]))
    (folder / "inputs.txt").write_text("\n".join(lines) + "\n")
    return folder


def run(binary, pte, ptd, loader: str, method: str, steps: int, inputs: list[np.ndarray],
        timeout: float = 600) -> dict:
    """Run the checker once (a fresh process, so the RSS readings are this program's alone). Returns its JSON line
    (loader, outputs0, rss_anon_kib, rss_file_kib, baseline_rss_anon_kib, baseline_rss_file_kib, ptd_bytes, ...).
    Raises RuntimeError with the checker's stderr on a non-zero exit."""
    if loader not in LOADERS:
        raise ValueError(f"loader must be one of {LOADERS}, got {loader!r}")
    with tempfile.TemporaryDirectory(prefix="ptd_inputs_") as tmp:
        write_inputs(tmp, inputs)
        cmd = [str(binary), str(pte), str(ptd), loader, method, str(int(steps)), tmp]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        err = [ln for ln in r.stderr.splitlines() if ln.startswith("ptd_loader_check:")] or r.stderr.splitlines()[-3:]
        raise RuntimeError(f"ptd_loader_check {loader} exited {r.returncode}: {' | '.join(err)}")
    line = next(ln for ln in reversed(r.stdout.splitlines()) if ln.startswith("{"))
    return json.loads(line)
