// The training schedule from the photos' sizes (ditskip_edge/runtime/schedule.py ScheduleConfig / check_photo_sizes /
// make_schedule / Schedule.to_json), the portable algorithm 2: the same samples as the host's and the Python
// runtime's, written as subject/schedule.json byte for byte as Schedule.save (json.dumps(to_json())). Refusals are
// schedule.py's UserError lines.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "util/json.h"

namespace ditskip {

struct ScheduleConfig {                  // schedule.py ScheduleConfig (the manifest's "schedule" record)
  int64_t steps = 100, grad_accum = 1, s_min_px = 256, s_max_px = 512, multiple_px = 16, seed = 0;
  std::string t_sampling = "uniform";
  bool dynamic_patches = true;
  static ScheduleConfig from_json(const json& record);   // ScheduleConfig(**record): an unknown key refused
  json to_json() const;                                  // asdict, in field order
  void validate() const;
  int64_t num_samples() const { return steps * grad_accum; }
};

// check_photo_sizes: short side >= max(multiple, ceil(0.5 s_min)), long / short <= 4
void check_photo_sizes(const ScheduleConfig& config, const std::vector<std::pair<int64_t, int64_t>>& sizes_hw,
                       const std::vector<std::string>& names);

// make_schedule(...).to_json(); clamped_samples is in it
json make_schedule(const ScheduleConfig& config, const std::vector<std::pair<int64_t, int64_t>>& sizes_hw,
                   const std::vector<std::string>& names);

// Schedule.save's text: json.dumps(to_json()) with the default separators
std::string schedule_text(const json& schedule);

}  // namespace ditskip
