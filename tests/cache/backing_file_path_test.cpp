// The backing file's path belongs to the user (zsm/backing_file.hpp, "The path"): the cache
// creates a file of its own there (O_EXCL), or an unnamed one in a directory, and never opens,
// truncates, writes or removes anything it did not create: an existing file, a symlink, a hard
// link's other name, a device node, a FIFO, or a file renamed onto the path while it ran. A
// second cache given the same path is refused while the first runs. A child of fork() never
// touches its parent's file, and its copy of the cache is destroyed without waiting for the
// parent's writer.
#include <zsm/cache.hpp>

#include <gtest/gtest.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bytes.h"

namespace {

namespace fs = std::filesystem;
using zsm_test::Bytes;

// A fresh, empty folder for one test.
fs::path scratch_dir(const std::string& name) {
  fs::path dir = fs::current_path() / ("backing_file_path_test." + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

zsm::CacheOptions options_at(const fs::path& path) {
  zsm::CacheOptions o;
  o.capacity_bytes = 1 << 20;
  zsm::BackingFileOptions f;
  f.path = path.string();
  f.capacity_bytes = 8 << 20;
  f.batch_bytes = size_t{128} << 10;
  f.write_queue_batches = 1;
  o.backing_file = f;
  return o;
}

Bytes page_of(uint64_t n) {  // compressible, to about 40 % under lz4, different for every n
  Bytes b(4096);
  uint64_t x = zsm_test::mix64(n);
  for (size_t i = 0; i < b.size(); i++) {
    if (i % 16 == 0) x = zsm_test::mix64(x);
    b[i] = static_cast<std::byte>(i % 16 < 6 ? 'a' + (x >> (i % 16 * 8)) % 26 : ' ');
  }
  return b;
}

std::string key_of(uint64_t n) { return "page-" + std::to_string(n); }

// Puts enough pages that memory evicts most of them to the file, then waits for the file.
void fill(zsm::Cache& c, uint64_t n) {
  for (uint64_t i = 0; i < n; i++) {
    c.put(key_of(i), page_of(i));
    if (i % 32 == 31) c.flush_backing_file();
  }
  c.flush_backing_file();
}

size_t right_values(zsm::Cache& c, uint64_t n) {
  size_t right = 0;
  for (uint64_t i = 0; i < n; i++) {
    std::optional<Bytes> v = c.get(key_of(i));
    EXPECT_TRUE(!v || *v == page_of(i)) << "key " << i;
    right += v && *v == page_of(i);
  }
  return right;
}

std::string contents_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// What refusing a path must look like: std::system_error with EEXIST, naming the path.
void expect_refused(const fs::path& path) {
  try {
    zsm::Cache c(options_at(path));
    ADD_FAILURE() << "a cache was made on " << path;
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), std::errc::file_exists) << e.what();
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
}

struct stat stat_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st;
}

TEST(BackingFilePath, AnExistingFileIsRefusedAndLeftAsItWas) {
  fs::path dir = scratch_dir("existing");
  fs::path file = dir / "data";
  std::string data(1 << 20, 'x');
  std::ofstream(file, std::ios::binary) << data;
  expect_refused(file);
  EXPECT_TRUE(contents_of(file) == data) << "the existing file changed";
}

TEST(BackingFilePath, ASymlinkAndItsTargetAreLeftAsTheyWere) {
  fs::path dir = scratch_dir("symlink");
  fs::path target = dir / "target", link = dir / "link", dangling = dir / "dangling";
  std::ofstream(target, std::ios::binary) << "the user's data";
  fs::create_symlink(target, link);
  fs::create_symlink(dir / "nothing-here", dangling);
  expect_refused(link);
  expect_refused(dangling);  // not created through the link either
  EXPECT_EQ(contents_of(target), "the user's data");
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_FALSE(fs::exists(dir / "nothing-here"));
}

TEST(BackingFilePath, AHardLinksOtherNameKeepsItsData) {
  fs::path dir = scratch_dir("hardlink");
  fs::path file = dir / "file", other = dir / "other";
  std::ofstream(file, std::ios::binary) << "linked data";
  fs::create_hard_link(file, other);
  expect_refused(other);
  EXPECT_EQ(contents_of(file), "linked data");
  EXPECT_EQ(fs::hard_link_count(file), 2u);
}

TEST(BackingFilePath, DeviceNodesAndFifosAreNeverOpened) {
  fs::path dir = scratch_dir("nodes");
  fs::path fifo = dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_refused(fifo);  // opening it for writing would block until a reader came
  EXPECT_TRUE(fs::is_fifo(fifo));
  fs::path chr = dir / "null", blk = dir / "loop";
  if (::mknod(chr.c_str(), S_IFCHR | 0600, makedev(1, 3)) != 0 ||
      ::mknod(blk.c_str(), S_IFBLK | 0600, makedev(7, 200)) != 0)
    GTEST_SKIP() << "mknod: " << std::strerror(errno) << " (needs CAP_MKNOD)";
  expect_refused(chr);
  expect_refused(blk);
  EXPECT_TRUE(fs::is_character_file(chr));
  EXPECT_TRUE(fs::is_block_file(blk));
}

TEST(BackingFilePath, TheFileItCreatedIsLockedAndRemovedAtClose) {
  fs::path dir = scratch_dir("own");
  fs::path path = dir / "cold";
  {
    zsm::Cache c(options_at(path));
    fill(c, 1500);
    EXPECT_GT(c.stats().backing_file.hits + right_values(c, 1500), 0u);
    struct stat st = stat_of(path);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(::flock(fd, LOCK_EX | LOCK_NB), -1);  // the cache holds it
    EXPECT_EQ(errno, EWOULDBLOCK);
    ::close(fd);
  }
  EXPECT_FALSE(fs::exists(path));
}

TEST(BackingFilePath, ASecondCacheOnTheSamePathIsRefusedAndTheFirstKeepsItsValues) {
  fs::path dir = scratch_dir("shared");
  fs::path path = dir / "cold";
  zsm::Cache a(options_at(path));
  fill(a, 1500);
  const ino_t inode = stat_of(path).st_ino;
  expect_refused(path);
  EXPECT_EQ(stat_of(path).st_ino, inode);
  EXPECT_GT(right_values(a, 1500), 1000u);
  EXPECT_GT(a.stats().backing_file.hits, 0u);
}

TEST(BackingFilePath, AFileRenamedOntoThePathIsNotRemovedAtClose) {
  fs::path dir = scratch_dir("renamed");
  fs::path path = dir / "cold", users = dir / "users";
  {
    zsm::Cache c(options_at(path));
    fill(c, 500);
    std::ofstream(users, std::ios::binary) << "moved here by someone else";
    fs::rename(users, path);  // the cache's file now has no name
    fill(c, 1500);
    right_values(c, 1500);
  }
  EXPECT_EQ(contents_of(path), "moved here by someone else");
}

TEST(BackingFilePath, ADirectoryGetsAnUnnamedFileThatLeavesNothingBehind) {
  fs::path dir = scratch_dir("directory");
  std::ofstream(dir / "keep", std::ios::binary) << "unrelated";
  {
    zsm::Cache c(options_at(dir));
    fill(c, 1500);
    EXPECT_GT(right_values(c, 1500), 1000u);
    zsm::CacheStats s = c.stats();
    EXPECT_GT(s.backing_file.hits, 0u);
    EXPECT_GT(s.backing_file.bytes_written, 0u);
    size_t names = 0;
    for (const auto& e : fs::directory_iterator(dir)) names += e.path().filename() != "keep";
    EXPECT_EQ(names, 0u) << "the file has a name in " << dir;
  }
  EXPECT_EQ(contents_of(dir / "keep"), "unrelated");
}

// The child of fork() gets a copy of the cache whose file is detached: it reads nothing from
// the parent's file, writes nothing to it, and destroys its copy without removing the file or
// waiting for the parent's writer thread (which does not exist in the child).
TEST(BackingFilePath, AChildOfForkNeverTouchesTheParentsFile) {
  fs::path dir = scratch_dir("fork");
  fs::path path = dir / "cold";
  auto* c = new zsm::Cache(options_at(path));
  fill(*c, 1500);
  const struct stat before = stat_of(path);
  const std::string bytes_before = contents_of(path);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(20);
    int bad = 0;
    for (uint64_t i = 0; i < 1500; i++) {
      std::optional<Bytes> v = c->get(key_of(i));
      bad += v && *v != page_of(i);
    }
    for (uint64_t i = 2000; i < 4000; i++) c->put(key_of(i), page_of(i));
    c->flush_backing_file();
    delete c;
    _exit(bad == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  const struct stat after = stat_of(path);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_TRUE(contents_of(path) == bytes_before) << "the child wrote to the parent's file";
  EXPECT_GT(right_values(*c, 1500), 1000u);
  delete c;
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
