#!/usr/bin/env bash
# NOT RUN HERE: no Android device (adb) on the machines this was written on; never executed.
#
# Train a bundle on an Android phone with the native core's runner, as the phone's own process (no app): push the
# NDK build of ditskip-run and its libraries (android_demo/README.md "Building") and the bundle to /data/local/tmp,
# run `ditskip-run train BUNDLE --json` there, pull the summary (losses, LoRA, RssAnon / RssFile after each step) and
# the run folder, and print summarize.py's comparison with the bundle's prediction. Exits with ditskip-run's code.
#
#   device_tests/handset/android_run.sh BUNDLE_DIR BUILD_DIR [OUT_DIR] [-- more ditskip-run train options]
#
# BUILD_DIR: the NDK build (ditskip-run, libditskip.so); LIBS (default BUILD_DIR/lib): ExecuTorch's .so files and the
# NDK's libc++_shared.so for arm64-v8a.
set -euo pipefail
BUNDLE=${1:?usage: android_run.sh BUNDLE_DIR BUILD_DIR [OUT_DIR] [-- options]}
BUILD=${2:?usage: android_run.sh BUNDLE_DIR BUILD_DIR [OUT_DIR] [-- options]}
OUT=${3:-handset_out/android-$(date +%Y%m%d-%H%M%S)}
shift $(( $# < 3 ? $# : 3 ))
[ "${1:-}" = "--" ] && shift
LIBS=${LIBS:-$BUILD/lib}
REMOTE=/data/local/tmp/ditskip
NAME=$(basename "$BUNDLE")

mkdir -p "$OUT"
adb get-state >/dev/null
adb shell getprop ro.product.model > "$OUT/device_model.txt"
adb shell cat /proc/meminfo | head -3 > "$OUT/device_meminfo.txt"

adb shell "rm -rf $REMOTE/$NAME $REMOTE/run-$NAME && mkdir -p $REMOTE/lib"
adb push "$BUILD/ditskip-run" "$REMOTE/" >/dev/null
adb push "$BUILD"/libditskip.so* "$LIBS"/*.so "$REMOTE/lib/" >/dev/null
adb shell chmod 755 "$REMOTE/ditskip-run"
echo "pushing $BUNDLE -> $REMOTE/$NAME"
adb push "$BUNDLE" "$REMOTE/" >/dev/null

set +e
adb shell "cd $REMOTE && LD_LIBRARY_PATH=$REMOTE/lib ./ditskip-run train $NAME --run-dir run-$NAME --json $*" \
  > "$OUT/summary.json" 2> "$OUT/stderr.txt"
rc=$?
set -e
echo "$rc" > "$OUT/exit_code.txt"
adb pull "$REMOTE/run-$NAME" "$OUT/run" >/dev/null || true
python3 "$(dirname "$0")/summarize.py" "$OUT" "$BUNDLE"
exit "$rc"
