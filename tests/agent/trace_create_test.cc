// TraceFileWriter::CreateNew, as the agent creates its trace: a name already taken (a file, a
// link, a directory) is left alone and the next numbered name chosen; nothing outside the
// directory is written.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "proto/trace_io.h"
#include "tests/util/posix_fs.h"

namespace fp8audit {
namespace {

namespace fs = std::filesystem;

class CreateNew : public ::testing::Test {
 protected:
  void SetUp() override { fs::create_directory(dir_); }

  static std::string Slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  std::unique_ptr<TraceFileWriter> Make(std::string* error) {
    return TraceFileWriter::CreateNew(dir_, "host.42", ".rank3.fp8trace", error);
  }

  const testutil::TempDir tmp_{"fp8audit-create-"};
  const std::string root_ = tmp_.path();
  const std::string dir_ = root_ + "/out";
};

TEST_F(CreateNew, AFreeNameIsUsedAsItIsWithMode0644OrTighter) {
  std::string error;
  auto w = Make(&error);
  ASSERT_NE(w, nullptr) << error;
  EXPECT_EQ(w->path(), dir_ + "/host.42.rank3.fp8trace");
  struct stat st {};
  ASSERT_EQ(stat(w->path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0133, 0u);
}

TEST_F(CreateNew, APlantedLinkIsNotFollowedAndItsTargetIsUntouched) {
  const std::string victim = root_ + "/victim";
  std::ofstream(victim) << "precious";
  fs::create_symlink(victim, dir_ + "/host.42.rank3.fp8trace");
  fs::create_symlink(root_ + "/does-not-exist", dir_ + "/host.42.1.rank3.fp8trace");
  std::string error;
  auto w = Make(&error);
  ASSERT_NE(w, nullptr) << error;
  EXPECT_EQ(w->path(), dir_ + "/host.42.2.rank3.fp8trace");
  ASSERT_TRUE(w->WriteFramed("record"));
  EXPECT_EQ(Slurp(victim), "precious");
  EXPECT_FALSE(fs::exists(root_ + "/does-not-exist"));  // a dangling link is not created through
  EXPECT_TRUE(fs::is_symlink(dir_ + "/host.42.rank3.fp8trace"));
}

TEST_F(CreateNew, ExistingFilesAndDirectoriesAreLeftAsTheyAre) {
  std::ofstream(dir_ + "/host.42.rank3.fp8trace") << "earlier run";
  fs::create_directory(dir_ + "/host.42.1.rank3.fp8trace");
  std::string error;
  auto w = Make(&error);
  ASSERT_NE(w, nullptr) << error;
  EXPECT_EQ(w->path(), dir_ + "/host.42.2.rank3.fp8trace");
  EXPECT_EQ(Slurp(dir_ + "/host.42.rank3.fp8trace"), "earlier run");
  auto again = Make(&error);
  ASSERT_NE(again, nullptr) << error;
  EXPECT_EQ(again->path(), dir_ + "/host.42.3.rank3.fp8trace");
}

TEST_F(CreateNew, ANameWithASlashOrAMissingDirectoryIsRefusedWithOneReason) {
  std::string error;
  EXPECT_EQ(TraceFileWriter::CreateNew(dir_, "../escape", ".fp8trace", &error), nullptr);
  EXPECT_NE(error.find("not a file name"), std::string::npos) << error;
  EXPECT_FALSE(fs::exists(root_ + "/escape.fp8trace"));
  EXPECT_EQ(TraceFileWriter::CreateNew(dir_, "h", "/x.fp8trace", &error), nullptr);
  EXPECT_EQ(TraceFileWriter::CreateNew(dir_, "", ".fp8trace", &error), nullptr);
  EXPECT_EQ(TraceFileWriter::CreateNew(root_ + "/missing", "h", ".fp8trace", &error), nullptr);
  EXPECT_EQ(error, root_ + "/missing: No such file or directory");
}

}  // namespace
}  // namespace fp8audit
