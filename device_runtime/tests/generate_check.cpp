// generate_check: the generation data layer (src/generate) behind a command line, for tests/test_native_generate.py to
// compare with the Python runtime's numpy (sampler.py, hash_text.py, weights.py). Results go to stdout; a refusal goes
// to stderr as one line, exit code = its status.
//
//   sigmas STEPS SHIFT DYNAMIC MU TYPE        sampler sigmas (DYNAMIC 0/1, MU "none" or a number): float32 bits (hex)
//   words PROMPT                              hash_text words, one a line
//   quantize PRECISION O I GROUP IN OUT       quantize_linear of IN's float32 [O, I]: OUT gets each state's bytes in
//                                             key order; prints "key dtype shape" a line
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "generate/hash_text.h"
#include "generate/sampler.h"
#include "generate/weights.h"
#include "util/failure.h"
#include "util/files.h"
#include "util/json.h"

using namespace ditskip;

int main(int argc, char** argv) {
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "sigmas" && argc == 7) {
      const json mu = std::strcmp(argv[5], "none") == 0 ? json() : json(std::strtod(argv[5], nullptr));
      for (float s : generate::sigmas(std::atoi(argv[2]), std::strtod(argv[3], nullptr), std::atoi(argv[4]) != 0, mu,
                                      argv[6])) {
        uint32_t bits;
        std::memcpy(&bits, &s, 4);
        std::printf("%08" PRIx32 "\n", bits);
      }
      return 0;
    }
    if (cmd == "words" && argc == 3) {
      for (const std::string& w : generate::hash_text::words(argv[2])) std::printf("%s\n", w.c_str());
      return 0;
    }
    if (cmd == "quantize" && argc == 8) {
      const int64_t o = std::atoll(argv[3]), in = std::atoll(argv[4]);
      const std::vector<uint8_t> raw = read_bytes(argv[6]);
      std::vector<float> w(size_t(o * in));
      if (raw.size() != w.size() * 4) refuse(std::string(argv[6]) + ": not float32 [O, I]");
      std::memcpy(w.data(), raw.data(), raw.size());
      std::string out;
      for (const auto& [key, t] : generate::quantize_linear(w, o, in, argv[2], std::atoll(argv[5]))) {
        out.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
        std::string shape;
        for (int64_t d : t.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
        std::printf("%s %s %s\n", key.c_str(), t.dtype.c_str(), shape.c_str());
      }
      atomic_write(argv[7], out);
      return 0;
    }
    std::fprintf(stderr, "usage: generate_check sigmas STEPS SHIFT DYNAMIC MU TYPE | words PROMPT | "
                         "quantize PRECISION O I GROUP IN OUT\n");
    return 2;
  } catch (const Failure& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return int(e.status());
  }
}
