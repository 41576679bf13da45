// ditskip_edge/runtime/schedule.py's schedule from the photos' sizes (see make_schedule.h).
#include "subject/make_schedule.h"

#include <cmath>
#include <cstdio>

#include "bundle/rng.h"
#include "util/failure.h"

namespace ditskip {
namespace {

constexpr int64_t kMaxSteps = 100000, kMaxGradAccum = 256, kMaxSamples = 1000000, kMaxCropPx = 8192;
constexpr int64_t kMaxSeed = INT64_MAX;
constexpr double kMaxAspect = 4.0, kMinShortFraction = 0.5;
constexpr double kTLow = 1e-4, kTHigh = 1 - 1e-4;
constexpr int kAlgorithm = 2;
constexpr int64_t kSampleDraws = 8;
constexpr uint64_t kShuffleBase = uint64_t(1) << 40;

void in_range(const char* name, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi)
    refuse(std::string(name) + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
           "], got " + std::to_string(value));
}

// Python's f"{x:.1f}"
std::string fixed1(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f", x);
  return buf;
}

// Python's round(x) (half to even) of a double
int64_t py_round(double x) {
  const double r = std::nearbyint(x);
  return int64_t(r);
}

std::vector<int> photo_order(uint64_t seed, int64_t epoch, int num_photos) {
  std::vector<int> order(static_cast<size_t>(num_photos));
  for (int i = 0; i < num_photos; ++i) order[size_t(i)] = i;
  if (num_photos > 1) {
    const uint64_t base = kShuffleBase + uint64_t(epoch) * uint64_t(num_photos);
    int m = 0;
    for (int i = num_photos - 1; i > 0; --i, ++m) {
      const double u = rng::uniform(seed, base + uint64_t(m));
      const int r = int(std::min<int64_t>(int64_t(std::floor(u * (i + 1))), i));
      std::swap(order[size_t(i)], order[size_t(r)]);
    }
  }
  return order;
}

}  // namespace

ScheduleConfig ScheduleConfig::from_json(const json& record) {
  ScheduleConfig c;
  if (!record.is_object()) refuse("manifest schedule: expected an object, got " + py_repr(record));
  for (auto it = record.begin(); it != record.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    const auto int_of = [&]() -> int64_t {
      if (!v.is_number_integer()) refuse("manifest schedule." + k + ": expected an integer, got " + py_repr(v));
      return v.get<int64_t>();
    };
    if (k == "steps") c.steps = int_of();
    else if (k == "grad_accum") c.grad_accum = int_of();
    else if (k == "s_min_px") c.s_min_px = int_of();
    else if (k == "s_max_px") c.s_max_px = int_of();
    else if (k == "multiple_px") c.multiple_px = int_of();
    else if (k == "seed") c.seed = int_of();
    else if (k == "t_sampling") c.t_sampling = v.is_string() ? v.get<std::string>() : py_repr(v);
    else if (k == "dynamic_patches") c.dynamic_patches = v.is_boolean() ? v.get<bool>() : !v.is_null() && v != json(0);
    else refuse("ScheduleConfig.__init__() got an unexpected keyword argument " + py_repr(json(k)));
  }
  return c;
}

json ScheduleConfig::to_json() const {
  json j = json::object();
  j["steps"] = steps;
  j["grad_accum"] = grad_accum;
  j["s_min_px"] = s_min_px;
  j["s_max_px"] = s_max_px;
  j["multiple_px"] = multiple_px;
  j["seed"] = seed;
  j["t_sampling"] = t_sampling;
  j["dynamic_patches"] = dynamic_patches;
  return j;
}

void ScheduleConfig::validate() const {
  in_range("steps", steps, 1, kMaxSteps);
  in_range("grad-accum", grad_accum, 1, kMaxGradAccum);
  if (steps * grad_accum > kMaxSamples)
    refuse("steps x grad-accum = " + std::to_string(steps * grad_accum) + " samples: at most " +
           std::to_string(kMaxSamples) + " (each sample is one residual-cache entry)");
  in_range("seed", seed, 0, kMaxSeed);
  if (multiple_px < 1) refuse("pixel multiple must be >= 1, got " + std::to_string(multiple_px));
  if (!(multiple_px <= s_min_px && s_min_px <= kMaxCropPx) || s_min_px % multiple_px)
    refuse("crop-min " + std::to_string(s_min_px) + " px must be a multiple of " + std::to_string(multiple_px) +
           " in [" + std::to_string(multiple_px) + ", " + std::to_string(kMaxCropPx) + "]");
  if (!(s_min_px <= s_max_px && s_max_px <= kMaxCropPx))
    refuse("crop-max " + std::to_string(s_max_px) + " px must be in [crop-min " + std::to_string(s_min_px) + ", " +
           std::to_string(kMaxCropPx) + "]");
  if (t_sampling != "uniform" && t_sampling != "logit_normal")
    refuse("t_sampling must be 'uniform' or 'logit_normal', got " + py_repr(json(t_sampling)));
}

