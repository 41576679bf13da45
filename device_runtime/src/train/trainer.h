// The training loop (ditskip_edge/runtime/loop.py train, run.py train_bundle), line for line:
//
//     program = TrainProgram(bundle, find_program("train_step", "executorch", precision))
//     program.forward_backward(inputs(samples[0]))          # the parameters exist after one run
//     resume from RUN/checkpoint.safetensors when it is this run's (checkpoint.py identity)
//     for step in [start, total):                           # one optimizer step = grad_accum scheduled samples
//         grads = 0; for sample: loss = forward_backward(inputs(sample)); grads += g / accum; step_loss += loss / accum
//         adamw.set_lr(lr_at(step, schedule steps)); adamw.step(parameters in place, grads)
//         footprint; budget; progress (may cancel); checkpoint every N, at the end, at stop_after / cancel
//     LoRA -> RUN/lora/<lora_file.name>, summary -> RUN/summary.json
//
// Stored-cache bundles only (x0-only / cache-free ones need the subject stage's forward programs: refused).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bundle/bundle.h"
#include "bundle/schedule.h"
#include "ditskip/ditskip.h"
#include "train/adamw.h"
#include "train/footprint.h"
#include "train/preprocess.h"
#include "train/step_inputs.h"
#include "train/train_program.h"

namespace ditskip {

struct TrainConfig {
  std::string run_dir;               // empty: BUNDLE/runs/executorch
  std::string precision;             // empty: the first train_step program listed
  int steps = -1;                    // -1: the whole schedule; else 1 .. the schedule's steps
  int checkpoint_every = 50;
  bool resume = true;
  bool device_preprocess = false;
  int stop_after = 0;                // 0: never
  int64_t budget_anon_bytes = 0;     // 0: none
  std::function<bool(int step, int total, double loss)> progress;   // false: cancel
};

class Trainer {
 public:
  static constexpr const char* kRuntime = "executorch";

  // Loads the program, runs it once (the parameters exist after one run) and resumes the run's checkpoint.
  Trainer(const Bundle& bundle, TrainConfig cfg);
  ~Trainer();

  // DITSKIP_OK (done, or stopped at stop_after) or DITSKIP_CANCELLED; throws Failure (DITSKIP_OVER_BUDGET, ...)
  ditskip_status run();
  void cancel() { cancel_.store(true); }
  const json& summary() const { return summary_; }

 private:
  void checkpoint(int64_t step) const;
  void check_budget(const Footprint& now, const std::string& when) const;
  json interrupted(int64_t step) const;
  json with_run_fields(json summary) const;

  const Bundle& bundle_;
  TrainConfig cfg_;
  ProgramEntry entry_;
  Schedule schedule_;
  OptimizerSpec optimizer_spec_;
  std::unique_ptr<TrainProgram> program_;
  std::unique_ptr<Preprocessor> preprocess_;
  std::unique_ptr<StepInputs> inputs_;
  std::unique_ptr<AdamW> adamw_;
  std::string identity_, run_dir_;
  int total_ = 0;
  int64_t start_ = 0;
  std::vector<double> losses_;
  std::atomic<bool> cancel_{false};
  bool ran_ = false;
  json summary_;
};

}  // namespace ditskip
