// ptd_loader_check: runs one method of an ExecuTorch program whose constants live in an external .ptd, loading the
// .ptd either with FileDataLoader (`file`: every frozen weight copied into heap memory, what the Android
// TrainingModule JNI does) or with MmapDataLoader without mlock (`mmap`: clean file-backed pages), and prints the
// process's anonymous / file-backed resident memory as one JSON line.
//
//   ptd_loader_check PROGRAM.pte DATA.ptd file|mmap METHOD N_STEPS INPUTS_DIR
//
// INPUTS_DIR holds inputs.txt, one line per method input: `<dtype> <ndim> <d0> ... <d(ndim-1)>` (dtype: float32,
// float64, int64, int32, int8, uint8, bool), and input_<k>.bin with that input's raw little-endian bytes.
// Written against the public headers of the executorch wheel (extension/module, extension/data_loader,
// extension/tensor) only. Exit 1 and one line on stderr on any failure.
#include <executorch/extension/data_loader/file_data_loader.h>
#include <executorch/extension/data_loader/mmap_data_loader.h>
#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>

#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using executorch::aten::ScalarType;
using executorch::extension::FileDataLoader;
using executorch::extension::MmapDataLoader;
using executorch::extension::Module;
using executorch::extension::TensorPtr;
using executorch::runtime::DataLoader;
using executorch::runtime::Error;
using executorch::runtime::EValue;

