/* ditskip.h: the device runtime's one C boundary. The command-line runner (ditskip-run), the Android JNI library,
 * the Swift module and Python (ctypes) all call these functions and nothing else of the core.
 *
 * Shape (after llama.cpp's llama.h and ExecuTorch's runner): opaque handles with create/free pairs, a
 * *_default_params() function for every params struct (and a by-pointer twin for bindings that cannot take structs
 * by value), integer status codes, a per-handle last-error message, callbacks as a function pointer plus user data
 * (a progress callback returning false cancels), nothing written to stdout. Handles are not thread-safe: a binding
 * serializes its calls (ditskip_trainer_cancel is the one call that may come from another thread).
 *
 * Strings are UTF-8. Every `char *` the library returns is owned by the caller and freed with ditskip_string_free.
 */
#ifndef DITSKIP_H
#define DITSKIP_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define DITSKIP_API __declspec(dllexport)
#else
#define DITSKIP_API __attribute__((visibility("default")))
#endif

/* Status codes. The CLI's exit code is the status for the first four. */
typedef enum {
  DITSKIP_OK = 0,
  DITSKIP_CANCELLED = 1,      /* the progress callback returned false, or ditskip_trainer_cancel was called */
  DITSKIP_BAD_INPUT = 2,      /* a user mistake, or a bundle / checkpoint that does not match its manifest */
  DITSKIP_OVER_BUDGET = 3,    /* the process's RssAnon passed the footprint budget; the checkpoint is untouched */
  DITSKIP_IO_ERROR = 4,       /* a file could not be read or written */
  DITSKIP_RUNTIME_ERROR = 5,  /* ExecuTorch refused or failed a call */
  DITSKIP_INTERNAL_ERROR = 6  /* a bug: please report it with the message */
} ditskip_status;

/* The last error message of this thread (empty when the last call succeeded). Valid until the next call. */
DITSKIP_API const char *ditskip_last_error(void);

/* Log sink: the library's messages (warnings, info). Default: stderr. level 0 info, 1 warning. */
typedef void (*ditskip_log_callback)(int level, const char *message, void *user_data);
DITSKIP_API void ditskip_set_log_callback(ditskip_log_callback callback, void *user_data);

DITSKIP_API void ditskip_string_free(char *s);
DITSKIP_API const char *ditskip_version(void);

/* The CPU threads the kernels and XNNPACK run on: one pool for the process (ExecuTorch's). Default: one per core.
 * Set it before creating trainers or starting a stage (programs keep the pool they were loaded with); 1 .. 1024,
 * else DITSKIP_BAD_INPUT. */
DITSKIP_API ditskip_status ditskip_set_threads(int32_t threads);
DITSKIP_API int32_t ditskip_threads(void);

/* ------------------------------------------------------------------------------------------------ bundles */
typedef struct ditskip_bundle ditskip_bundle;

/* Opens a bundle folder: checks the manifest's own digest, its format, and every listed file's size and SHA-256
 * (verify_files = false skips the file hashes: only for a caller that verified them itself). */
DITSKIP_API ditskip_status ditskip_bundle_open(const char *bundle_dir, bool verify_files, ditskip_bundle **out);
DITSKIP_API void ditskip_bundle_free(ditskip_bundle *bundle);
/* The verified manifest as JSON (without its digest line), caller frees. */
DITSKIP_API char *ditskip_bundle_manifest_json(const ditskip_bundle *bundle);

/* ------------------------------------------------------------------------------------------------ training */
typedef struct ditskip_trainer ditskip_trainer;

/* Called after every optimizer step: step (1-based, of the whole schedule), total steps, that step's loss.
 * Return false to stop: the run checkpoints the steps done and returns DITSKIP_CANCELLED. */
typedef bool (*ditskip_progress_callback)(int32_t step, int32_t total_steps, double loss, void *user_data);

