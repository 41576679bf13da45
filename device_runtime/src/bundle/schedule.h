// The training schedule (ditskip_edge/runtime/schedule.py), read from the bundle's subject/schedule.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/json.h"

namespace ditskip {

struct Sample {
  int64_t index = 0;
  int photo = 0;                 // index into the bundle's photos
  double t = 0;                  // rectified-flow time
  int64_t crop_box[3] = {0, 0, 0};   // x0_px, y0_px, side_px
  uint64_t noise_seed = 0;
};

struct Schedule {
  int steps = 0, grad_accum = 1;
  std::vector<std::string> photo_names;
  std::vector<Sample> samples;
  json raw;                      // the file as parsed (the cache identity hashes it)
  // samples[step * grad_accum, (step + 1) * grad_accum)
  const Sample* samples_for_step(int step) const { return samples.data() + int64_t(step) * grad_accum; }
  int num_samples() const { return int(samples.size()); }
};

// schedule.py Schedule.load: sample_fields and algorithm checked; refusals "<path>: not a readable schedule (...)"
Schedule load_schedule(const std::string& path);
// Schedule.from_json(d).to_json() of a parsed schedule.json (what cache_identity hashes): config completed with
// ScheduleConfig's defaults, t as float, noise_seed as int, keys in to_json's order. Refuses as load_schedule does.
json schedule_to_json(const json& parsed, const std::string& where = "subject/schedule.json");

}  // namespace ditskip
