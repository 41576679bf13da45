// ditskip-run: the native device runtime from the command line, through the C header alone (what an app binds).
//
//     ditskip-run train BUNDLE [--runtime executorch] [--precision fp32|int8|int4] [--run-dir D] [--steps N]
//                       [--checkpoint-every N] [--no-resume] [--device-preprocess] [--budget-mib N] [--json]
//     ditskip-run step PROGRAM.pte [--data D.ptd] --inputs DIR [--steps N] [--method forward] [--json]
//     ditskip-run footprint [--json]
//     ditskip-run --version
// Every verb but footprint also takes --threads N: the CPU threads its kernels and XNNPACK run on (default: one per
// core, ExecuTorch's choice).
//
// train behaves as `python -m ditskip_edge.runtime train` (ditskip_edge/runtime/__main__.py): --json prints the
// summary as one JSON document on stdout, otherwise one line; a progress bar on stderr (DITSKIP_PROGRESS=0 turns it
// off); a user mistake or a refused bundle is one line `ditskip-run train: error: ...` on stderr and exit code 2; over
// the footprint budget exit 3; Ctrl-C stops after the current step with the steps done checkpointed (exit 1).
//
// step runs one program as it is, without a bundle (benchmarks, speed checks on a handset): N calls of METHOD on the
// inputs in DIR (inputs.txt, one line per input `<dtype> <ndim> <d0> ... <d(ndim-1)>`, and input_<k>.bin with its
// raw little-endian bytes: device_tests/native_ptd.py write_inputs), no optimizer. It reports output 0's first
// element (a training step's loss), wall and CPU seconds per step (medians of the steps after the first; CPU: the
// whole process, all threads) and this process's RssAnon / RssFile at start (nothing loaded), with the inputs read,
// after loading the program and its method, and after each step.
//
// footprint reports this process's RssAnon / RssFile with the core and ExecuTorch's libraries loaded and nothing
// else: the runtime's fixed cost.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ditskip/ditskip.h"
#include "ditskip_run_common.h"

namespace {

// progress.py Progress: "\r<label> [####      ] done/total loss L rate/s" on stderr
struct Bar {
  bool enabled = true;
  bool shown = false;
  int first = -1;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
};

bool on_progress(int32_t step, int32_t total, double loss, void* user_data) {
  Bar& bar = *static_cast<Bar*>(user_data);
  if (bar.first < 0) bar.first = step - 1;
  if (!bar.enabled) return true;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - bar.t0).count();
  const double rate = (step - bar.first) / (elapsed > 1e-9 ? elapsed : 1e-9);
  std::string hashes(size_t(30 * step / (total > 1 ? total : 1)), '#');
  std::fprintf(stderr, "\rtrain (executorch) [%-30s] %d/%d loss %.4f %.2f/s", hashes.c_str(), step, total, loss, rate);
  std::fflush(stderr);
  bar.shown = true;
  return true;
}

ditskip_trainer* volatile running = nullptr;

void on_sigint(int) {
  if (running != nullptr) ditskip_trainer_cancel(running);
}