void check_photo_sizes(const ScheduleConfig& config, const std::vector<std::pair<int64_t, int64_t>>& sizes_hw,
                       const std::vector<std::string>& names) {
  const int64_t min_short = std::max<int64_t>(config.multiple_px, int64_t(std::ceil(kMinShortFraction * config.s_min_px)));
  for (size_t i = 0; i < sizes_hw.size() && i < names.size(); ++i) {
    const int64_t h = sizes_hw[i].first, w = sizes_hw[i].second;
    const int64_t shrt = std::min(h, w), lng = std::max(h, w);
    const std::string size = std::to_string(w) + "x" + std::to_string(h);
    if (shrt < min_short)
      refuse("photo " + names[i] + " is " + size + " px: its short side must be at least " + std::to_string(min_short) +
             " px (half the train resolution " + std::to_string(config.s_min_px) + " px)");
    if (double(lng) > kMaxAspect * double(shrt))
      refuse("photo " + names[i] + " is " + size + " px: aspect ratio " + fixed1(double(lng) / double(shrt)) +
             ":1 is beyond 4:1; crop it first");
  }
}

json make_schedule(const ScheduleConfig& config, const std::vector<std::pair<int64_t, int64_t>>& sizes_hw,
                   const std::vector<std::string>& names) {
  config.validate();
  if (sizes_hw.empty()) refuse("a schedule needs at least one photo");
  check_photo_sizes(config, sizes_hw, names);
  const int64_t n = config.num_samples();
  const int num_photos = int(sizes_hw.size());
  const uint64_t seed = uint64_t(config.seed);
  json samples = json::array();
  int64_t clamped = 0;
  std::vector<int> order;
  for (int64_t k = 0; k < n; ++k) {
    if (k % num_photos == 0) order = photo_order(seed, k / num_photos, num_photos);
    const int p = order[size_t(k % num_photos)];
    const int64_t h = sizes_hw[size_t(p)].first, w = sizes_hw[size_t(p)].second;
    const uint64_t c = uint64_t(kSampleDraws * k);
    const double u0 = rng::uniform(seed, c), u1 = rng::uniform(seed, c + 1);
    double t;
    if (config.t_sampling == "logit_normal") {
      const double z = std::sqrt(-2.0 * std::log(u0)) * std::cos(2.0 * M_PI * u1);
      t = 1.0 / (1.0 + std::exp(-z));
    } else {
      t = u0;
    }
    t = std::min(std::max(t, kTLow), kTHigh);
    const uint64_t noise_seed = rng::word(seed, c + 4) >> 1;
    int64_t side, x0, y0;
    bool was_clamped = false;
    if (config.dynamic_patches) {
      const int64_t short_side = std::min(h, w);
      const int64_t limit = (short_side / config.multiple_px) * config.multiple_px;
      if (limit < config.multiple_px) refuse("a photo cannot hold a crop");
      const double raw = double(config.s_min_px) + t * double(config.s_max_px - config.s_min_px);
      side = py_round(raw / double(config.multiple_px)) * config.multiple_px;
      side = std::max(config.s_min_px, std::min(side, config.s_max_px));
      if (side > limit) side = limit, was_clamped = true;
      const double ux = rng::uniform(seed, c + 2), uy = rng::uniform(seed, c + 3);
      x0 = std::min(int64_t(std::floor(ux * double(w - side + 1))), w - side);
      y0 = std::min(int64_t(std::floor(uy * double(h - side + 1))), h - side);
    } else {
      side = std::min(h, w);
      x0 = (w - side) / 2;
      y0 = (h - side) / 2;
    }
    clamped += was_clamped;
    samples.push_back(json::array({k, p, t, json::array({x0, y0, side}), noise_seed}));
  }
  json out = json::object();
  out["algorithm"] = kAlgorithm;
  out["config"] = config.to_json();
  json photo_names = json::array();
  for (const auto& s : names) photo_names.push_back(s);
  out["photo_names"] = photo_names;
  out["clamped_samples"] = clamped;
  out["samples"] = std::move(samples);
  out["sample_fields"] = json::array({"index", "photo", "t", "crop_box", "noise_seed"});
  return out;
}

std::string schedule_text(const json& schedule) { return py_dumps(schedule); }

}  // namespace ditskip
