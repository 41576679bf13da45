"""Compare two ETDump traces of the same method on the same inputs (tools/op_trace.cpp, two machines): print the
first operators whose outputs differ, with the largest absolute difference. Used by scripts/op_diff.sh.

    python op_diff.py TRACE_A TRACE_B [N]        # TRACE: the OUT_PREFIX given to ditskip-op-trace
"""
import sys

import torch
from executorch.devtools import Inspector


def events(prefix):
    insp = Inspector(etdump_path=prefix + ".etdump", debug_buffer_path=prefix + ".debug")
    return [(block.name, e.name, e.debug_data) for block in insp.event_blocks for e in block.events]


def main() -> int:
    a, b = events(sys.argv[1]), events(sys.argv[2])
    limit = int(sys.argv[3]) if len(sys.argv) > 3 else 6
    print(f"{len(a)} / {len(b)} events")
    shown = 0
    for i, ((block, name, da), (_, _, db)) in enumerate(zip(a, b)):
        for k, (x, y) in enumerate(zip(da or [], db or [])):
            if isinstance(x, torch.Tensor) and (x.shape != y.shape or not torch.equal(x, y)):
                diff = (x.double() - y.double()).abs().max().item() if x.shape == y.shape else "shape"
                print(f"event {i} {block}/{name} output {k}: shape {list(x.shape)} {x.dtype} max |diff| {diff}")
                shown += 1
                break
        if shown >= limit:
            break
    if shown == 0:
        print("every operator output is the same")
    return 0


if __name__ == "__main__":
    sys.exit(main())
