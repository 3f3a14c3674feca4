// Which CUPTI library the kernel probe loads: the one of the job's CUDA major version (CUPTI 12 for
// a CUDA 12 runtime, 13 for 13), found where that runtime's installation keeps it. A pure function
// of what the process has loaded, the CUDA versions and a view of the filesystem, so that every
// layout is tested on a CPU with a fake view.
//
// The major version: a loaded libcudart's file name (libcudart.so.12[.4.127], or its real path's),
// else the runtime API version, else the driver's (then 13 and 12 are both tried). Candidates, best
// first; a path is listed only when the view shows a file there:
//   1. beside the loaded libcudart (its directory as loaded and as resolved): the directory itself
//      (conda, CUDA 13 toolkits and pip wheels: site-packages/nvidia/cu13/lib), pip CUDA 12 wheels
//      (nvidia/cuda_runtime/lib -> nvidia/cuda_cupti/lib), toolkit extras/CUPTI/lib64 (from lib64
//      or targets/<arch>/lib);
//   2. the soname libcupti.so.M, for the dynamic loader (LD_LIBRARY_PATH, ld.so.cache);
//   3. the site-packages (dist-packages) of any loaded library: nvidia/cu13/lib (M >= 13),
//      nvidia/cuda_cupti/lib;
//   4. $CUDA_HOME (else $CUDA_PATH): extras/CUPTI/lib64, lib64, targets/<arch>/lib;
//   5. /usr/local/cuda-M.* (newest first), then /usr/local/cuda: extras/CUPTI/lib64, lib64.
// A library of another major version is never a candidate when the major is known.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fp8audit::agent {

// A read-only view of the filesystem.
class FileView {
 public:
  virtual ~FileView() = default;
  // True when `path` is a regular file (links followed).
  virtual bool IsFile(const std::string& path) const = 0;
  // The names in directory `dir` (empty when it cannot be read).
  virtual std::vector<std::string> List(const std::string& dir) const = 0;
  // `path` with every link resolved, or "" when it does not resolve.
  virtual std::string RealPath(const std::string& path) const = 0;
};

// The real filesystem (POSIX calls only).
class SystemFileView final : public FileView {
 public:
  bool IsFile(const std::string& path) const override;
  std::vector<std::string> List(const std::string& dir) const override;
  std::string RealPath(const std::string& path) const override;
};

struct CuptiQuery {
  std::vector<std::string> loaded;  // paths of the process's loaded shared objects
  int runtime_version = 0;          // cudaRuntimeGetVersion, e.g. 12040; 0 unknown
  int driver_version = 0;           // cuDriverGetVersion, e.g. 13000; 0 unknown
  std::string cuda_home;            // $CUDA_HOME, else $CUDA_PATH
};

// N of a library file name "<lib>[-hash].so.N[.x.y]" (e.g. 12 for libcudart.so.12.4.127 with lib
// "libcudart"); 0 when it is not one.
int SonameMajor(std::string_view file_name, std::string_view lib);

// The job's CUDA major version, 0 when nothing tells it.
int CudaMajor(const CuptiQuery& query, const FileView& fs);

// The libraries to dlopen, best first: paths, and bare sonames for the dynamic loader.
std::vector<std::string> CuptiCandidates(const CuptiQuery& query, const FileView& fs);

}  // namespace fp8audit::agent
