// The C boundary of the generate verb (include/ditskip/ditskip.h). Stub until the driver lands (issue 56).
#include "c_api_internal.h"

using ditskip::c_api::guarded;

extern "C" {

ditskip_generate_params ditskip_generate_default_params(void) {
  ditskip_generate_params p{};
  return p;
}

void ditskip_generate_default_params_ref(ditskip_generate_params* params) {
  if (params != nullptr) *params = ditskip_generate_default_params();
}

}  // extern "C"

extern "C" ditskip_status ditskip_generate(const char*, const ditskip_generate_params*, char** summary_json) {
  return guarded([&]() -> ditskip_status { ditskip::refuse("ditskip_generate: not implemented yet"); });
}
