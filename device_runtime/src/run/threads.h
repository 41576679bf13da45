// The CPU threads ExecuTorch's kernels and the XNNPACK delegate run on: one process-wide pool (ExecuTorch's
// extension/threadpool singleton, which XNNPACK takes when a program is loaded). Default: ExecuTorch's own choice
// (one thread per core cpuinfo reports). Mirrors `python -m ditskip_edge.runtime ... --threads N`
// (ditskip_edge/runtime/bindings.py set_executorch_threads), which resets the same pool through the Python bindings.
#pragma once

#include <cstdint>

namespace ditskip {

// Resizes the pool to `threads` (>= 1; refuses otherwise). Only before programs are loaded: XNNPACK delegates keep
// the pool they were created with.
void set_cpu_threads(int64_t threads);
// The pool's current size.
int64_t cpu_threads();

}  // namespace ditskip
