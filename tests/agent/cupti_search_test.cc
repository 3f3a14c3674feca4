// The CUPTI lookup over fake filesystem layouts: pip wheels of CUDA 12 and 13, conda, toolkits
// under /usr/local, CUDA_HOME, and jobs whose CUDA version only an API tells.
#include "agent/src/cupti_search.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/util/posix_fs.h"

namespace fp8audit::agent {
namespace {

class FakeFiles final : public FileView {
 public:
  FakeFiles(std::set<std::string> files, std::map<std::string, std::string> links = {})
      : files_(std::move(files)), links_(std::move(links)) {}
  bool IsFile(const std::string& path) const override { return files_.count(path) > 0; }
  std::vector<std::string> List(const std::string& dir) const override {
    std::set<std::string> names;
    const std::string prefix = dir + "/";
    for (const std::string& f : files_) {
      if (f.rfind(prefix, 0) != 0) continue;
      const std::string rest = f.substr(prefix.size());
      names.insert(rest.substr(0, rest.find('/')));
    }
    return {names.begin(), names.end()};
  }
  std::string RealPath(const std::string& path) const override {
    auto it = links_.find(path);
    if (it != links_.end()) return it->second;
    return files_.count(path) > 0 ? path : "";
  }

 private:
  std::set<std::string> files_;
  std::map<std::string, std::string> links_;
};

const std::string kSite = "/venv/lib/python3.12/site-packages";

bool NoneOfMajor(const std::vector<std::string>& c, const std::string& major) {
  return std::none_of(c.begin(), c.end(), [&](const std::string& s) {
    return s.find("libcupti.so." + major) != std::string::npos;
  });
}

TEST(AgentCuptiSearch, SonameMajorReadsLibraryFileNames) {
  EXPECT_EQ(SonameMajor("libcudart.so.12", "libcudart"), 12);
  EXPECT_EQ(SonameMajor("libcudart.so.12.4.127", "libcudart"), 12);
  EXPECT_EQ(SonameMajor("libcudart.so.13", "libcudart"), 13);
  EXPECT_EQ(SonameMajor("libcudart-9335f6a2.so.12", "libcudart"), 12);  // vendored by a wheel
  EXPECT_EQ(SonameMajor("libcudart.so", "libcudart"), 0);
  EXPECT_EQ(SonameMajor("libcudart_static.a", "libcudart"), 0);
  EXPECT_EQ(SonameMajor("libcudart.so.x1", "libcudart"), 0);
  EXPECT_EQ(SonameMajor("libcublas.so.12", "libcudart"), 0);
}

TEST(AgentCuptiSearch, PipCuda12WheelsFindTheCuptiWheel) {
  CuptiQuery q;
  q.loaded = {kSite + "/torch/lib/libtorch_cuda.so",
              kSite + "/nvidia/cuda_runtime/lib/libcudart.so.12"};
  const FakeFiles fs({kSite + "/nvidia/cuda_runtime/lib/libcudart.so.12",
                      kSite + "/nvidia/cuda_cupti/lib/libcupti.so.12",
                      "/usr/local/cuda/lib64/libcupti.so.13"});
  EXPECT_EQ(CudaMajor(q, fs), 12);
  const auto c = CuptiCandidates(q, fs);
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c[0], kSite + "/nvidia/cuda_cupti/lib/libcupti.so.12");
  EXPECT_EQ(c[1], "libcupti.so.12");
  EXPECT_TRUE(NoneOfMajor(c, "13"));  // the machine's CUDA 13 CUPTI is not for this job
}

TEST(AgentCuptiSearch, PipCuda13WheelsShareOneDirectory) {
  CuptiQuery q;
  q.loaded = {kSite + "/nvidia/cu13/lib/libcudart.so.13"};
  const FakeFiles fs(
      {kSite + "/nvidia/cu13/lib/libcudart.so.13", kSite + "/nvidia/cu13/lib/libcupti.so.13"});
  const auto c = CuptiCandidates(q, fs);
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c[0], kSite + "/nvidia/cu13/lib/libcupti.so.13");
  EXPECT_TRUE(NoneOfMajor(c, "12"));
}

TEST(AgentCuptiSearch, ACupti12WheelIsFoundThroughAnyLoadedPackageWhenCudartIsElsewhere) {
  CuptiQuery q;  // cudart from a system toolkit without CUPTI; torch from a venv with the wheel
  q.loaded = {"/usr/lib/x86_64-linux-gnu/libcudart.so.12", kSite + "/torch/lib/libtorch.so"};
  const FakeFiles fs({kSite + "/nvidia/cuda_cupti/lib/libcupti.so.12"});
  const auto c = CuptiCandidates(q, fs);
  EXPECT_EQ(c, (std::vector<std::string>{"libcupti.so.12",
                                         kSite + "/nvidia/cuda_cupti/lib/libcupti.so.12"}));
}

TEST(AgentCuptiSearch, CondaKeepsCuptiBesideCudart) {
  CuptiQuery q;
  q.loaded = {"/opt/conda/envs/t/lib/libcudart.so.12"};
  const FakeFiles fs(
      {"/opt/conda/envs/t/lib/libcudart.so.12", "/opt/conda/envs/t/lib/libcupti.so.12"});
  EXPECT_EQ(CuptiCandidates(q, fs)[0], "/opt/conda/envs/t/lib/libcupti.so.12");
}

