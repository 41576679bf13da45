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


def provenance_md(p: dict) -> str:
    return f"Command: `{p['command']}`  \nMachine: {p['machine']}  \nDate: {p['date']}\n"
