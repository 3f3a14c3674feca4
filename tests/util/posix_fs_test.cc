#include "tests/util/posix_fs.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

namespace fp8audit::testutil {
namespace {

void Touch(const std::string& path) { std::ofstream(path) << "x"; }

TEST(PosixFs, MakeTempDirectoryCreatesAFreshDirectoryEachCall) {
  const std::string a = MakeTempDirectory("fp8audit-posix-fs-");
  const std::string b = MakeTempDirectory("fp8audit-posix-fs-");
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  EXPECT_NE(a, b);
  EXPECT_TRUE(PathExists(a));
  EXPECT_TRUE(RemoveTree(a));
  EXPECT_TRUE(RemoveTree(b));
  EXPECT_FALSE(PathExists(a));
}

TEST(PosixFs, ListDirectoryGivesSortedNamesWithoutDotEntries) {
  const std::string dir = MakeTempDirectory("fp8audit-posix-fs-");
  ASSERT_FALSE(dir.empty());
  Touch(dir + "/b.fp8trace");
  Touch(dir + "/a.txt");
  ASSERT_EQ(mkdir((dir + "/c").c_str(), 0700), 0);
  EXPECT_EQ(ListDirectory(dir), (std::vector<std::string>{"a.txt", "b.fp8trace", "c"}));
  EXPECT_TRUE(ListDirectory(dir + "/missing").empty());
  EXPECT_TRUE(RemoveTree(dir));
}

TEST(PosixFs, RemoveTreeRemovesNestedDirectoriesButNotWhatSymlinksPointAt) {
  const std::string outside = MakeTempDirectory("fp8audit-posix-fs-outside-");
  const std::string dir = MakeTempDirectory("fp8audit-posix-fs-");
  ASSERT_FALSE(outside.empty());
  ASSERT_FALSE(dir.empty());
  Touch(outside + "/keep");
  ASSERT_EQ(mkdir((dir + "/a").c_str(), 0700), 0);
  ASSERT_EQ(mkdir((dir + "/a/b").c_str(), 0700), 0);
  Touch(dir + "/a/b/file");
  Touch(dir + "/top");
  ASSERT_EQ(symlink(outside.c_str(), (dir + "/a/link").c_str()), 0);
  EXPECT_TRUE(RemoveTree(dir));
  EXPECT_FALSE(PathExists(dir));
  EXPECT_TRUE(PathExists(outside + "/keep"));
  EXPECT_TRUE(RemoveTree(outside));
}

TEST(PosixFs, RemoveTreeOfAMissingPathSucceedsAndOfAFileRemovesIt) {
  const std::string dir = MakeTempDirectory("fp8audit-posix-fs-");
  ASSERT_FALSE(dir.empty());
  EXPECT_TRUE(RemoveTree(dir + "/missing"));
  Touch(dir + "/file");
  EXPECT_TRUE(RemoveTree(dir + "/file"));
  EXPECT_FALSE(PathExists(dir + "/file"));
  EXPECT_TRUE(RemoveTree(dir));
}

TEST(PosixFs, PathExistsIsFalseForADanglingSymlink) {
  const std::string dir = MakeTempDirectory("fp8audit-posix-fs-");
  ASSERT_FALSE(dir.empty());
  ASSERT_EQ(symlink((dir + "/nowhere").c_str(), (dir + "/dangling").c_str()), 0);
  EXPECT_FALSE(PathExists(dir + "/dangling"));
  EXPECT_TRUE(RemoveTree(dir));
}

TEST(PosixFs, TempDirIsAFreshDirectoryRemovedWithItsContentsWhenItGoes) {
  std::string kept;
  {
    const TempDir a("fp8audit-posix-fs-");
    const TempDir b("fp8audit-posix-fs-");
    EXPECT_NE(a.path(), b.path());
    EXPECT_EQ(ListDirectory(a.path()), std::vector<std::string>{});
    ASSERT_EQ(mkdir(a.Path("sub").c_str(), 0700), 0);
    Touch(a.Path("sub/file"));
    kept = a.path();
  }
  EXPECT_FALSE(PathExists(kept));
}

}  // namespace
}  // namespace fp8audit::testutil
