// subject_check: the subject stage's data layer behind a command line, for tests/test_native_subject.py to compare
// with the Python runtime (codecs.py, schedule.py, cache.py). Results go to stdout; a refusal goes to stderr as one
// line, exit code = its status.
//
//   encode SPEC SHAPES_JSON IN OUT       IN: every tensor of SHAPES_JSON (x0 and residuals, in order) as float32;
//                                        OUT gets encode_entry's bytes (entry_layout order, padding zero); prints
//                                        {"rel_error": {residual: relative_error(decoded, residual)}}
//   norm IN                              relative_error(0, x) of IN's float32 values (||x|| / ||x||: 1.0) and
//                                        relative_error(x, 0): the norm of x as numpy computes it, float64
//   schedule CONFIG_JSON SIZES_JSON      make_schedule(config, [[h, w], ...]) -> schedule.json text; names p0, p1..
//   crop IN H W X0 Y0 SIDE OUT_PX OUT    crop_patch of IN's [3, H, W] float32 -> OUT [1, 3, OUT_PX, OUT_PX]
//   tiled IN C H W TILE STRIDE SCALE OUT encode_tiled of IN's [1, C, H, W] with a stand-in encoder (every SCALE-th
//                                        pixel of the tile, times 0.5) -> OUT [1, C, H/SCALE, W/SCALE]
//   cache DIR SPEC SHAPES_JSON IN N [STOP] [SHARD_BYTES]
//                                        a resumable CacheWriter (identity {"t": 1}, run "r") fed N entries of IN's
//                                        values (entry k: every value + k); stops without finishing after STOP new
//                                        entries (0: never)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "subject/cache_writer.h"
#include "subject/codecs.h"
#include "subject/make_schedule.h"
#include "subject/patches.h"
#include "util/failure.h"
#include "util/files.h"
#include "util/json.h"

using namespace ditskip;

