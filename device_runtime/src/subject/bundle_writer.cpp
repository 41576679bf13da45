// bundle.py BundleWriter for the device's subject stage (see bundle_writer.h).
#include "subject/bundle_writer.h"

#include <dirent.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "util/failure.h"
#include "util/files.h"
#include "util/sha256.h"

namespace ditskip {
namespace {

std::string parent_of(const std::string& p) {
  const size_t s = p.find_last_not_of('/');
  const std::string t = s == std::string::npos ? p : p.substr(0, s + 1);
  const size_t slash = t.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : t.substr(0, slash);
}

std::string name_of(const std::string& p) {
  const size_t s = p.find_last_not_of('/');
  const std::string t = s == std::string::npos ? p : p.substr(0, s + 1);
  const size_t slash = t.rfind('/');
  return slash == std::string::npos ? t : t.substr(slash + 1);
}

// every file under dir, relative, as POSIX paths
void walk(const std::string& dir, const std::string& rel, std::vector<std::vector<std::string>>& out) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) io_failure("cannot read " + dir + ": " + std::strerror(errno));
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  for (const std::string& n : names) {
    const std::string full = join_path(dir, n);
    struct stat st {};
    if (::lstat(full.c_str(), &st) != 0) continue;
    std::vector<std::string> parts;
    if (S_ISDIR(st.st_mode)) {
      walk(full, rel.empty() ? n : rel + "/" + n, out);
    } else if (S_ISREG(st.st_mode)) {
      std::string r = rel.empty() ? n : rel + "/" + n;
      size_t i = 0;
      while (true) {
        const size_t j = r.find('/', i);
        parts.push_back(r.substr(i, j == std::string::npos ? std::string::npos : j - i));
        if (j == std::string::npos) break;
        i = j + 1;
      }
      out.push_back(parts);
    }
  }
}

std::string joined(const std::vector<std::string>& parts) {
  std::string s;
  for (const auto& p : parts) s += (s.empty() ? "" : "/") + p;
  return s;
}

}  // namespace

std::string work_dir_for(const std::string& out_dir) { return join_path(parent_of(out_dir), "." + name_of(out_dir) + ".partial"); }

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

void remove_tree(const std::string& path) {
  ::nftw(path.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p), 0; }, 16,
         FTW_DEPTH | FTW_PHYS);
}

std::string manifest_bytes(const json& manifest) {
  PyDumps how;
  how.indent = 1;
  const std::string body = py_dumps(manifest, how);
  const std::string rest = body.substr(2);
  return "{\"manifest_sha256\": \"" + sha256_hex(rest) + "\",\n" + rest;
}

BundleWriter::BundleWriter(const std::string& out_dir, bool overwrite, const std::string& work_dir)
    : out_dir_(out_dir), root_(work_dir) {
  if (path_exists(out_dir_) && !overwrite) refuse(out_dir_ + " already exists: choose another --out or pass --force");
  if (path_exists(out_dir_) && !is_dir(out_dir_)) refuse(out_dir_ + " exists and is not a folder");
  make_dirs(parent_of(out_dir_));
  make_dirs(root_);
  manifest["format"] = "ditskip-edge-bundle";
  manifest["format_version"] = 3;
}

std::string BundleWriter::path(const std::string& rel) {
  const std::string p = join_path(root_, rel);
  make_dirs(parent_of(p));
  return p;
}

void BundleWriter::link(const std::string& src, const std::string& rel, const json* info) {
  const std::string dst = path(rel);
  ::unlink(dst.c_str());
  if (::link(src.c_str(), dst.c_str()) != 0) {
    const std::vector<uint8_t> bytes = read_bytes(src);
    atomic_write(dst, bytes.data(), bytes.size());
  }
  if (info != nullptr) known_[rel] = json{{"sha256", (*info)["sha256"]}, {"bytes", (*info)["bytes"]}};
}

void BundleWriter::commit() {
  try {
    std::vector<std::vector<std::string>> files;
    walk(root_, "", files);
    std::sort(files.begin(), files.end());                  // pathlib compares paths part by part
    json listed = json::object();
    for (const auto& parts : files) {
      const std::string rel = joined(parts);
      const std::string p = join_path(root_, rel);
      const auto k = known_.find(rel);
      if (k != known_.end() && py_equal(json(file_size(p)), k->second["bytes"]))
        listed[rel] = k->second;
      else
        listed[rel] = json{{"sha256", sha256_file(p)}, {"bytes", file_size(p)}};
    }
    manifest["files"] = listed;
    const std::string bytes = manifest_bytes(manifest);
    atomic_write(join_path(root_, "manifest.json"), bytes);
    if (path_exists(out_dir_)) remove_tree(out_dir_);
    if (::rename(root_.c_str(), out_dir_.c_str()) != 0) io_failure("cannot rename " + root_ + " to " + out_dir_ + ": " + std::strerror(errno));
  } catch (...) {
    remove_tree(root_);
    throw;
  }
}

void BundleWriter::discard() { remove_tree(root_); }

}  // namespace ditskip