TEST(AgentCuptiSearch, AToolkitReachedThroughLinksUsesItsExtrasDirectory) {
  CuptiQuery q;
  q.loaded = {"/usr/local/cuda/lib64/libcudart.so.12"};
  const std::string real = "/usr/local/cuda-12.4/targets/x86_64-linux/lib/libcudart.so.12.4.127";
  const FakeFiles fs({real, "/usr/local/cuda-12.4/extras/CUPTI/lib64/libcupti.so.12"},
                     {{"/usr/local/cuda/lib64/libcudart.so.12", real}});
  const auto c = CuptiCandidates(q, fs);
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c[0], "/usr/local/cuda-12.4/extras/CUPTI/lib64/libcupti.so.12");
}

TEST(AgentCuptiSearch, CudaHomeAndVersionedToolkitsNewestFirstOfTheJobsMajorOnly) {
  CuptiQuery q;  // a statically linked runtime: only the API tells the version
  q.runtime_version = 12040;
  q.cuda_home = "/opt/cuda";
  const FakeFiles fs({"/opt/cuda/targets/sbsa-linux/lib/libcupti.so.12",
                      "/usr/local/cuda-12.1/extras/CUPTI/lib64/libcupti.so.12",
                      "/usr/local/cuda-12.10/extras/CUPTI/lib64/libcupti.so.12",
                      "/usr/local/cuda-12.4/extras/CUPTI/lib64/libcupti.so.12",
                      "/usr/local/cuda-13.0/lib64/libcupti.so.13",
                      "/usr/local/cuda/lib64/libcupti.so.13"});
  EXPECT_EQ(CudaMajor(q, fs), 12);
  EXPECT_EQ(
      CuptiCandidates(q, fs),
      (std::vector<std::string>{"libcupti.so.12", "/opt/cuda/targets/sbsa-linux/lib/libcupti.so.12",
                                "/usr/local/cuda-12.10/extras/CUPTI/lib64/libcupti.so.12",
                                "/usr/local/cuda-12.4/extras/CUPTI/lib64/libcupti.so.12",
                                "/usr/local/cuda-12.1/extras/CUPTI/lib64/libcupti.so.12"}));
}

TEST(AgentCuptiSearch, TheCuda13ToolkitKeepsCuptiInLib64) {
  CuptiQuery q;
  q.loaded = {"/usr/local/cuda/lib64/libcudart.so.13"};
  const std::string real = "/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcudart.so.13.0.48";
  const FakeFiles fs({real, "/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcupti.so.13"},
                     {{"/usr/local/cuda/lib64/libcudart.so.13", real},
                      {"/usr/local/cuda/lib64/libcupti.so.13",
                       "/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcupti.so.13"}});
  const auto c = CuptiCandidates(q, fs);
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c[0], "/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcupti.so.13");
}

TEST(AgentCuptiSearch, WithoutARuntimeTheDriversMajorGoesFirstThenTheOthers) {
  CuptiQuery q;
  q.driver_version = 12080;
  const FakeFiles fs({});
  EXPECT_EQ(CudaMajor(q, fs), 0);
  EXPECT_EQ(CuptiCandidates(q, fs),
            (std::vector<std::string>{"libcupti.so.12", "libcupti.so.13", "libcupti.so"}));
  q.driver_version = 0;
  EXPECT_EQ(CuptiCandidates(q, fs),
            (std::vector<std::string>{"libcupti.so.13", "libcupti.so.12", "libcupti.so"}));
}

TEST(AgentCuptiSearch, AnUnversionedCudartNameIsReadThroughItsRealPath) {
  CuptiQuery q;
  q.loaded = {"/opt/app/lib/libcudart.so"};
  const FakeFiles fs({"/opt/app/lib/libcudart.so.12.8.57", "/opt/app/lib/libcupti.so.12"},
                     {{"/opt/app/lib/libcudart.so", "/opt/app/lib/libcudart.so.12.8.57"}});
  EXPECT_EQ(CudaMajor(q, fs), 12);
  EXPECT_EQ(CuptiCandidates(q, fs)[0], "/opt/app/lib/libcupti.so.12");
}

TEST(AgentCuptiSearch, TheSystemViewFollowsLinksAsTheLoaderWould) {
  namespace fs = std::filesystem;
  const testutil::TempDir tmp("fp8audit-cupti-");
  const std::string root = tmp.path();
  const std::string site = root + "/lib/python3.12/site-packages";
  fs::create_directories(site + "/nvidia/cuda_runtime/lib");
  fs::create_directories(site + "/nvidia/cuda_cupti/lib");
  std::ofstream(site + "/nvidia/cuda_runtime/lib/libcudart.so.12.8.57") << "elf";
  fs::create_symlink("libcudart.so.12.8.57", site + "/nvidia/cuda_runtime/lib/libcudart.so");
  std::ofstream(site + "/nvidia/cuda_cupti/lib/libcupti.so.2025.1.0") << "elf";
  fs::create_symlink("libcupti.so.2025.1.0", site + "/nvidia/cuda_cupti/lib/libcupti.so.12");
  fs::create_directories(site + "/nvidia/cuda_cupti/lib/libcupti.so.13");  // not a file
  CuptiQuery q;
  q.loaded = {site + "/nvidia/cuda_runtime/lib/libcudart.so"};
  const SystemFileView view;
  EXPECT_EQ(CudaMajor(q, view), 12);
  const auto c = CuptiCandidates(q, view);
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c[0], site + "/nvidia/cuda_cupti/lib/libcupti.so.12");
  EXPECT_EQ(view.RealPath(c[0]),
            fs::canonical(site + "/nvidia/cuda_cupti/lib/libcupti.so.2025.1.0"));
  EXPECT_FALSE(view.IsFile(site + "/nvidia/cuda_cupti/lib/libcupti.so.13"));
}

}  // namespace
}  // namespace fp8audit::agent