int train(int argc, char** argv) {
  const std::string verb = "train";
  std::string bundle_dir, run_dir, precision;
  long long steps = -1, checkpoint_every = 50, stop_after = 0;
  double budget_mib = 0;
  bool resume = true, device_preprocess = false, as_json = false;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) return nullptr;
      (void)flag;
      return argv[++i];
    };
    if (a == "--runtime" || a == "--precision" || a == "--run-dir" || a == "--steps" || a == "--checkpoint-every" ||
        a == "--budget-mib" || a == "--stop-after") {
      const char* v = value(a.c_str());
      if (v == nullptr) return usage_error(verb, "argument " + a + ": expected one argument");
      long long n = 0;
      if (a == "--runtime") {
        if (std::strcmp(v, "executorch") != 0) {
          if (std::strcmp(v, "ort") == 0) {
            std::fprintf(stderr, "ditskip-run train: error: --runtime ort: the native core runs executorch programs "
                                 "only (python -m ditskip_edge.runtime train --runtime ort runs ONNX Runtime)\n");
            return 2;
          }
          return usage_error(verb, std::string("argument --runtime: invalid choice: '") + v +
                                       "' (choose from 'executorch', 'ort')");
        }
      } else if (a == "--precision") {
        if (std::strcmp(v, "fp32") != 0 && std::strcmp(v, "int8") != 0 && std::strcmp(v, "int4") != 0)
          return usage_error(verb, std::string("argument --precision: invalid choice: '") + v +
                                       "' (choose from 'fp32', 'int8', 'int4')");
        precision = v;
      } else if (a == "--run-dir") {
        run_dir = v;
      } else if (a == "--budget-mib") {
        char* end = nullptr;
        budget_mib = std::strtod(v, &end);
        if (end == v || *end != '\0' || !(budget_mib > 0))
          return usage_error(verb, std::string("argument --budget-mib: expected a positive number of MiB, got '") + v + "'");
      } else if (!parse_int(v, n)) {
        return usage_error(verb, "argument " + a + ": invalid int value: '" + v + "'");
      } else if (a == "--steps") {
        steps = n;        // checked against the bundle's schedule by the core (the Python runtime's message)
      } else if (a == "--checkpoint-every") {
        checkpoint_every = n;
      } else {
        stop_after = n;
      }
    } else if (a == "--no-resume") {
      resume = false;
    } else if (a == "--device-preprocess") {
      device_preprocess = true;
    } else if (int rc = common_arg(a, bundle_dir, as_json); rc >= 0) {
      return rc;
    }
  }
  if (bundle_dir.empty()) return usage_error(verb, "the following arguments are required: bundle");
  if (checkpoint_every < 1) {
    std::fprintf(stderr, "ditskip-run train: error: --checkpoint-every %lld: expected >= 1\n", checkpoint_every);
    return 2;
  }

  Bar bar;
  const char* env = std::getenv("DITSKIP_PROGRESS");
  bar.enabled = env == nullptr || std::strcmp(env, "0") != 0;
  ditskip_train_params params = ditskip_train_default_params();
  params.run_dir = run_dir.empty() ? nullptr : run_dir.c_str();
  params.precision = precision.empty() ? nullptr : precision.c_str();
  params.steps = int32_t(steps);
  params.checkpoint_every = int32_t(checkpoint_every);
  params.resume = resume;
  params.device_preprocess = device_preprocess;
  params.stop_after = int32_t(stop_after);
  params.budget_anon_bytes = int64_t(budget_mib * 1024.0 * 1024.0);
  params.progress = on_progress;
  params.progress_user_data = &bar;

  auto fail = [&](ditskip_status status) {
    if (bar.shown) std::fputc('\n', stderr);
    std::fprintf(stderr, "ditskip-run train: %s: %s\n", status == DITSKIP_CANCELLED ? "stopped" : "error",
                 ditskip_last_error());
    return int(status);
  };
  ditskip_bundle* bundle = nullptr;
  ditskip_status status = ditskip_bundle_open(bundle_dir.c_str(), true, &bundle);
  if (status != DITSKIP_OK) return fail(status);
  ditskip_trainer* trainer = nullptr;
  status = ditskip_trainer_create(bundle, &params, &trainer);
  if (status != DITSKIP_OK) {
    ditskip_bundle_free(bundle);
    return fail(status);
  }
  running = trainer;
  std::signal(SIGINT, on_sigint);
  bar.t0 = std::chrono::steady_clock::now();
  status = ditskip_trainer_run(trainer);
  std::signal(SIGINT, SIG_DFL);
  running = nullptr;
  int rc = 0;
  if (status != DITSKIP_OK) {
    rc = fail(status);
  } else {
    if (bar.shown) std::fputc('\n', stderr);
    char* text = ditskip_trainer_summary_json(trainer);
    if (text == nullptr) {
      rc = fail(DITSKIP_INTERNAL_ERROR);
    } else if (as_json) {
      std::fputs(text, stdout);
      std::fputc('\n', stdout);
    } else {
      const nlohmann::json s = nlohmann::json::parse(text);
      if (s.contains("interrupted_at_step"))
        std::printf("stopped after step %lld; checkpoint in %s\n", s["interrupted_at_step"].get<long long>(),
                    s["run_dir"].get<std::string>().c_str());
      else
        std::printf("trained %lld steps with %s: final loss %.4f; LoRA %s\n", s["steps"].get<long long>(),
                    s["runtime"].get<std::string>().c_str(), s["final_loss"].get<double>(),
                    s["lora"].get<std::string>().c_str());
    }
    ditskip_string_free(text);
  }
  ditskip_trainer_free(trainer);
  ditskip_bundle_free(bundle);
  return rc;
}

