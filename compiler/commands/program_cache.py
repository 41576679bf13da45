"""ditskip-edge program-cache: what the host's program cache (export/program_cache.py) holds; --clear empties it."""

from __future__ import annotations

from ditskip_edge.runtime.errors import UserError


def register(sub, add_json_flag) -> None:
    p = sub.add_parser("program-cache", help="show (or --clear) the lowered programs compile keeps between compiles")
    p.add_argument("--dir", metavar="DIR",
                   help="the cache folder (default $DITSKIP_EDGE_PROGRAM_CACHE, else ~/.cache/ditskip-edge/programs)")
    p.add_argument("--clear", action="store_true", help="remove every stored program")
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args) -> dict:
    from export.program_cache import ENV_DIR, ProgramCache
    cache = ProgramCache.at(args.dir) if args.dir else ProgramCache.from_env()
    if cache.root is None:
        raise UserError(f"the program cache is off ({ENV_DIR}=off): nothing to show")
    if cache.root.exists() and not cache.root.is_dir():
        raise UserError(f"program cache {cache.root} is not a folder")
    removed = cache.clear() if args.clear else 0
    return {**cache.summary(), **({"removed_entries": removed} if args.clear else {})}
