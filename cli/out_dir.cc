#include "cli/out_dir.h"

#include <sys/stat.h>
#include <unistd.h>

namespace fp8audit::cli {

std::string UnsafeOutDir(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return "";  // made by the agent itself, as this user
  if (st.st_uid != ::geteuid()) {
    return "belongs to user " + std::to_string(st.st_uid) +
           ", who could replace or plant the traces this run is judged by";
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
    return "can be written by other users and has no sticky bit, so they could replace or plant "
           "the traces this run is judged by";
  }
  return "";
}

std::vector<std::string> OwnTraces(const std::vector<std::string>& paths,
                                   std::vector<std::string>* foreign) {
  std::vector<std::string> own;
  for (const std::string& path : paths) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid()) {
      own.push_back(path);
    } else {
      foreign->push_back(path);
    }
  }
  return own;
}

}  // namespace fp8audit::cli
