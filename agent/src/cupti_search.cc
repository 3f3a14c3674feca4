#include "agent/src/cupti_search.h"

#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>

namespace fp8audit::agent {
namespace {

std::string_view BaseName(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string DirName(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? std::string() : std::string(path.substr(0, slash));
}

// "a/b/../c/./d" -> "a/c/d" (lexically; the directories it is used on are resolved ones).
std::string Normalize(std::string_view path) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view part = path.substr(start, end - start);
    if (part == "..") {
      if (!parts.empty() && parts.back() != "..") {
        parts.pop_back();
      } else if (path.empty() || path[0] != '/') {
        parts.push_back(part);
      }
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    start = end + 1;
  }
  std::string out = !path.empty() && path[0] == '/' ? "/" : "";
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += '/';
    out += parts[i];
  }
  return out.empty() ? "." : out;
}

// "cuda-12.4" -> {12, 4}; {0, 0} when not a versioned toolkit directory of `major`.
std::pair<int, int> ToolkitVersion(std::string_view name, int major) {
  const std::string prefix = "cuda-" + std::to_string(major) + ".";
  if (name.substr(0, prefix.size()) != prefix) return {0, 0};
  const std::string_view minor = name.substr(prefix.size());
  if (minor.empty() || minor.size() > 4 ||
      minor.find_first_not_of("0123456789") != std::string_view::npos) {
    return {0, 0};
  }
  return {major, std::atoi(std::string(minor).c_str())};
}

class Candidates {
 public:
  Candidates(const FileView& fs, int major)
      : fs_(fs), name_("libcupti.so." + std::to_string(major)) {}
  // A file `name_` in `dir`, when there is one.
  void InDir(const std::string& dir) {
    if (dir.empty()) return;
    const std::string path = Normalize(dir + "/" + name_);
    if (fs_.IsFile(path)) Add(path);
  }
  void Soname() { Add(name_); }
  std::vector<std::string> Take() { return std::move(out_); }

 private:
  void Add(const std::string& c) {
    if (std::find(out_.begin(), out_.end(), c) == out_.end()) out_.push_back(c);
  }
  const FileView& fs_;
  std::string name_;
  std::vector<std::string> out_;
};

// The site-packages (or dist-packages) directory that `path` lies in, or "".
std::string PackagesRoot(std::string_view path) {
  for (std::string_view marker : {"/site-packages/", "/dist-packages/"}) {
    const size_t at = path.find(marker);
    if (at != std::string_view::npos) return std::string(path.substr(0, at + marker.size() - 1));
  }
  return {};
}

// The CUDA major version of `lib` when it is a libcudart (by its name, else its real path's).
int CudartMajor(const std::string& lib, const FileView& fs) {
  const std::string_view base = BaseName(lib);
  if (base.substr(0, 9) != "libcudart") return 0;
  if (const int m = SonameMajor(base, "libcudart"); m > 0) return m;
  return SonameMajor(BaseName(fs.RealPath(lib)), "libcudart");
}

void ForMajor(const CuptiQuery& q, const FileView& fs, int major, std::vector<std::string>* out) {
  Candidates c(fs, major);
  // 1. Beside the loaded libcudart, as loaded and as resolved.
  for (const std::string& lib : q.loaded) {
    if (CudartMajor(lib, fs) == 0) continue;
    for (const std::string& path : {lib, fs.RealPath(lib)}) {
      const std::string dir = DirName(path);
      if (dir.empty()) continue;
      c.InDir(dir);
      c.InDir(dir + "/../../cuda_cupti/lib");
      c.InDir(dir + "/../extras/CUPTI/lib64");
      c.InDir(dir + "/../../../extras/CUPTI/lib64");
    }
  }
  // 2. The dynamic loader's own search.
  c.Soname();
  // 3. Python packages of any loaded library.
  for (const std::string& lib : q.loaded) {
    const std::string root = PackagesRoot(lib);
    if (root.empty()) continue;
    if (major >= 13) c.InDir(root + "/nvidia/cu" + std::to_string(major) + "/lib");
    c.InDir(root + "/nvidia/cuda_cupti/lib");
  }
  // 4. CUDA_HOME / CUDA_PATH.
  auto toolkit = [&](const std::string& home) {
    c.InDir(home + "/extras/CUPTI/lib64");
    c.InDir(home + "/lib64");
    for (const std::string& arch : fs.List(home + "/targets")) {
      if (arch != "." && arch != "..") c.InDir(home + "/targets/" + arch + "/lib");
    }
  };
  if (!q.cuda_home.empty()) toolkit(q.cuda_home);
  // 5. Versioned toolkits of this major, newest first, then /usr/local/cuda.
  std::vector<std::pair<std::pair<int, int>, std::string>> kits;
  for (const std::string& name : fs.List("/usr/local")) {
    const auto v = ToolkitVersion(name, major);
    if (v.first != 0) kits.push_back({v, "/usr/local/" + name});
  }
  std::sort(kits.begin(), kits.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& kit : kits) toolkit(kit.second);
  toolkit("/usr/local/cuda");
  for (std::string& s : c.Take()) {
    if (std::find(out->begin(), out->end(), s) == out->end()) out->push_back(std::move(s));
  }
}

}  // namespace

bool SystemFileView::IsFile(const std::string& path) const {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::vector<std::string> SystemFileView::List(const std::string& dir) const {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (const dirent* e = ::readdir(d)) {
    if (names.size() >= 4096) break;
    names.emplace_back(e->d_name);
  }
  ::closedir(d);
  return names;
}

std::string SystemFileView::RealPath(const std::string& path) const {
  char resolved[PATH_MAX];
  return ::realpath(path.c_str(), resolved) != nullptr ? std::string(resolved) : std::string();
}

int SonameMajor(std::string_view file_name, std::string_view lib) {
  if (file_name.substr(0, lib.size()) != lib) return 0;
  std::string_view rest = file_name.substr(lib.size());
  if (!rest.empty() && rest[0] == '-') {  // a wheel's vendored copy: libcudart-1a2b3c4d.so.12
    const size_t dot = rest.find('.');
    if (dot == std::string_view::npos) return 0;
    rest.remove_prefix(dot);
  }
  if (rest.substr(0, 4) != ".so.") return 0;
  rest.remove_prefix(4);
  const std::string_view digits = rest.substr(0, rest.find('.'));
  if (digits.empty() || digits.size() > 3 ||
      digits.find_first_not_of("0123456789") != std::string_view::npos) {
    return 0;
  }
  return std::atoi(std::string(digits).c_str());
}

int CudaMajor(const CuptiQuery& q, const FileView& fs) {
  for (const std::string& lib : q.loaded) {
    if (const int m = CudartMajor(lib, fs); m > 0) return m;
  }
  return q.runtime_version > 0 ? q.runtime_version / 1000 : 0;
}

std::vector<std::string> CuptiCandidates(const CuptiQuery& q, const FileView& fs) {
  std::vector<std::string> out;
  const int major = CudaMajor(q, fs);
  if (major > 0) {
    ForMajor(q, fs, major, &out);
    return out;
  }
  // Unknown: the driver's major first, then the supported ones, then the unversioned name.
  std::vector<int> majors;
  if (q.driver_version >= 12000) majors.push_back(q.driver_version / 1000);
  for (int m : {13, 12}) {
    if (std::find(majors.begin(), majors.end(), m) == majors.end()) majors.push_back(m);
  }
  for (int m : majors) ForMajor(q, fs, m, &out);
  out.push_back("libcupti.so");
  return out;
}

}  // namespace fp8audit::agent
