// photo_check: the subject stage's photo input (src/subject/photo_*) behind a command line, for
// tests/test_native_photos.py to compare with photos.py (Pillow). Results go to stdout; a refusal goes to stderr as
// one line, exit code = its status.
//
//   load FOLDER DATA_PX MIN_PHOTOS OUT_DIR   load_user_photos; prints [{"name", "original_hw", "hw", "sha256"}, ...]
//                                            (json.dumps), writes photo i's [3, H, W] float32 to OUT_DIR/<i>.f32
//   save F32 H W PNG                         save_photo_png of [3, H, W] float32 read from F32
//   resize RGB W H OUT_W OUT_H OUT           lanczos_resize_rgb8 of raw [H, W, 3] bytes; OUT gets the result
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "subject/photo_input.h"
#include "subject/photo_lanczos.h"
#include "util/failure.h"
#include "util/files.h"
#include "util/json.h"

using namespace ditskip;

namespace {

int64_t to_int(const std::string& s) { return std::strtoll(s.c_str(), nullptr, 10); }

int run(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  const auto arg = [&](int k) -> std::string {
    if (k >= argc) refuse("photo_check " + cmd + ": missing argument " + std::to_string(k - 1));
    return argv[k];
  };
  if (cmd == "load") {
    const std::vector<UserPhoto> photos =
        load_user_photos(arg(2), to_int(arg(3)), static_cast<int>(to_int(arg(4))));
    const std::string out_dir = arg(5);
    make_dirs(out_dir);
    json list = json::array();
    for (size_t i = 0; i < photos.size(); ++i) {
      const UserPhoto& p = photos[i];
      list.push_back(json{{"name", p.name}, {"original_hw", {p.original_height, p.original_width}},
                          {"hw", {p.height, p.width}}, {"sha256", p.sha256}});
      atomic_write(join_path(out_dir, std::to_string(i) + ".f32"), p.chw.data(), p.chw.size() * sizeof(float));
    }
    const std::string text = py_dumps(list);
    std::printf("%s\n", text.c_str());
  } else if (cmd == "save") {
    const std::vector<uint8_t> bytes = read_bytes(arg(2));
    UserPhoto photo;
    photo.height = to_int(arg(3));
    photo.width = to_int(arg(4));
    photo.chw.resize(bytes.size() / sizeof(float));
    std::memcpy(photo.chw.data(), bytes.data(), photo.chw.size() * sizeof(float));
    save_photo_png(photo, arg(5));
  } else if (cmd == "resize") {
    const std::vector<uint8_t> rgb = read_bytes(arg(2));
    const int64_t w = to_int(arg(3)), h = to_int(arg(4));
    if (static_cast<int64_t>(rgb.size()) != w * h * 3) refuse("photo_check resize: " + arg(2) + " is not [H, W, 3]");
    const std::vector<uint8_t> out = lanczos_resize_rgb8(rgb.data(), w, h, to_int(arg(5)), to_int(arg(6)));
    atomic_write(arg(7), out.data(), out.size());
  } else {
    refuse("photo_check: unknown command '" + cmd + "' (load | save | resize)");
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
