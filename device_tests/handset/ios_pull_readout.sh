#!/usr/bin/env bash
# NOT RUN HERE: no iPhone and no Xcode on the machines this was written on; never executed.
#
# iOS runs no command-line program: the measurement is the demo app's run (ios_demo, the native core through the
# Swift binding). The core writes Documents/runs/<bundle>/summary.json (losses, LoRA) and the app device_run.json
# beside it (per step phys_footprint, what jetsam compares with the limit, and os_proc_available_memory()).
#
#   1. copy the bundle in:   device_tests/handset/ios_pull_readout.sh push BUNDLE_DIR
#   2. on the phone: open DiT-BlockSkip, pick the bundle, Train (watch the memory section)
#   3. pull the run:         device_tests/handset/ios_pull_readout.sh pull BUNDLE_DIR [OUT_DIR]
#
# DEVICE defaults to the first connected device (xcrun devicectl list devices; Xcode 15+).
set -euo pipefail
CMD=${1:?usage: ios_pull_readout.sh push|pull BUNDLE_DIR [OUT_DIR]}
BUNDLE=${2:?bundle dir}
APP=org.ditskip.DitSkipDemo
NAME=$(basename "$BUNDLE")
DEVICE=${DEVICE:-$(xcrun devicectl list devices --hide-default-columns --columns Identifier --hide-headers | head -1)}

case "$CMD" in
  push)
    xcrun devicectl device copy to --device "$DEVICE" --domain-type appDataContainer --domain-identifier "$APP" \
      --source "$BUNDLE" --destination "Documents/$NAME"
    ;;
  pull)
    OUT=${3:-handset_out/ios-$(date +%Y%m%d-%H%M%S)}
    mkdir -p "$OUT"
    xcrun devicectl device copy from --device "$DEVICE" --domain-type appDataContainer --domain-identifier "$APP" \
      --source "Documents/runs/$NAME" --destination "$OUT/run"
    xcrun devicectl device info details --device "$DEVICE" > "$OUT/device_model.txt" || true
    python3 "$(dirname "$0")/summarize.py" "$OUT" "$BUNDLE"
    ;;
  *) echo "push or pull"; exit 2 ;;
esac
