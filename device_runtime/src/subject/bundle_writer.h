// The subject bundle's writer (ditskip_edge/runtime/bundle.py BundleWriter with a fixed work_dir): files go to the
// working folder `.<name>.partial` beside the output, a model bundle's files are hard-linked (copied where linking
// fails), and commit() lists every file (sorted as pathlib sorts paths) with its SHA-256 and size, writes the
// self-verifying manifest exactly as bundle.py's manifest_bytes, and renames the folder into place.
#pragma once

#include <map>
#include <string>

#include "util/json.h"

namespace ditskip {

std::string work_dir_for(const std::string& out_dir);     // subject.py work_dir_for: <parent>/.<name>.partial
void remove_tree(const std::string& path);                 // shutil.rmtree(path, ignore_errors=True)
bool path_exists(const std::string& path);
// bundle.py manifest_bytes: {"manifest_sha256": "<hex>",\n + json.dumps(manifest, indent=1)[2:]
std::string manifest_bytes(const json& manifest);

class BundleWriter {
 public:
  // bundle.py's refusals for an existing out_dir; creates the working folder
  BundleWriter(const std::string& out_dir, bool overwrite, const std::string& work_dir);
  const std::string& root() const { return root_; }
  std::string path(const std::string& rel);                // root / rel, its folder made
  // hard link (copy if linking fails) of src at rel; info {sha256, bytes} spares hashing it on commit
  void link(const std::string& src, const std::string& rel, const json* info);
  json manifest = json::object();                          // {"format", "format_version"} to start
  void commit();                                           // files listed, manifest written, renamed into place
  void discard();                                          // the working folder removed (an error, not a stop)

 private:
  std::string out_dir_, root_;
  std::map<std::string, json> known_;
};

}  // namespace ditskip
