// Small POSIX file helpers for tests and tools that are linked with libtorch.
//
// PyTorch's pip wheels export the std::filesystem implementation they link statically from their
// libstdc++ (pytorch/pytorch#133437). In a binary linked with libtorch those exported definitions
// come before libstdc++.so's in symbol lookup, and mixing them with this compiler's inline
// std::filesystem code crashes (seen: SIGSEGV in std::filesystem::remove_all). Code linked with
// libtorch therefore uses these helpers instead; tests/runtime's TorchLinkedBinaries check keeps it
// so.
#pragma once

#include <string>
#include <vector>

namespace fp8audit::testutil {

// True when `path` names anything (stat(2) succeeds; a dangling symlink does not count).
bool PathExists(const std::string& path);

// The entry names in directory `dir` (no "." or ".."), sorted; empty when it cannot be read.
std::vector<std::string> ListDirectory(const std::string& dir);

// Removes `path` and, for a directory, everything below it, without following symlinks. Returns
// false (and leaves what it could not remove) on the first error; a missing path is no error.
bool RemoveTree(const std::string& path);

// mkdtemp(3) under $TMPDIR (else /tmp) with `prefix`; an empty string on failure.
std::string MakeTempDirectory(const std::string& prefix);

// A fresh directory (MakeTempDirectory(prefix)) for as long as the object lives; its destructor
// removes it with everything below it. A test fixture holds one as a member. When no directory can
// be made it says so on stderr and aborts: no test can run without it.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // `name` inside the directory: path() + "/" + name.
  std::string Path(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace fp8audit::testutil