// ------------------------------------------------------------------------------------------------ step, footprint
nlohmann::ordered_json reading() {
  int64_t anon = -1, file = -1;
  ditskip_footprint(&anon, &file);
  return {{"rss_anon_bytes", anon}, {"rss_file_bytes", file}};
}

double cpu_seconds() { return double(std::clock()) / CLOCKS_PER_SEC; }   // the whole process, all its threads

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// One input of DIR: its dtype, shape and bytes (the tensor views point into these).
struct InputFile {
  ditskip_dtype dtype = DITSKIP_FLOAT32;
  std::vector<int64_t> shape;
  std::vector<char> bytes;
};

// DIR/inputs.txt and DIR/input_<k>.bin (native_ptd.py write_inputs); "" or the error (file, line, what was expected).
std::string read_inputs(const std::string& dir, std::vector<InputFile>& out) {
  struct Dtype { const char* name; ditskip_dtype dtype; size_t size; };
  static const Dtype dtypes[] = {{"float32", DITSKIP_FLOAT32, 4}, {"int8", DITSKIP_INT8, 1},
                                 {"uint8", DITSKIP_UINT8, 1},     {"int32", DITSKIP_INT32, 4},
                                 {"int64", DITSKIP_INT64, 8},     {"float64", DITSKIP_FLOAT64, 8},
                                 {"bool", DITSKIP_BOOL, 1}};
  const std::string spec_path = dir + "/inputs.txt";
  std::ifstream spec(spec_path);
  if (!spec) return spec_path + ": cannot open (expected one line per input: <dtype> <ndim> <d0> ...)";
  std::string line;
  for (int line_no = 1; std::getline(spec, line); ++line_no) {
    if (line.empty()) continue;
    std::istringstream ls(line);
    std::string name;
    long long ndim = -1;
    ls >> name >> ndim;
    const Dtype* dt = nullptr;
    for (const Dtype& d : dtypes)
      if (name == d.name) dt = &d;
    const std::string where = spec_path + " line " + std::to_string(line_no);
    if (dt == nullptr) return where + ": dtype '" + name + "': expected float32, int8, uint8, int32, int64, float64 or bool";
    if (ndim < 0) return where + ": expected <dtype> <ndim> <d0> ... <d(ndim-1)>";
    InputFile in;
    in.dtype = dt->dtype;
    size_t numel = 1;
    for (long long d = 0; d < ndim; ++d) {
      long long size = -1;
      if (!(ls >> size) || size < 0) return where + ": expected " + std::to_string(ndim) + " sizes >= 0";
      in.shape.push_back(size);
      numel *= size_t(size);
    }
    const std::string bin_path = dir + "/input_" + std::to_string(out.size()) + ".bin";
    std::ifstream bin(bin_path, std::ios::binary);
    if (!bin) return bin_path + ": cannot open";
    in.bytes.assign(std::istreambuf_iterator<char>(bin), std::istreambuf_iterator<char>());
    if (in.bytes.size() != numel * dt->size)
      return bin_path + ": " + std::to_string(in.bytes.size()) + " bytes, expected " + std::to_string(numel * dt->size) +
             " (" + line + ")";
    out.push_back(std::move(in));
  }
  if (out.empty()) return spec_path + ": no inputs listed";
  return "";
}

