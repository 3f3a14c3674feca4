// shim_children.h (does an exec's new image load the agent?) and unaudited_children.h (the facts
// kept until the parent records them).
#include <elf.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "agent/src/shim_children.h"
#include "agent/src/unaudited_children.h"

namespace fp8audit::agent {
namespace {

constexpr const char* kAgent = "libfp8audit.so";

class Children : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fp8audit-children-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { [[maybe_unused]] int rc = system(("rm -rf " + dir_).c_str()); }

  // An executable ELF file with one program header of `type` (PT_INTERP: dynamically linked).
  std::string Elf(const std::string& name, uint32_t type) {
    Elf64_Ehdr eh{};
    std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
    eh.e_ident[EI_CLASS] = ELFCLASS64;
    eh.e_ident[EI_DATA] = ELFDATA2LSB;
    eh.e_type = ET_EXEC;
    eh.e_phoff = sizeof(Elf64_Ehdr);
    eh.e_phentsize = sizeof(Elf64_Phdr);
    eh.e_phnum = 2;
    Elf64_Phdr ph[2]{};
    ph[0].p_type = PT_LOAD;
    ph[1].p_type = type;
    std::string bytes(reinterpret_cast<const char*>(&eh), sizeof(eh));
    bytes.append(reinterpret_cast<const char*>(ph), sizeof(ph));
    return File(name, bytes);
  }
  std::string File(const std::string& name, const std::string& bytes) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    chmod(path.c_str(), 0755);
    return path;
  }
  ChildAgent Check(const std::string& file, std::vector<std::string> env,
                   bool search_path = false) {
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    resolved_[0] = '\0';
    return CheckChild(file.c_str(), -1, search_path, envp.data(), kAgent, resolved_,
                      sizeof(resolved_));
  }

  std::string dir_;
  char resolved_[4096];
};

TEST_F(Children, ADynamicProgramWhoseEnvironmentDropsTheAgentRunsWithoutIt) {
  const std::string prog = Elf("dynamic", PT_INTERP);
  EXPECT_EQ(Check(prog, {}), ChildAgent::kEnvironmentDrops);
  EXPECT_EQ(Check(prog, {"LD_PRELOAD=/opt/other/libjemalloc.so", "PATH=/bin"}),
            ChildAgent::kEnvironmentDrops);
  EXPECT_STREQ(resolved_, prog.c_str());
  EXPECT_STREQ(ChildAgentWord(ChildAgent::kEnvironmentDrops), "environment");
}

TEST_F(Children, AnEnvironmentThatNamesTheAgentInAnyRouteLoadsIt) {
  const std::string prog = Elf("dynamic", PT_INTERP);
  EXPECT_EQ(Check(prog, {"LD_PRELOAD=/x/libjemalloc.so:/elsewhere/libfp8audit.so"}),
            ChildAgent::kLoads);
  EXPECT_EQ(Check(prog, {"LD_PRELOAD=/x/libjemalloc.so /y/libfp8audit.so"}), ChildAgent::kLoads);
  EXPECT_EQ(Check(prog, {"CUDA_INJECTION64_PATH=/y/libfp8audit.so"}), ChildAgent::kLoads);
  EXPECT_EQ(Check(prog, {"NVTX_INJECTION64_PATH=/y/libfp8audit.so"}), ChildAgent::kLoads);
  // A library of another name that merely ends like the agent's is not the agent.
  EXPECT_EQ(Check(prog, {"LD_PRELOAD=/y/notlibfp8audit.so"}), ChildAgent::kEnvironmentDrops);
}

TEST_F(Children, AnEnvironmentThatTurnsTheAgentOffIsNotReported) {
  EXPECT_EQ(Check(Elf("dynamic", PT_INTERP), {"FP8AUDIT_DISABLE=1"}), ChildAgent::kLoads);
  EXPECT_EQ(Check(Elf("dynamic", PT_INTERP), {"FP8AUDIT_DISABLE=0"}),
            ChildAgent::kEnvironmentDrops);
}

TEST_F(Children, StaticProgramsAndMissingFilesAreNotReported) {
  EXPECT_EQ(Check(Elf("static", PT_NOTE), {}), ChildAgent::kLoads);
  EXPECT_EQ(Check(dir_ + "/absent", {}), ChildAgent::kLoads);
}

TEST_F(Children, ScriptsAndUnparsableFilesCountAsProgramsTheLoaderRuns) {
  EXPECT_EQ(Check(File("train.sh", "#!/bin/sh\nexit 0\n"), {}), ChildAgent::kEnvironmentDrops);
  EXPECT_EQ(Check(File("odd",
                       "\x7f"
                       "ELF garbage"),
                  {}),
            ChildAgent::kEnvironmentDrops);
}

TEST_F(Children, ABareNameIsLookedUpInTheCallersPath) {
  const std::string prog = Elf("worker", PT_INTERP);
  const char* old = getenv("PATH");
  const std::string saved = old != nullptr ? old : "";
  setenv("PATH", ("/nonexistent:" + dir_).c_str(), 1);
  EXPECT_EQ(Check("worker", {}, true), ChildAgent::kEnvironmentDrops);
  EXPECT_STREQ(resolved_, prog.c_str());
  EXPECT_EQ(Check("not-there", {}, true), ChildAgent::kLoads);
  setenv("PATH", saved.c_str(), 1);
}

TEST(UnauditedChildren, AFailedExecGivesItsSlotBackAndTheRestAreRecordedOnce) {
  UnauditedChildren children;
  const int kept = children.Add(41, "environment", "/usr/bin/python3");
  const int failed = children.Add(42, "privileged", "/usr/bin/sudo");
  ASSERT_GE(kept, 0);
  ASSERT_GE(failed, 0);
  children.Retract(failed);
  std::vector<std::string> facts;
  children.Drain([&](const std::string& f) { facts.push_back(f); });
  EXPECT_EQ(facts, std::vector<std::string>{"environment 41 /usr/bin/python3"});
  facts.clear();
  children.Drain([&](const std::string& f) { facts.push_back(f); });
  EXPECT_TRUE(facts.empty());
}

TEST(UnauditedChildren, LongPathsKeepTheirEndAndOverflowIsCounted) {
  UnauditedChildren children;
  const std::string deep = "/" + std::string(300, 'd') + "/train_worker";
  for (size_t i = 0; i < UnauditedChildren::kSlots + 3; ++i)
    children.Add(7, "environment", deep.c_str());
  std::vector<std::string> facts;
  children.Drain([&](const std::string& f) { facts.push_back(f); });
  ASSERT_EQ(facts.size(), UnauditedChildren::kSlots + 1);
  EXPECT_EQ(facts.front().rfind("environment 7 ...", 0), 0u) << facts.front();
  EXPECT_TRUE(facts.front().ends_with("/train_worker")) << facts.front();
  EXPECT_EQ(facts.back(), "more 3 (slots full)");
}

TEST(UnauditedChildren, AForkChildForgetsTheParentsSlots) {
  UnauditedChildren children;
  children.Add(5, "environment", "/bin/sh");
  children.Clear();
  int n = 0;
  children.Drain([&](const std::string&) { ++n; });
  EXPECT_EQ(n, 0);
}

}  // namespace
}  // namespace fp8audit::agent
