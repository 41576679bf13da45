// op_trace: runs one method of a program once with ExecuTorch's ETDump event tracer logging every operator's
// output, to find the first operator whose result differs between two machines (x86-64 and arm64 under qemu) on the
// same inputs. A diagnostic, not part of the runtime (scripts/op_diff.sh drives it; ExecuTorch's Python Inspector
// reads what it writes).
//
//   ditskip-op-trace PROGRAM.pte DATA.ptd|- METHOD INPUTS_DIR OUT_PREFIX
//
// INPUTS_DIR: device_tests/native/ptd_loader_check.cpp's format (inputs.txt: `<dtype> <ndim> <d0> ...` per input,
// input_<k>.bin raw bytes). Writes OUT_PREFIX.etdump and OUT_PREFIX.debug (the intermediate outputs' bytes).
#include <executorch/devtools/etdump/etdump_flatcc.h>
#include <executorch/extension/data_loader/mmap_data_loader.h>
#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

using executorch::aten::ScalarType;
using executorch::extension::MmapDataLoader;
using executorch::extension::Module;
using executorch::runtime::Error;
using executorch::runtime::EValue;

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "ditskip-op-trace: %s\n", what.c_str());
  std::exit(1);
}

std::unique_ptr<MmapDataLoader> map_file(const std::string& path) {
  auto r = MmapDataLoader::from(path.c_str(), MmapDataLoader::MlockConfig::NoMlock);
  if (!r.ok()) fail("cannot map " + path);
  return std::make_unique<MmapDataLoader>(std::move(r.get()));
}

void write_file(const std::string& path, const void* data, size_t size) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), std::streamsize(size));
  if (!f) fail("cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) fail("usage: ditskip-op-trace PROGRAM.pte DATA.ptd|- METHOD INPUTS_DIR OUT_PREFIX");
  const std::string pte = argv[1], ptd = argv[2], method = argv[3], dir = argv[4], out = argv[5];
  auto tracer = std::make_unique<executorch::etdump::ETDumpGen>();
  executorch::etdump::ETDumpGen* etdump = tracer.get();
  std::vector<uint8_t> debug(size_t(256) << 20);
  if (!etdump->set_debug_buffer({debug.data(), debug.size()}).ok()) fail("set_debug_buffer refused");
  etdump->set_event_tracer_debug_level(executorch::runtime::EventTracerDebugLogLevel::kIntermediateOutputs);
  Module module(map_file(pte), nullptr, nullptr, std::move(tracer), ptd == "-" ? nullptr : map_file(ptd));

  std::ifstream spec(dir + "/inputs.txt");
  if (!spec) fail("cannot open " + dir + "/inputs.txt");
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<executorch::extension::TensorPtr> tensors;
  std::string line;
  while (std::getline(spec, line)) {
    if (line.empty()) continue;
    std::istringstream ls(line);
    std::string dtype;
    int ndim = 0;
    ls >> dtype >> ndim;
    ScalarType type = dtype == "float32" ? ScalarType::Float : dtype == "int8" ? ScalarType::Char : ScalarType::Byte;
    std::vector<executorch::aten::SizesType> sizes(static_cast<size_t>(ndim), 0);
    for (auto& s : sizes) ls >> s;
    const std::string path = dir + "/input_" + std::to_string(tensors.size()) + ".bin";
    std::ifstream bin(path, std::ios::binary);
    if (!bin) fail("cannot open " + path);
    buffers.emplace_back((std::istreambuf_iterator<char>(bin)), std::istreambuf_iterator<char>());
    tensors.push_back(executorch::extension::make_tensor_ptr(std::move(sizes), buffers.back().data(), type));
  }
  std::vector<EValue> args;
  for (auto& t : tensors) args.emplace_back(*t);
  auto result = module.execute(method, args);
  if (!result.ok()) fail("execute failed: error " + std::to_string(int(result.error())));
  const float loss = result.get()[0].toTensor().const_data_ptr<float>()[0];
  executorch::etdump::ETDumpResult dump = etdump->get_etdump_data();
  if (dump.buf == nullptr) fail("no etdump data");
  write_file(out + ".etdump", dump.buf, dump.size);
  write_file(out + ".debug", debug.data(), debug.size());
  std::free(dump.buf);
  std::printf("%.9g\n", double(loss));
  return 0;
}
