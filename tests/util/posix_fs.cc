#include "tests/util/posix_fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

namespace fp8audit::testutil {
namespace {

// Removes the entries of the open directory `fd` (closed here), then nothing else.
bool RemoveContents(int fd) {
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    close(fd);
    return false;
  }
  bool ok = true;
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      names.emplace_back(e->d_name);
    }
  }
  for (const std::string& name : names) {
    struct stat st;
    if (fstatat(dirfd(d), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      ok = false;
      break;
    }
    if (S_ISDIR(st.st_mode)) {
      const int sub =
          openat(dirfd(d), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0 || !RemoveContents(sub) || unlinkat(dirfd(d), name.c_str(), AT_REMOVEDIR) != 0) {
        ok = false;
        break;
      }
    } else if (unlinkat(dirfd(d), name.c_str(), 0) != 0 && errno != ENOENT) {
      ok = false;
      break;
    }
  }
  closedir(d);
  return ok;
}

}  // namespace

bool PathExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::vector<std::string> ListDirectory(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      names.emplace_back(e->d_name);
    }
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

bool RemoveTree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return errno == ENOENT;
  if (!S_ISDIR(st.st_mode)) return ::unlink(path.c_str()) == 0 || errno == ENOENT;
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 || !RemoveContents(fd)) return false;
  return ::rmdir(path.c_str()) == 0 || errno == ENOENT;
}

std::string MakeTempDirectory(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/" + prefix + "XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  return ::mkdtemp(buf.data()) != nullptr ? std::string(buf.data()) : std::string();
}

TempDir::TempDir(const std::string& prefix) : path_(MakeTempDirectory(prefix)) {
  if (path_.empty()) {
    std::fprintf(stderr, "cannot make a temporary directory %sXXXXXX: %s\n", prefix.c_str(),
                 std::strerror(errno));
    std::abort();
  }
}

TempDir::~TempDir() { RemoveTree(path_); }

}  // namespace fp8audit::testutil