typedef struct {
  const char *run_dir;          /* checkpoint, LoRA and summary go here; NULL: BUNDLE/runs/executorch */
  const char *precision;        /* which train_step program: "fp32" | "int8" | "int4"; NULL: the first listed */
  int32_t steps;                /* train the first N optimizer steps of the schedule (1 .. its steps); -1: all */
  int32_t checkpoint_every;     /* optimizer steps between checkpoints (>= 1) */
  bool resume;                  /* continue from RUN_DIR/checkpoint.safetensors when it is this run's */
  bool device_preprocess;       /* x0 from the bundle's photos with its preprocess programs instead of the cache */
  int32_t stop_after;           /* stop (as if interrupted) after this many steps in this call; 0: never (tests) */
  int64_t budget_anon_bytes;    /* stop with DITSKIP_OVER_BUDGET when this process's RssAnon passes it; 0: none */
  ditskip_progress_callback progress;
  void *progress_user_data;
} ditskip_train_params;

DITSKIP_API ditskip_train_params ditskip_train_default_params(void);
DITSKIP_API void ditskip_train_default_params_ref(ditskip_train_params *params);

/* Loads the train_step program (its .pte and .ptd memory-mapped, not locked) and the run's checkpoint. The bundle
 * must outlive the trainer. */
DITSKIP_API ditskip_status ditskip_trainer_create(ditskip_bundle *bundle, const ditskip_train_params *params,
                                                  ditskip_trainer **out);
/* Runs the schedule's remaining steps (checkpointing every checkpoint_every and at the end) and writes the LoRA
 * (RUN_DIR/lora/<name>.safetensors, as diffusers' load_lora_weights reads it) and RUN_DIR/summary.json. */
DITSKIP_API ditskip_status ditskip_trainer_run(ditskip_trainer *trainer);
/* The run's summary: the JSON `python -m ditskip_edge.runtime train --json` prints. Caller frees. */
DITSKIP_API char *ditskip_trainer_summary_json(const ditskip_trainer *trainer);
/* Asks a running ditskip_trainer_run to stop after the current step. Thread-safe. */
DITSKIP_API void ditskip_trainer_cancel(ditskip_trainer *trainer);
DITSKIP_API void ditskip_trainer_free(ditskip_trainer *trainer);

/* ------------------------------------------------------------------------------------------------ long stages */
/* Progress of the subject stage and of generation: `stage` names the part running ("subject stage (residual
 * cache)", "generate", "decode"), `done` of `total` units (cache entries, sampler steps, tiles). Return false to
 * stop: the call returns DITSKIP_CANCELLED with everything durable kept (a subject stage resumes from it). */
typedef bool (*ditskip_stage_callback)(const char *stage, int32_t done, int32_t total, void *user_data);

/* ------------------------------------------------------------------------------------------------ subject stage */
typedef struct {
  const char *out_dir;          /* the subject bundle to write; NULL: MODEL_BUNDLE-subject beside the model bundle */
  const char *prompt;           /* one of the model bundle's prompts; NULL: its first */
  const char *cache_mode;       /* "stored" | "x0-only" | "cache-free"; NULL: "stored" */
  bool resume;                  /* continue an interrupted run of the same inputs (true); false starts over */
  bool overwrite;               /* replace out_dir if it exists */
  bool keep_blocks;             /* keep every block program loaded (faster; every block's arena at once) */
  int32_t stop_after;           /* stop (as if interrupted) after this many new cache entries; 0: never (tests) */
  ditskip_stage_callback progress;
  void *progress_user_data;
} ditskip_personalize_params;

DITSKIP_API ditskip_personalize_params ditskip_personalize_default_params(void);
DITSKIP_API void ditskip_personalize_default_params_ref(ditskip_personalize_params *params);

/* The subject stage on the device: a model bundle and a folder of the subject's photos -> a subject bundle that
 * ditskip_trainer_* trains (the photos never leave the device). Refuses bad input before any work (unreadable or too
 * few photos, a subject bundle given as the model bundle, programs of another model, a prompt the bundle lacks). A
 * run stopped at any point (kill, cancel, stop_after) continues where it stopped when called again with the same
 * inputs. *summary_json (may be NULL; caller frees) gets the JSON `python -m ditskip_edge.runtime personalize
 * --no-train --json` prints under "subject_stage". */
