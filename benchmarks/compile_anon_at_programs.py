"""How much anonymous memory a compile holds when its device-program stages start (compiler/compile.py
ProgramStages.finish: the training and generation exports, which build the model again): RssAnon of the compile
process there, after a full garbage collection, and after glibc's malloc_trim. Then it exits without exporting.

    python benchmarks/compile_anon_at_programs.py compile --model WORK/pipeline ... (ditskip-edge compile's arguments)

Answers "does the compile still hold the first fp32 model during the training export?": if RssAnon here is far
below the model's size, the model was given back and the later peaks are the exports' own.
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import compiler.compile as compile_module  # noqa: E402


def rss_anon_gib() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def report_and_exit(self) -> None:
    print(f"RssAnon at the program stages: {rss_anon_gib():.2f} GiB", file=sys.stderr)
    gc.collect()
    print(f"after gc.collect(): {rss_anon_gib():.2f} GiB", file=sys.stderr)
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    print(f"after malloc_trim(0): {rss_anon_gib():.2f} GiB", file=sys.stderr, flush=True)
    os._exit(0)


if __name__ == "__main__":
    compile_module.ProgramStages.finish = report_and_exit
    from compiler.cli import main
    sys.exit(main(sys.argv[1:]))
