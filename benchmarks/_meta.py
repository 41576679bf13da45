"""Provenance for benchmark results: the command, the machine and the date that produced them."""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import sys


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {mem_gib:.0f} GiB RAM, {platform.system()} {platform.release()}"


def provenance() -> dict:
    return {"command": " ".join(shlex.quote(a) for a in [os.path.relpath(sys.executable), *sys.argv]),
            "machine": machine(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def write_result(doc: dict, stem, to_markdown) -> str:
    """A benchmark's result beside its reading: <stem>.json and <stem>.md (to_markdown(doc)); returns the markdown."""
    import json
    from pathlib import Path
    md = to_markdown(doc)
    Path(stem).with_suffix(".json").write_text(json.dumps(doc, indent=1))
    Path(stem).with_suffix(".md").write_text(md)
    return md


def provenance_md(p: dict) -> str:
    return f"Command: `{p['command']}`  \nMachine: {p['machine']}  \nDate: {p['date']}\n"


# Source a benchmark's child process runs after its imports: from here on it samples its own RssAnon (dirty
# anonymous: what a phone counts) and RssFile every 2 ms, as growth over this point, into `peak` ({"anon", "file"}
# bytes; `base` is the footprint at this point) until `stop_watch()`. Only the runtime's footprint reader is imported.
PEAK_WATCHER = r"""
import threading as _threading, time as _time
from ditskip_edge.runtime.footprint import read_footprint
base = read_footprint()
peak = {"anon": 0, "file": 0}
_stop = [False]
def _watch():
    while not _stop[0]:
        f = read_footprint()
        peak["anon"] = max(peak["anon"], f.anon_bytes - base.anon_bytes)
        peak["file"] = max(peak["file"], f.file_bytes - base.file_bytes)
        _time.sleep(0.002)
_watcher = _threading.Thread(target=_watch, daemon=True)
_watcher.start()
def stop_watch():
    _stop[0] = True
    _watcher.join()
"""