int step(int argc, char** argv) {
  const std::string verb = "step";
  const nlohmann::ordered_json at_start = reading();    // before anything of this verb: the runtime's fixed cost
  std::string pte, ptd, inputs_dir, method = "forward";
  long long steps = 3;
  bool as_json = false;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--data" || a == "--inputs" || a == "--steps" || a == "--method") {
      if (i + 1 >= argc) return usage_error(verb, "argument " + a + ": expected one argument");
      const char* v = argv[++i];
      if (a == "--data") {
        ptd = v;
      } else if (a == "--inputs") {
        inputs_dir = v;
      } else if (a == "--method") {
        method = v;
      } else if (!parse_int(v, steps) || steps < 1) {
        return usage_error(verb, std::string("argument --steps: expected an int >= 1, got '") + v + "'");
      }
    } else if (int rc = common_arg(a, pte, as_json); rc >= 0) {
      return rc;
    }
  }
  if (pte.empty()) return usage_error(verb, "the following arguments are required: program");
  if (inputs_dir.empty()) return usage_error(verb, "the following arguments are required: --inputs");

  std::vector<InputFile> files;
  const std::string bad = read_inputs(inputs_dir, files);
  if (!bad.empty()) {
    std::fprintf(stderr, "ditskip-run step: error: %s\n", bad.c_str());
    return 2;
  }
  std::vector<ditskip_tensor> inputs;
  for (const InputFile& f : files)
    inputs.push_back({f.dtype, int32_t(f.shape.size()), f.shape.data(), f.bytes.data()});
  const nlohmann::ordered_json inputs_read = reading();

  auto fail = [](ditskip_status status) {
    std::fprintf(stderr, "ditskip-run step: error: %s\n", ditskip_last_error());
    return int(status);
  };
  const auto t_load = std::chrono::steady_clock::now();
  ditskip_program* program = nullptr;
  ditskip_status status = ditskip_program_open(pte.c_str(), ptd.empty() ? nullptr : ptd.c_str(), &program);
  if (status != DITSKIP_OK) return fail(status);
  status = ditskip_program_load_method(program, method.c_str());
  if (status != DITSKIP_OK) {
    ditskip_program_free(program);
    return fail(status);
  }
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
  const nlohmann::ordered_json loaded = reading();

  std::vector<double> wall, cpu, outputs;
  nlohmann::ordered_json after_steps = nlohmann::ordered_json::array();
  for (long long k = 0; k < steps; ++k) {
    double first = 0.0;
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_seconds();
    status = ditskip_program_run(program, method.c_str(), inputs.data(), int32_t(inputs.size()), &first);
    cpu.push_back(cpu_seconds() - c0);
    wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (status != DITSKIP_OK) {
      ditskip_program_free(program);
      return fail(status);
    }
    outputs.push_back(first);
    after_steps.push_back(reading());
  }
  ditskip_program_free(program);

  const std::vector<double> later_wall(wall.size() > 1 ? wall.begin() + 1 : wall.begin(), wall.end());
  const std::vector<double> later_cpu(cpu.size() > 1 ? cpu.begin() + 1 : cpu.begin(), cpu.end());
  nlohmann::ordered_json doc;
  doc["program"] = pte;
  doc["data"] = ptd.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(ptd);
  doc["method"] = method;
  doc["steps"] = steps;
  doc["threads"] = ditskip_threads();            // the pool the kernels and XNNPACK ran on (--threads)
  doc["loss"] = outputs.front();                 // output 0's first element of step 1 (no optimizer: every step's)
  doc["outputs0"] = outputs;
  doc["seconds_per_step"] = median(later_wall);
  doc["cpu_seconds_per_step"] = median(later_cpu);
  doc["step_seconds"] = wall;
  doc["step_cpu_seconds"] = cpu;
  doc["load_seconds"] = load_s;
  doc["footprint"] = {{"start", at_start}, {"inputs_read", inputs_read}, {"loaded", loaded},
                      {"after_steps", after_steps}};
  if (as_json) {
    std::printf("%s\n", doc.dump(1).c_str());
  } else {
    std::printf("%lld steps of %s: output 0 %.8g, %.3f s/step (CPU %.3f s); RssAnon %.1f MiB loaded (%.1f MiB at "
                "start)\n", steps, method.c_str(), outputs.front(), double(doc["seconds_per_step"]),
                double(doc["cpu_seconds_per_step"]), double(loaded["rss_anon_bytes"]) / (1 << 20),
                double(at_start["rss_anon_bytes"]) / (1 << 20));
  }
  return 0;
}

