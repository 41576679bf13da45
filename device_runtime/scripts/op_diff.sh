#!/bin/bash
# Which operator of a bundle's train_step gives another float32 result on arm64 (qemu) than on x86-64, on the same
# inputs: dumps sample SAMPLE's inputs with the Python runtime, runs the program once on each machine with every
# operator's output logged (ditskip-op-trace: cmake -DDITSKIP_OP_TRACE=ON for build/native and build/native-arm64),
# and prints the first operators whose outputs differ.
#
#   device_runtime/scripts/op_diff.sh BUNDLE [SAMPLE (0)] [N (6)]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BUNDLE="$(cd "${1:?usage: op_diff.sh BUNDLE [SAMPLE] [N]}" && pwd)"
SAMPLE="${2:-0}"
N="${3:-6}"
PY="$ROOT/.venv/bin/python"
for b in "$ROOT/build/native/ditskip-op-trace" "$ROOT/build/native-arm64/ditskip-op-trace"; do
  [ -x "$b" ] || { echo "op_diff.sh: no $b (configure with -DDITSKIP_OP_TRACE=ON and build it)" >&2; exit 1; }
done
WORK="$(mktemp -d "${TMPDIR:-/tmp}/ditskip-opdiff.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
PROGRAM="$(cd "$ROOT" && "$PY" - "$BUNDLE" "$SAMPLE" "$WORK/inputs" <<'PY'
import os, sys
from ditskip_edge.runtime.bundle import Bundle
from ditskip_edge.runtime.contract import find_program, ordered_inputs
from ditskip_edge.runtime.inputs import StepInputs
bundle, k, out = Bundle.open(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
program = find_program(bundle.programs, "train_step", "executorch")
arrays = ordered_inputs(program, StepInputs(bundle)(bundle.schedule.samples[k]))
os.makedirs(out)
with open(f"{out}/inputs.txt", "w") as f:
    for i, a in enumerate(arrays):
        f.write(f"{a.dtype.name} {a.ndim} {' '.join(map(str, a.shape))}\n")
        a.tofile(f"{out}/input_{i}.bin")
data = program.get("data", [])
print(bundle.root / program["path"], bundle.root / data[0] if data else "-")
PY
)"
read -r PTE PTD <<< "$PROGRAM"
export DITSKIP_PROGRESS=0
echo "x86-64 loss: $("$ROOT/build/native/ditskip-op-trace" "$PTE" "$PTD" forward "$WORK/inputs" "$WORK/x86" 2>/dev/null)"
echo "arm64 loss:  $(qemu-aarch64-static -L /usr/aarch64-linux-gnu "$ROOT/build/native-arm64/ditskip-op-trace" \
  "$PTE" "$PTD" forward "$WORK/inputs" "$WORK/arm64" 2>/dev/null)"
(cd "$ROOT" && "$PY" "$HERE/op_diff.py" "$WORK/x86" "$WORK/arm64" "$N" 2>/dev/null)
