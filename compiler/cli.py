"""The `ditskip-edge` console script.

Each subcommand lives in `compiler/commands/<name>.py` with `register(subparsers, add_json_flag)` (which sets
`func`) and returns a JSON-able dict. With --json that dict is the one document printed on stdout; otherwise a
short human summary is. Logs and progress bars go to stderr; third-party libraries' warnings are shown only with
-v (logs.py). A UserError is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from ditskip_edge.runtime.errors import UserError

from .logs import configure_logging, quiet_third_parties


def add_json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")


def build_parser() -> argparse.ArgumentParser:
    from .commands import cache_report, compile, estimate, program_cache, select, train
    parser = argparse.ArgumentParser(prog="ditskip-edge", description="DiT-BlockSkip fine-tuning compiled for phones")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging and third-party warnings")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (compile, train, select, cache_report, estimate, program_cache):
        module.register(sub, add_json_flag)
    return parser


def _print_human(result: dict) -> None:
    for k, v in result.items():
        if isinstance(v, (list, dict)) and len(json.dumps(v)) > 200:
            continue
        print(f"{k}: {v}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    verbose = "-v" in argv or "--verbose" in argv
    quiet_third_parties(verbose)
    configure_logging(logging.DEBUG if verbose else logging.INFO, logging.DEBUG if verbose else logging.WARNING)
    args = build_parser().parse_args(argv)
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