namespace {

std::vector<float> floats_of(const std::string& path) {
  const std::vector<uint8_t> raw = read_bytes(path);
  std::vector<float> v(raw.size() / 4);
  if (!v.empty()) std::memcpy(v.data(), raw.data(), v.size() * 4);
  return v;
}

std::map<std::string, FloatTensor> tensors_of(const json& shapes, const std::vector<float>& values, float add) {
  std::map<std::string, FloatTensor> out;
  size_t at = 0;
  for (auto it = shapes.begin(); it != shapes.end(); ++it) {
    FloatTensor t;
    int64_t n = 1;
    for (const json& d : it.value()) t.shape.push_back(d.get<int64_t>()), n *= d.get<int64_t>();
    t.values.assign(values.begin() + long(at), values.begin() + long(at + size_t(n)));
    for (float& x : t.values) x += add;
    at += size_t(n);
    out[it.key()] = std::move(t);
  }
  if (at != values.size()) refuse("input holds " + std::to_string(values.size()) + " values, shapes " + std::to_string(at));
  return out;
}

int run(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "encode" && argc == 6) {
    const json shapes = parse_json(argv[3], "SHAPES_JSON");
    int64_t entry_bytes = 0;
    const auto layout = entry_layout(argv[2], shapes, entry_bytes);
    const auto tensors = tensors_of(shapes, floats_of(argv[4]), 0.0f);
    const std::vector<uint8_t> entry = encode_entry(layout, entry_bytes, tensors);
    atomic_write(argv[5], entry.data(), entry.size());
    json rel = json::object();
    for (auto it = shapes.begin(); it != shapes.end(); ++it) {
      if (it.key() == "x0") continue;
      const FloatTensor& t = tensors.at(it.key());
      const auto dec = decode_residual(layout, entry.data(), it.key(), t.shape);
      rel[it.key()] = relative_error(dec.data(), t.values.data(), int64_t(t.values.size()));
    }
    std::printf("%s\n", py_dumps(json{{"rel_error", rel}}).c_str());
    return 0;
  }
  if (cmd == "norm" && argc == 3) {
    const auto x = floats_of(argv[2]);
    const std::vector<float> zero(x.size(), 0.0f);
    std::printf("%s\n", py_dumps(json::array({relative_error(zero.data(), x.data(), int64_t(x.size())),
                                              relative_error(x.data(), zero.data(), int64_t(x.size()))})).c_str());
    return 0;
  }
  if (cmd == "crop" && argc == 10) {
    const std::vector<float> img = floats_of(argv[2]);
    const int64_t box[3] = {std::atoll(argv[5]), std::atoll(argv[6]), std::atoll(argv[7])};
    const FloatTensor out = crop_patch(img.data(), std::atoll(argv[3]), std::atoll(argv[4]), box, std::atoll(argv[8]));
    atomic_write(argv[9], out.values.data(), out.values.size() * 4);
    return 0;
  }
  if (cmd == "tiled" && argc == 10) {
    FloatTensor x{{1, std::atoll(argv[3]), std::atoll(argv[4]), std::atoll(argv[5])}, floats_of(argv[2])};
    const int64_t scale = std::atoll(argv[8]);
    const auto encode = [&](const std::vector<FloatTensor>& tiles) {
      std::vector<FloatTensor> out;
      for (const FloatTensor& t : tiles) {
        const int64_t C = t.shape[1], H = t.shape[2], W = t.shape[3], h = H / scale, w = W / scale;
        FloatTensor y{{1, C, h, w}, std::vector<float>(size_t(C * h * w))};
        for (int64_t c = 0; c < C; ++c)
          for (int64_t i = 0; i < h; ++i)
            for (int64_t j = 0; j < w; ++j)
              y.values[size_t((c * h + i) * w + j)] = t.values[size_t((c * H + i * scale) * W + j * scale)] * 0.5f;
        out.push_back(std::move(y));
      }
      return out;
    };
    const FloatTensor out = encode_tiled(x, std::atoll(argv[6]), std::atoll(argv[7]), scale, encode);
    atomic_write(argv[9], out.values.data(), out.values.size() * 4);
    return 0;
  }
  if (cmd == "schedule" && argc == 4) {
    const ScheduleConfig c = ScheduleConfig::from_json(parse_json(argv[2], "CONFIG_JSON"));
    std::vector<std::pair<int64_t, int64_t>> sizes;
    std::vector<std::string> names;
    for (const json& s : parse_json(argv[3], "SIZES_JSON")) {
      sizes.emplace_back(s[0].get<int64_t>(), s[1].get<int64_t>());
      names.push_back("p" + std::to_string(names.size()));
    }
    std::printf("%s\n", schedule_text(make_schedule(c, sizes, names)).c_str());
    return 0;
  }
  if (cmd == "cache" && argc >= 7) {
    const json shapes = parse_json(argv[4], "SHAPES_JSON");
    const std::vector<float> values = floats_of(argv[5]);
    const int64_t n = std::atoll(argv[6]), stop = argc > 7 ? std::atoll(argv[7]) : 0;
    const int64_t shard = argc > 8 ? std::atoll(argv[8]) : kDefaultShardBytes;
    CacheWriter w(argv[2], json{{"t", 1}}, argv[3], shard, "r");
    w.set_shapes(shapes);
    int64_t added = 0;
    for (int64_t k = w.next_index(); k < n; ++k) {
      const auto tensors = tensors_of(shapes, values, float(k));
      w.add(k, encode_entry(w.layout(), w.entry_bytes(), tensors), json{{"k", k}});
      if (stop > 0 && ++added >= stop && w.next_index() < n) {
        w.close();
        std::printf("stopped %lld\n", static_cast<long long>(w.next_index()));
        return 0;
      }
    }
    w.finish(json{{"note", "done"}});
    std::printf("finished %lld\n", static_cast<long long>(n));
    return 0;
  }
  std::fprintf(stderr, "usage: subject_check encode|norm|schedule|cache ... (see the header)\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const Failure& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return int(e.status());
  }
}
