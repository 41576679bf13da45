"""The contract's generated parts (docs/bundle_contract.json, the one written-down contract).

    python -m device_tests.gen_contract --vectors  # rewrite the schedule's test vectors in the JSON (only when the
                                                   # schedule algorithm's version changes)

The demo apps no longer carry generated constants: they bind the native core (device_runtime/), which reads the
bundle itself.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = ROOT / "docs" / "bundle_contract.json"


def load_contract() -> dict:
    return json.loads(CONTRACT.read_text())


# The schedule's test vectors (docs/bundle_contract.json `schedule.test_vectors`): photo sizes + config -> every
# sample. Fixed reference values: `--vectors` rewrites them (only when the schedule algorithm's version changes).
SCHEDULE_CASES = [
    (dict(steps=4, grad_accum=2, s_min_px=256, s_max_px=512, multiple_px=16, seed=0),
     [(512, 683), (512, 512), (683, 512)]),
    (dict(steps=3, grad_accum=3, s_min_px=128, s_max_px=256, multiple_px=16, seed=2**63 - 1, t_sampling="logit_normal"),
     [(240, 320), (300, 300)]),
    (dict(steps=2, grad_accum=1, s_min_px=32, s_max_px=64, multiple_px=4, seed=42, dynamic_patches=False), [(64, 80)]),
    (dict(steps=6, grad_accum=2, s_min_px=128, s_max_px=256, multiple_px=16, seed=7, t_sampling="logit_normal"),
     [(256, 256), (256, 300), (300, 256), (256, 384), (400, 256)]),
]


def schedule_test_vectors() -> list[dict]:
    from dataclasses import asdict

    from ditskip_edge.runtime.schedule import ScheduleConfig, make_schedule
    out = []
    for kw, sizes in SCHEDULE_CASES:
        cfg = ScheduleConfig(**kw)
        s = make_schedule(cfg, sizes, [f"p{i}" for i in range(len(sizes))])
        out.append({"config": asdict(cfg), "photo_sizes_hw": [list(x) for x in sizes],
                    "samples": [[x.index, x.photo, x.t, list(x.crop_box), x.noise_seed] for x in s.samples]})
    return out


def main(argv: list[str]) -> int:
    if "--vectors" not in argv:
        print("usage: python -m device_tests.gen_contract --vectors", file=sys.stderr)
        return 2
    c = load_contract()
    c["schedule"]["test_vectors"] = schedule_test_vectors()
    CONTRACT.write_text(json.dumps(c, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
