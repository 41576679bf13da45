"""ditskip-edge cache-report BUNDLE: bytes per sample, coding error and training-loss change of each cache codec."""

from __future__ import annotations

from pathlib import Path

from ditskip_edge.runtime.errors import UserError


def register(sub, add_json_flag) -> None:
    p = sub.add_parser("cache-report", help="compare residual-cache codecs on a bundle (size, error, loss change)")
    p.add_argument("bundle")
    p.add_argument("--codecs", default=None,
                   help="codec specs separated by ';' (a spec may contain commas; default: the standard set plus the "
                        "bundle's own codec)")
    p.add_argument("--samples", type=int, default=32, help="samples over which the coding error is measured")
    p.add_argument("--train-steps", type=int, default=10,
                   help="length of the fixed training run compared against the fp32 cache (0: skip)")
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args) -> dict:
    from ditskip_edge.bundle_model import open_bundle
    from ditskip_edge.cache.quality import cache_report
    if not Path(args.bundle).is_dir():
        raise UserError(f"bundle {args.bundle} is not a folder")
    codecs = [c for c in args.codecs.split(";") if c.strip()] if args.codecs else None
    report = cache_report(open_bundle(args.bundle), codecs, max_samples=args.samples, train_steps=args.train_steps)
    if not args.json:                       # the human summary: one line per codec
        for r in report["codecs"]:
            loss = f"  loss change mean {100 * r['loss_rel_change_mean']:.3f}%" if "loss_rel_change_mean" in r else ""
            print(f"{r['codec']:36s} {r['entry_bytes_per_sample']:>10d} B/sample  x{r['ratio_to_fp32']:<6} "
                  f"rel. error mean {100 * r['rel_error_mean']:.3f}% max {100 * r['rel_error_max']:.3f}%{loss}")
        return {"bundle": report["bundle"], "bundle_codec": report["bundle_codec"]}
    return report