DITSKIP_API ditskip_status ditskip_personalize(const char *model_bundle_dir, const char *photos_dir,
                                               const ditskip_personalize_params *params, char **summary_json);

/* ------------------------------------------------------------------------------------------------ generation */
typedef struct {
  const char *prompt;           /* required, UTF-8 */
  uint64_t seed;                /* 0 <= seed < 2^63 */
  int32_t steps;                /* sampler steps (1 .. 1000); -1: the bundle's default */
  double guidance;              /* classifier-free guidance in [0, 100]; NaN: the bundle's default */
  const char *lora;             /* the trained LoRA file or its folder; NULL: the base model */
  const char *precision;        /* which generation programs: "fp32" | "int8" | "int4"; NULL: the first listed */
  const char *out_png;          /* required: the PNG to write (written whole or not at all) */
  ditskip_stage_callback progress;
  void *progress_user_data;
} ditskip_generate_params;

DITSKIP_API ditskip_generate_params ditskip_generate_default_params(void);
DITSKIP_API void ditskip_generate_default_params_ref(ditskip_generate_params *params);

/* A picture from a prompt with the bundle's generation programs and, if given, the trained LoRA (merged once at the
 * weights' bit width into a file beside it). *summary_json (may be NULL; caller frees) gets the JSON `python -m
 * ditskip_edge.runtime generate --json` prints. */
DITSKIP_API ditskip_status ditskip_generate(const char *bundle_dir, const ditskip_generate_params *params,
                                            char **summary_json);

/* ------------------------------------------------------------------------------------------------ raw programs */
/* One ExecuTorch program run as it is, without a bundle (benchmarks, speed checks on a handset): its .pte and
 * optional .ptd memory-mapped (not locked, not copied), a method called on caller-owned inputs. */
typedef struct ditskip_program ditskip_program;

typedef enum {
  DITSKIP_FLOAT32 = 0,
  DITSKIP_INT8 = 1,
  DITSKIP_UINT8 = 2,
  DITSKIP_INT32 = 3,
  DITSKIP_INT64 = 4,
  DITSKIP_FLOAT64 = 5,
  DITSKIP_BOOL = 6            /* one byte per element, 0 or 1 */
} ditskip_dtype;

/* A view of caller-owned memory: ndim sizes in shape, numel * the dtype's size bytes (little-endian, contiguous) in
 * data. The library reads it during ditskip_program_run only and never keeps or frees it. */
typedef struct {
  ditskip_dtype dtype;
  int32_t ndim;
  const int64_t *shape;
  const void *data;
} ditskip_tensor;

/* Opens the program (ptd_path NULL: no external data file); its methods are loaded on first use. */
DITSKIP_API ditskip_status ditskip_program_open(const char *pte_path, const char *ptd_path, ditskip_program **out);
/* Loads a method now (its memory arena, the delegates' packed weights) so that the first run is a step alone.
 * method NULL: "forward". Optional: ditskip_program_run loads a method it has not. */
DITSKIP_API ditskip_status ditskip_program_load_method(ditskip_program *program, const char *method);
/* Runs `method` (NULL: "forward") on n_inputs inputs in the method's order; the first element of output 0 as a
 * double in *first_output (may be NULL), e.g. a training step's loss. Outputs stay in the program's memory. */
DITSKIP_API ditskip_status ditskip_program_run(ditskip_program *program, const char *method,
                                               const ditskip_tensor *inputs, int32_t n_inputs, double *first_output);
DITSKIP_API void ditskip_program_free(ditskip_program *program);

/* ------------------------------------------------------------------------------------------------ footprint */
/* This process's resident memory as a phone counts it: RssAnon (dirty anonymous) and RssFile (file-backed), bytes;
 * -1 where the platform does not report it. */
DITSKIP_API void ditskip_footprint(int64_t *rss_anon_bytes, int64_t *rss_file_bytes);

#ifdef __cplusplus
}
#endif
#endif /* DITSKIP_H */
