/* The C header compiles as plain C99 (what JNI glue, a Swift module map and ctypes see): every declaration is used
 * once so that a C++-only construct in the header fails this build. Compiled, never run (CMake object library). */
#include "ditskip/ditskip.h"

#include <stddef.h>

static bool on_progress(int32_t step, int32_t total_steps, double loss, void *user_data) {
  (void)step; (void)total_steps; (void)loss; (void)user_data;
  return true;
}

static void on_log(int level, const char *message, void *user_data) {
  (void)level; (void)message; (void)user_data;
}

int ditskip_c_header_check(const char *bundle_dir);
int ditskip_c_header_check_program(const char *pte, const char *ptd);

int ditskip_c_header_check_program(const char *pte, const char *ptd) {
  ditskip_program *program = NULL;
  const int64_t shape[2] = {2, 3};
  const float data[6] = {0, 1, 2, 3, 4, 5};
  ditskip_tensor inputs[1];
  double loss = 0;
  ditskip_status status;
  inputs[0].dtype = DITSKIP_FLOAT32;
  inputs[0].ndim = 2;
  inputs[0].shape = shape;
  inputs[0].data = data;
  status = ditskip_program_open(pte, ptd, &program);
  if (status != DITSKIP_OK) return (int)status;
  status = ditskip_program_load_method(program, NULL);
  if (status == DITSKIP_OK) status = ditskip_program_run(program, "forward", inputs, 1, &loss);
  ditskip_program_free(program);
  switch (inputs[0].dtype) {
    case DITSKIP_FLOAT32: case DITSKIP_INT8: case DITSKIP_UINT8: case DITSKIP_INT32: case DITSKIP_INT64:
    case DITSKIP_FLOAT64: case DITSKIP_BOOL: break;
  }
  return (int)status + (loss > 0);
}

int ditskip_c_header_check(const char *bundle_dir) {
  ditskip_bundle *bundle = NULL;
  ditskip_trainer *trainer = NULL;
  ditskip_train_params params = ditskip_train_default_params();
  ditskip_status status;
  int64_t anon = 0, file = 0;
  char *json;
  ditskip_train_default_params_ref(&params);
  params.progress = on_progress;
  params.progress_user_data = NULL;
  ditskip_set_log_callback(on_log, NULL);
  (void)ditskip_version();
  status = ditskip_bundle_open(bundle_dir, true, &bundle);
  if (status != DITSKIP_OK) return (int)status + (ditskip_last_error()[0] != 0);
  json = ditskip_bundle_manifest_json(bundle);
  ditskip_string_free(json);
  status = ditskip_trainer_create(bundle, &params, &trainer);
  if (status == DITSKIP_OK) {
    status = ditskip_trainer_run(trainer);
    ditskip_trainer_cancel(trainer);
    json = ditskip_trainer_summary_json(trainer);
    ditskip_string_free(json);
    ditskip_trainer_free(trainer);
  }
  ditskip_footprint(&anon, &file);
  ditskip_bundle_free(bundle);
  switch (status) {
    case DITSKIP_OK: case DITSKIP_CANCELLED: case DITSKIP_BAD_INPUT: case DITSKIP_OVER_BUDGET:
    case DITSKIP_IO_ERROR: case DITSKIP_RUNTIME_ERROR: case DITSKIP_INTERNAL_ERROR: break;
  }
  return (int)status;
}
