// data_layer_check: the data layer's functions behind a command line, for tests/test_native_data_layer.py to compare
// with the Python runtime. Results go to stdout; a refusal goes to stderr as one line, exit code = its status.
//
//   dumps FILE [sort] [compact] [indent=N]    py_dumps of the parsed file
//   floats X...                               py_float_repr of each (parsed with strtod)
//   rng SEED N                                rng::normal(SEED, N), one float32 bit pattern (hex) a line
//   layout SPEC SHAPES_JSON                   entry_layout as {"layout": ..., "entry_bytes": ...}
//   open BUNDLE [noverify]                    opens (and verifies) a bundle; prints what it read, the identity digest
//   schedule PATH                             load_schedule; prints schedule_to_json of it
//   cache BUNDLE                              the bundle's cache, every entry read: per entry, each part's SHA-256
//   program BUNDLE NAME RUNTIME [PRECISION]   find_program
//   safetensors-roundtrip IN OUT              read_safetensors(IN), then write_safetensors(OUT)
//   photo PNG OUT                             read_photo_pixels: OUT gets the [3, H, W] float32 bytes; prints H W
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bundle/bundle.h"
#include "bundle/cache_reader.h"
#include "bundle/photos.h"
#include "bundle/rng.h"
#include "bundle/safetensors.h"
#include "bundle/schedule.h"
#include "util/failure.h"
#include "util/files.h"
#include "util/json.h"
#include "util/sha256.h"

using namespace ditskip;

