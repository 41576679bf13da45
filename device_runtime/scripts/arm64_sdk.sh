#!/bin/bash
# ExecuTorch's C++ SDK for arm64 Linux: the libraries of the arm64 executorch wheel (the pinned release, from the
# package index) and the headers of the x86-64 wheel already installed (the same release: the same headers).
#
#   device_runtime/scripts/arm64_sdk.sh [OUT_DIR (build/executorch-arm64)] [X86_SDK (the venv's executorch/)]
#
# Lays out OUT_DIR/executorch/{lib,include} (include: a link to the x86-64 wheel's) for -DEXECUTORCH_ROOT. Skips the
# download when OUT_DIR/executorch/lib/libexecutorch.so is there. Env: PIP (default .venv/bin/pip), EXECUTORCH_VERSION.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
OUT="${1:-$ROOT/build/executorch-arm64}"
PIP="${PIP:-$ROOT/.venv/bin/pip}"
VERSION="${EXECUTORCH_VERSION:-1.5.1}"
X86="${2:-}"
if [ -z "$X86" ]; then
  X86="$("$ROOT/.venv/bin/python" -c 'import executorch;print(list(executorch.__path__)[0])')"
fi
[ -f "$X86/include/executorch/extension/module/module.h" ] || {
  echo "arm64_sdk.sh: $X86 has no include/executorch (the x86-64 executorch wheel's headers)" >&2; exit 1; }
mkdir -p "$OUT/executorch"
if [ ! -f "$OUT/executorch/lib/libexecutorch.so" ]; then
  TMP="$(mktemp -d "$OUT/.download.XXXXXX")"
  trap 'rm -rf "$TMP"' EXIT
  "$PIP" download -q --no-deps --only-binary=:all: --platform manylinux_2_28_aarch64 --python-version 3.11 \
    "executorch==$VERSION" -d "$TMP"
  WHEEL="$(ls "$TMP"/executorch-*.whl)"
  python3 - "$WHEEL" "$TMP/unpacked" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    names = [n for n in z.namelist() if n.startswith("executorch/lib/")]
    if not any(n.endswith("/libexecutorch.so") for n in names):
        sys.exit(f"arm64_sdk.sh: {sys.argv[1]} has no executorch/lib/libexecutorch.so")
    z.extractall(sys.argv[2], names)
PY
  rm -rf "$OUT/executorch/lib"
  mv "$TMP/unpacked/executorch/lib" "$OUT/executorch/lib"
fi
ln -sfn "$X86/include" "$OUT/executorch/include"
echo "$OUT/executorch"
