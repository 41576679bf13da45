// ditskip-run personalize: not in the native core yet (issue 56 moves it in).
#include <cstdio>

#include "ditskip_run_common.h"

int personalize_verb(int argc, char** argv) {
  std::fprintf(stderr, "ditskip-run personalize: error: not in the native core yet; use python -m ditskip_edge.runtime personalize\n");
  return 2;
}
