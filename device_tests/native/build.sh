#!/bin/bash
# Build ptd_loader_check against the executorch wheel installed in the repo's venv (headers in include/, libraries in
# lib/). Usage: device_tests/native/build.sh [OUTPUT_BINARY]   (default: build/ptd_loader_check, git-ignored)
# Env: PYTHON (default: <repo>/.venv/bin/python, else python3), CXX (default: g++).
# Kernels: libexecutorch_kernels_optimized registers the optimized CPU kernels plus the portable ones for every other
# aten op (the training program's ops: mm, bmm, native_layer_norm, _softmax, gelu, ... and their backward ops);
# --no-as-needed keeps the library (and its static op registration) although no symbol of it is referenced.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
OUT="${1:-$ROOT/build/ptd_loader_check}"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
CXX="${CXX:-g++}"
command -v "$CXX" >/dev/null || { echo "build.sh: $CXX not found (install g++)" >&2; exit 127; }
W="$("$PY" -c 'import executorch;print(list(executorch.__path__)[0])')"  # a namespace package: no __file__
[ -d "$W/include/executorch" ] && [ -f "$W/lib/libexecutorch.so" ] || {
  echo "build.sh: $W has no include/executorch or lib/libexecutorch.so (executorch wheel without C++ SDK?)" >&2; exit 1; }
mkdir -p "$(dirname "$OUT")"
"$CXX" -std=c++17 -O1 -Wall -Wno-deprecated-declarations \
  -DC10_USING_CUSTOM_GENERATED_MACROS -DET_EVENT_TRACER_ENABLED \
  -I"$W/include" -I"$W/include/executorch/runtime/core/portable_type/c10" \
  "$HERE/ptd_loader_check.cpp" \
  -L"$W/lib" -Wl,--no-as-needed -lexecutorch -lexecutorch_kernels_optimized -Wl,--as-needed \
  -Wl,-rpath,"$W/lib" -o "$OUT"
echo "$OUT"
