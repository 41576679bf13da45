#!/bin/bash
# Parity of the native core with the Python runtime: trains a copy of BUNDLE with both and compares the checkpoint
# and the LoRA byte for byte, and the losses.
#
#   device_runtime/scripts/parity.sh BUNDLE [--arm64] [ditskip-run train flags: --steps N, --device-preprocess, ...]
#
# --arm64: the native run is build/native-arm64/ditskip-run under qemu-aarch64-static (make native-arm64); else
# build/native/ditskip-run (make native). Exit 0 when everything matches, 1 with the first difference otherwise.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BUNDLE="${1:?usage: parity.sh BUNDLE [--arm64] [train flags]}"
shift
RUN=("$ROOT/build/native/ditskip-run")
if [ "${1:-}" = "--arm64" ]; then
  RUN=(qemu-aarch64-static -L /usr/aarch64-linux-gnu "$ROOT/build/native-arm64/ditskip-run")
  shift
fi
WORK="$(mktemp -d "${TMPDIR:-/tmp}/ditskip-parity.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
cp -r "$BUNDLE" "$WORK/bundle"
export DITSKIP_PROGRESS=0
(cd "$ROOT" && .venv/bin/python -m ditskip_edge.runtime train "$WORK/bundle" --runtime executorch \
  --run-dir "$WORK/python" --json "$@" > "$WORK/python.json" 2> "$WORK/python.err") ||
  { cat "$WORK/python.err" >&2; exit 1; }
"${RUN[@]}" train "$WORK/bundle" --run-dir "$WORK/native" --json "$@" > "$WORK/native.json"
status=0
for f in checkpoint.safetensors $(cd "$WORK/python" && ls lora/*.safetensors); do
  if cmp -s "$WORK/python/$f" "$WORK/native/$f"; then echo "same bytes: $f"; else echo "DIFFERENT: $f"; status=1; fi
done
python3 - "$WORK/python.json" "$WORK/native.json" <<'PY' || status=1
import json, sys
py, nat = (json.load(open(p)) for p in sys.argv[1:])
print("python losses:", py["losses"])
print("native losses:", nat["losses"])
sys.exit(0 if py["losses"] == nat["losses"] else 1)
PY
exit $status
