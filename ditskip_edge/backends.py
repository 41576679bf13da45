"""The ExecuTorch training program's backends and the default `compile` and `estimate` use.

XNNPACK is the default (issue 57): on the headline layouts (BlockSkip 50%, int8, block remat, mapped weights) its
program is several times faster per step than the portable kernels' at about the same footprint, and the native core
and the Python runtime run it bit for bit alike (benchmarks/results/device_footprint_backends.md, measured with
`benchmarks/device_footprint.py --backend portable|xnnpack`). The portable program stays available
(`compile --backend portable`): it needs no delegate, and the test suite compiles it because it lowers faster.
"""

TRAIN_BACKENDS = ("xnnpack", "portable")
DEFAULT_TRAIN_BACKEND = "xnnpack"