namespace {

[[noreturn]] void fail(const std::string& what, Error err = Error::Ok) {
  if (err != Error::Ok)
    std::fprintf(stderr, "ptd_loader_check: %s failed: ExecuTorch error 0x%x\n", what.c_str(), (unsigned)err);
  else
    std::fprintf(stderr, "ptd_loader_check: %s\n", what.c_str());
  std::exit(1);
}

// RssAnon and RssFile of this process in KiB, from /proc/self/status.
void read_rss(long& anon_kib, long& file_kib) {
  std::ifstream f("/proc/self/status");
  std::string line;
  anon_kib = file_kib = -1;
  while (std::getline(f, line)) {
    if (line.rfind("RssAnon:", 0) == 0) anon_kib = std::atol(line.c_str() + 8);
    if (line.rfind("RssFile:", 0) == 0) file_kib = std::atol(line.c_str() + 8);
  }
  if (anon_kib < 0 || file_kib < 0) fail("cannot read RssAnon/RssFile from /proc/self/status");
}

bool dtype_of(const std::string& name, ScalarType& type, size_t& size) {
  struct Entry { const char* name; ScalarType type; size_t size; };
  static const Entry table[] = {
      {"float32", ScalarType::Float, 4}, {"float64", ScalarType::Double, 8}, {"int64", ScalarType::Long, 8},
      {"int32", ScalarType::Int, 4},     {"int8", ScalarType::Char, 1},      {"uint8", ScalarType::Byte, 1},
      {"bool", ScalarType::Bool, 1}};
  for (const auto& e : table)
    if (name == e.name) { type = e.type; size = e.size; return true; }
  return false;
}

// The method's inputs, as described by INPUTS_DIR/inputs.txt (see the header comment).
std::vector<TensorPtr> read_inputs(const std::string& dir) {
  std::ifstream spec(dir + "/inputs.txt");
  if (!spec) fail("cannot open " + dir + "/inputs.txt");
  std::vector<TensorPtr> out;
  std::string line;
  while (std::getline(spec, line)) {
    if (line.empty()) continue;
    std::istringstream ls(line);
    std::string dtype;
    int ndim = -1;
    ls >> dtype >> ndim;
    ScalarType type;
    size_t elem = 0;
    if (!dtype_of(dtype, type, elem) || ndim < 0) fail("bad line in inputs.txt: " + line);
    std::vector<executorch::aten::SizesType> sizes(ndim);
    size_t numel = 1;
    for (auto& s : sizes) {
      if (!(ls >> s) || s < 0) fail("bad shape in inputs.txt: " + line);
      numel *= size_t(s);
    }
    const std::string path = dir + "/input_" + std::to_string(out.size()) + ".bin";
    std::ifstream bin(path, std::ios::binary);
    if (!bin) fail("cannot open " + path);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(bin)), std::istreambuf_iterator<char>());
    if (bytes.size() != numel * elem)
      fail(path + ": " + std::to_string(bytes.size()) + " bytes, expected " + std::to_string(numel * elem));
    out.push_back(executorch::extension::make_tensor_ptr(std::move(sizes), std::move(bytes), {}, {}, type));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) fail("usage: ptd_loader_check PROGRAM.pte DATA.ptd file|mmap METHOD N_STEPS INPUTS_DIR");
  const std::string pte = argv[1], ptd = argv[2], loader = argv[3], method = argv[4], inputs_dir = argv[6];
  const int steps = std::atoi(argv[5]);
  if (loader != "file" && loader != "mmap") fail("loader must be file or mmap, got " + loader);
  if (steps < 1) fail("N_STEPS must be >= 1");
  struct stat st {};
  if (stat(ptd.c_str(), &st) != 0) fail("cannot stat " + ptd);

  std::vector<TensorPtr> inputs = read_inputs(inputs_dir);
  long base_anon, base_file;
  read_rss(base_anon, base_file);  // baseline: inputs read, nothing of the program loaded yet

  auto program = FileDataLoader::from(pte.c_str());
  if (!program.ok()) fail("FileDataLoader::from(" + pte + ")", program.error());
  std::unique_ptr<DataLoader> data;
  if (loader == "mmap") {
    auto r = MmapDataLoader::from(ptd.c_str(), MmapDataLoader::MlockConfig::NoMlock);
    if (!r.ok()) fail("MmapDataLoader::from(" + ptd + ")", r.error());
    data = std::make_unique<MmapDataLoader>(std::move(r.get()));
  } else {
    auto r = FileDataLoader::from(ptd.c_str());
    if (!r.ok()) fail("FileDataLoader::from(" + ptd + ")", r.error());
    data = std::make_unique<FileDataLoader>(std::move(r.get()));
  }
  Module module(std::make_unique<FileDataLoader>(std::move(program.get())), nullptr, nullptr, nullptr,
                std::move(data));
  if (Error e = module.load_method(method); e != Error::Ok) fail("load_method(" + method + ")", e);

  std::vector<EValue> args;
  for (auto& t : inputs) args.emplace_back(*t);
  double first = 0.0;
  size_t n_outputs = 0;
  for (int step = 0; step < steps; ++step) {
    auto out = module.execute(method, args);
    if (!out.ok()) fail("execute(" + method + ") step " + std::to_string(step), out.error());
    if (step > 0) continue;
    n_outputs = out.get().size();
    if (n_outputs == 0 || !out.get()[0].isTensor()) fail("first output is not a tensor");
    const auto& t0 = out.get()[0].toTensor();
    if (t0.scalar_type() != ScalarType::Float || t0.numel() < 1) fail("first output is not a non-empty float32");
    first = t0.const_data_ptr<float>()[0];
  }
  long anon, file;
  read_rss(anon, file);
  char first_json[32] = "null";  // JSON has no NaN / Inf
  if (std::isfinite(first)) std::snprintf(first_json, sizeof first_json, "%.9g", first);
  std::printf("{\"loader\": \"%s\", \"method\": \"%s\", \"steps\": %d, \"n_outputs\": %zu, \"outputs0\": %s, "
              "\"rss_anon_kib\": %ld, \"rss_file_kib\": %ld, \"baseline_rss_anon_kib\": %ld, "
              "\"baseline_rss_file_kib\": %ld, \"ptd_bytes\": %lld}\n",
              loader.c_str(), method.c_str(), steps, n_outputs, first_json, anon, file, base_anon, base_file,
              (long long)st.st_size);
  return 0;
}