namespace {

void print(const std::string& s) { std::fwrite(s.data(), 1, s.size(), stdout); std::fputc('\n', stdout); }

json shape_json(const std::vector<int64_t>& shape) {
  json j = json::array();
  for (int64_t d : shape) j.push_back(d);
  return j;
}

json specs_json(const std::vector<TensorSpec>& specs) {
  json j = json::array();
  for (const auto& s : specs) j.push_back(json{{"name", s.name}, {"shape", shape_json(s.shape)}, {"dtype", s.dtype}});
  return j;
}

json program_json(const ProgramEntry& p) {
  json trainable = json::object(), shapes = json::object();
  for (const auto& [k, v] : p.trainable) trainable[k] = v;
  for (const auto& [k, v] : p.trainable_shapes) shapes[k] = shape_json(v);
  return json{{"name", p.name}, {"runtime", p.runtime}, {"path", p.path}, {"method", p.method},
              {"precision", p.precision}, {"backend", p.backend}, {"remat", p.remat}, {"inputs", specs_json(p.inputs)},
              {"outputs", specs_json(p.outputs)}, {"trainable", trainable}, {"trainable_shapes", shapes},
              {"data", p.data}};
}

int run(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  const auto arg = [&](int k) -> std::string {
    if (k >= argc) refuse("data_layer_check " + cmd + ": missing argument " + std::to_string(k - 1));
    return argv[k];
  };
  if (cmd == "dumps") {
    PyDumps how;
    for (int k = 3; k < argc; ++k) {
      const std::string o = argv[k];
      if (o == "sort") how.sort_keys = true;
      else if (o == "compact") how.item_separator = ",", how.key_separator = ":";
      else if (o.rfind("indent=", 0) == 0) how.indent = std::atoi(o.c_str() + 7);
    }
    print(py_dumps(parse_json(read_text(arg(2)), arg(2)), how));
  } else if (cmd == "floats") {
    for (int k = 2; k < argc; ++k) print(py_float_repr(std::strtod(argv[k], nullptr)));
  } else if (cmd == "rng") {
    const uint64_t seed = std::strtoull(arg(2).c_str(), nullptr, 10);
    const int64_t n = std::strtoll(arg(3).c_str(), nullptr, 10);
    std::vector<float> out(static_cast<size_t>(n));
    rng::normal(seed, out.data(), n);
    for (float f : out) {
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      std::printf("%08x\n", bits);
    }
  } else if (cmd == "layout") {
    int64_t entry_bytes = 0;
    const auto parts = entry_layout(arg(2), parse_json(arg(3), "shapes"), entry_bytes);
    json layout = json::object();
    for (const auto& p : parts)
      layout[p.name] = json{{"dtype", p.dtype}, {"shape", shape_json(p.shape)}, {"offset", p.offset}, {"bytes", p.bytes}};
    print(py_dumps(json{{"layout", layout}, {"entry_bytes", entry_bytes}}));
  } else if (cmd == "open") {
    const Bundle b = Bundle::open(arg(2), !(argc > 3 && std::strcmp(argv[3], "noverify") == 0));
    json out = json::object();
    out["manifest_sha256"] = b.manifest_sha256();
    out["kind"] = b.kind();
    if (b.kind() == "subject") {
      const Schedule s = load_schedule(b.path(b.field({"subject_stage", "schedule"}).get<std::string>()));
      out["identity_sha256"] = identity_digest(cache_identity(b, s.raw));
      out["identity"] = cache_identity(b, s.raw);
      out["cache_mode"] = b.cache_mode();
      out["text_rows"] = b.text_rows();
      out["num_samples"] = s.num_samples();
    }
    const OptimizerSpec o = b.optimizer();
    out["optimizer"] = json{{"lr", o.lr}, {"betas", json::array({o.beta1, o.beta2})}, {"eps", o.eps},
                            {"weight_decay", o.weight_decay}, {"lr_schedule", o.lr_schedule}};
    json programs = json::array();
    for (const auto& p : b.programs()) programs.push_back(program_json(p));
    out["programs"] = programs;
    print(py_dumps(out));
  } else if (cmd == "schedule") {
    const Schedule s = load_schedule(arg(2));
    print(py_dumps(schedule_to_json(s.raw, arg(2))));
  } else if (cmd == "cache") {
    const Bundle b = Bundle::open(arg(2));
    if (b.cache_mode() == "cache-free")   // bundle.py Bundle.cache()
      refuse(b.root() + ": a cache-free bundle (no stored residuals): its residuals are computed each step by the "
             "skipped blocks' programs (runtime/inputs.py)");
    const Schedule s = load_schedule(b.path(b.field({"subject_stage", "schedule"}).get<std::string>()));
    const json identity = cache_identity(b, s.raw);
    CacheReader reader(b.path(b.field({"subject_stage", "cache"}).get<std::string>()), &identity, s.num_samples());
    json entries = json::array();
    for (int64_t k = 0; k < reader.size(); ++k) {
      const CacheEntry e = reader.read(k);
      json parts = json::object();
      for (const auto& p : reader.parts()) {
        if (e.part(p.name) != e.bytes.data() + p.offset) refuse("part() points elsewhere");
        parts[p.name] = sha256_hex(e.part(p.name), static_cast<size_t>(p.bytes));
      }
      entries.push_back(parts);
    }
    print(py_dumps(entries));
  } else if (cmd == "program") {
    const Bundle b = Bundle::open(arg(2), false);
    print(py_dumps(program_json(b.find_program(arg(3), arg(4), argc > 5 ? argv[5] : ""))));
  } else if (cmd == "safetensors-roundtrip") {
    StTensors tensors;
    StMetadata metadata;
    read_safetensors(arg(2), tensors, metadata);
    write_safetensors(arg(3), tensors, metadata);
  } else if (cmd == "photo") {
    const PhotoPixels p = read_photo_pixels(arg(2));
    atomic_write(arg(3), p.chw.data(), p.chw.size() * sizeof(float));
    std::printf("%lld %lld\n", static_cast<long long>(p.height), static_cast<long long>(p.width));
  } else {
    std::fprintf(stderr, "usage: data_layer_check dumps|floats|rng|layout|open|schedule|cache|program|"
                         "safetensors-roundtrip|photo ...\n");
    return 64;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const Failure& f) {
    std::fprintf(stderr, "%s\n", f.what());
    return static_cast<int>(f.status());
  } catch (const std::exception& e) {   // a bug: no other exception may leave the data layer
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 70;
  }
}
