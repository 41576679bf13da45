// The C boundary of the personalize verb (include/ditskip/ditskip.h). Stub until the driver lands (issue 56).
#include "c_api_internal.h"

using ditskip::c_api::guarded;

extern "C" {

ditskip_personalize_params ditskip_personalize_default_params(void) {
  ditskip_personalize_params p{};
  return p;
}

void ditskip_personalize_default_params_ref(ditskip_personalize_params* params) {
  if (params != nullptr) *params = ditskip_personalize_default_params();
}

}  // extern "C"

extern "C" ditskip_status ditskip_personalize(const char*, const char*, const ditskip_personalize_params*, char** summary_json) {
  return guarded([&]() -> ditskip_status { ditskip::refuse("ditskip_personalize: not implemented yet"); });
}
