"""The `ditskip-edge` console script.

Each subcommand lives in `ditskip_edge/commands/<name>.py` with `register(subparsers)` (which sets `func`) and
returns a JSON-able dict. With --json that dict is the one document printed on stdout; otherwise a short human
summary is. Logs and progress bars go to stderr. A UserError is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys

from .errors import UserError

COMMANDS = ["compile", "train", "select", "cache_report", "plan", "export"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ditskip-edge", description="DiT-BlockSkip fine-tuning compiled for phones")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f".commands.{name}", __package__)
        except ModuleNotFoundError as e:
            if e.name and e.name.endswith(f"commands.{name}"):
                continue      # subcommand not built yet
            raise
        mod.register(sub)
    return parser


def add_json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")


def _print_human(result: dict) -> None:
    for k, v in result.items():
        if isinstance(v, (list, dict)) and len(json.dumps(v)) > 200:
            continue
        print(f"{k}: {v}")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("diffusers", "torch", "torchao", "peft", "httpx", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    try:
        result = args.func(args)
    except UserError as e:
        print(f"ditskip-edge {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"ditskip-edge {args.command}: interrupted", file=sys.stderr)
        return 130
    if getattr(args, "json", False):
        json.dump(result, sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
    else:
        _print_human(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
