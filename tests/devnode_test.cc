// `srdma devnode`: the node UCX looks for, made and removed only when it is
// softrdma's (tools/devnode.h), here under a directory of the test's own.
#include "tools/devnode.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;

class DevNode : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "mknod of a character device needs root";
    char tmpl[] = "/tmp/srdma-devnode.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    path_ = root_ + "/infiniband/srdma0";
  }
  void TearDown() override {
    if (!root_.empty()) fs::remove_all(root_);
  }
  std::string root_, path_;
  std::ostringstream out_;
};

TEST_F(DevNode, CreatesTheNullDevicesNumbersAndRemovesIt) {
  ASSERT_TRUE(srdma::tools::devnode_create(out_, path_));
  struct stat st{};
  ASSERT_EQ(lstat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(major(st.st_rdev), 1u);
  EXPECT_EQ(minor(st.st_rdev), 3u);
  EXPECT_EQ(st.st_mode & 0777, 0666u);  // UCX's access(R_OK | W_OK) holds for every user
  EXPECT_TRUE(srdma::tools::devnode_create(out_, path_)) << "already there: nothing to do";
  ASSERT_TRUE(srdma::tools::devnode_remove(out_, path_));
  EXPECT_FALSE(fs::exists(path_));
  EXPECT_FALSE(fs::exists(root_ + "/infiniband")) << "its directory, left empty, goes too";
  EXPECT_TRUE(srdma::tools::devnode_remove(out_, path_)) << "absent: nothing to do";
}

TEST_F(DevNode, LeavesAnythingElseAlone) {
  fs::create_directories(root_ + "/infiniband");
  std::ofstream(path_) << "not a device";
  auto made = srdma::tools::devnode_create(out_, path_);
  ASSERT_FALSE(made);
  EXPECT_EQ(made.error().code, EEXIST);
  auto removed = srdma::tools::devnode_remove(out_, path_);
  ASSERT_FALSE(removed);
  EXPECT_EQ(removed.error().code, EEXIST);
  EXPECT_TRUE(fs::is_regular_file(path_)) << "a file that is not softrdma's node stays";

  // Another character device (the zero device's numbers, 1:5) stays too.
  fs::remove(path_);
  ASSERT_EQ(mknod(path_.c_str(), S_IFCHR | 0600, makedev(1, 5)), 0);
  EXPECT_FALSE(srdma::tools::devnode_remove(out_, path_));
  EXPECT_TRUE(fs::exists(path_));
  // A real HCA's node beside ours is never touched by --remove.
  ASSERT_EQ(unlink(path_.c_str()), 0);
  ASSERT_TRUE(srdma::tools::devnode_create(out_, path_));
  ASSERT_EQ(mknod((root_ + "/infiniband/uverbs0").c_str(), S_IFCHR | 0600, makedev(231, 192)), 0);
  ASSERT_TRUE(srdma::tools::devnode_remove(out_, path_));
  EXPECT_TRUE(fs::exists(root_ + "/infiniband/uverbs0")) << "the directory is not empty: it stays, with the other node";
}

}  // namespace