int footprint(int argc, char** argv) {
  const nlohmann::ordered_json now = reading();      // first: nothing but the loaded libraries
  bool as_json = false;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json") {
      as_json = true;
    } else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      return usage_error("", "unrecognized arguments: " + a);
    }
  }
  if (as_json) {
    nlohmann::ordered_json doc = now;
    doc["counts"] = "this process: the core and ExecuTorch's libraries loaded (kernels and the XNNPACK backend "
                    "registered), nothing else";
    doc["version"] = ditskip_version();
    std::printf("%s\n", doc.dump(1).c_str());
  } else {
    std::printf("RssAnon %.1f MiB, RssFile %.1f MiB (the core and ExecuTorch's libraries loaded, nothing else)\n",
                double(now["rss_anon_bytes"]) / (1 << 20), double(now["rss_file_bytes"]) / (1 << 20));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    std::fputs("ditskip-run: error: the following arguments are required: command\n", stderr);
    return 2;
  }
  const std::string verb = argv[1];
  if (verb == "--version") {
    std::printf("ditskip-run %s\n", ditskip_version());
    return 0;
  }
  if (verb == "-h" || verb == "--help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  // --threads N, for every verb that runs programs: taken out here, before the verb parses its own arguments (the
  // pool is the process's, and must be sized before any program is loaded)
  std::vector<char*> args{argv[0], argv[1]};     // argv without --threads N; the verbs read args[2 ..]
  for (int i = 2; i < argc; ++i) {
    if (verb == "footprint" || std::strcmp(argv[i], "--threads") != 0) {
      args.push_back(argv[i]);
      continue;
    }
    long long n = 0;
    if (i + 1 >= argc) return usage_error(verb, "argument --threads: expected one argument");
    const char* value = argv[++i];
    if (!parse_int(value, n) || n < 1 || n > 1024) {    // one line, as the Python runtime words it
      std::fprintf(stderr, "ditskip-run %s: error: argument --threads: expected a number of CPU threads from 1 to "
                   "1024, got '%s'\n", verb.c_str(), value);
      return 2;
    }
    if (ditskip_set_threads(int32_t(n)) != DITSKIP_OK) {
      std::fprintf(stderr, "ditskip-run %s: error: %s\n", verb.c_str(), ditskip_last_error());
      return 5;
    }
  }
  const int rest = int(args.size()) - 2;
  args.push_back(nullptr);
  if (verb == "train") return train(rest, args.data() + 2);
  if (verb == "step") return step(rest, args.data() + 2);
  if (verb == "footprint") return footprint(rest, args.data() + 2);
  if (verb == "personalize") return personalize_verb(rest, args.data() + 2);
  if (verb == "generate") return generate_verb(rest, args.data() + 2);
  return usage_error("", "argument command: invalid choice: '" + verb + "' (choose from 'train', 'step', "
                         "'footprint', 'personalize', 'generate')");
}
