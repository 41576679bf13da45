// ditskip-run generate: not in the native core yet (issue 56 moves it in).
#include <cstdio>

#include "ditskip_run_common.h"

int generate_verb(int argc, char** argv) {
  std::fprintf(stderr, "ditskip-run generate: error: not in the native core yet; use python -m ditskip_edge.runtime generate\n");
  return 2;
}
