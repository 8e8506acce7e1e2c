// tests/region/region_support.h: what the region's tests share: the skip when userfaultfd is
// not available (with the library's own one-line reason), the page patterns, stats, and a
// read(2) into region memory.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <zsm/region.h>

#include "region_patterns.h"

// ZSM_TEST_TSAN: built with ThreadSanitizer (GCC says so one way, Clang another), whose own
// threads some tests cannot tell from the program's.
#if defined(__SANITIZE_THREAD__)
#define ZSM_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ZSM_TEST_TSAN 1
#endif
#endif

namespace zsm_test {

// A fresh directory for one test's files, removed with everything in it: under TMPDIR, or
// under `parent` (a file system O_DIRECT works on, say: tmpfs has none).
struct TempDir {
  explicit TempDir(const std::string& prefix, const std::string& parent = "") {
    std::filesystem::path where = parent.empty() ? std::filesystem::temp_directory_path() : std::filesystem::path(parent);
    std::string t = (where / (prefix + "-XXXXXX")).string();
    path = mkdtemp(t.data());
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  size_t entries() const {
    return static_cast<size_t>(std::distance(std::filesystem::directory_iterator(path), {}));
  }
  std::string path;
};

// While the evictor retires a batch, the pages it compressed are given back before their slots'
// memory is dropped at the batch's end (docs/region.md, the budget): resident + probation may
// pass the hard limit by that batch, 64 pages at most.
inline constexpr size_t kRetiringBytes = 64 * kPage;

// "" when a region can be made here, else zsm_region_last_error()'s line.
inline std::string region_unavailable() {
  zsm_region* r = zsm_region_create(64 * kPage, nullptr);
  if (r == nullptr) return zsm_region_last_error();
  zsm_region_destroy(r);
  return "";
}

#define ZSM_REQUIRE_REGION()                                                  \
  do {                                                                        \
    if (std::string why = zsm_test::region_unavailable(); !why.empty()) {     \
      GTEST_SKIP() << why;                                                    \
    }                                                                         \
  } while (0)

inline struct zsm_region_stats region_stats(zsm_region* r) {
  struct zsm_region_stats s {};
  EXPECT_EQ(zsm_region_stats(r, &s), 0);
  return s;
}

// The stats once the evictor sleeps with nothing owed (it works off the fault path, so right
// after a burst of faults resident + probation may be anywhere up to the hard limit, and a
// batch may be half counted). Gives up after 5 s (the caller's checks then fail with the figures).
inline struct zsm_region_stats settled_stats(zsm_region* r) {
  struct zsm_region_stats s = region_stats(r);
  for (int i = 0; i < 5000 && !s.evictor_idle; ++i) {
    usleep(1000);
    s = region_stats(r);
  }
  return s;
}

// A region of `pages` pages at a budget of `budget_pages`, and its base; r is null (errno and
// zsm_region_last_error() set) when it cannot be made.
struct Made {
  zsm_region* r = nullptr;
  unsigned char* base = nullptr;
};

inline Made make(size_t pages, size_t budget_pages, zsm_region_options o = {}) {
  o.budget_bytes = budget_pages * kPage;
  Made m;
  m.r = zsm_region_create(pages * kPage, &o);
  if (m.r != nullptr) m.base = static_cast<unsigned char*>(zsm_region_base(m.r));
  return m;
}

// Runs body in a child of fork(); its exit status (0: every check held), or -1 when it died
// (a signal: 128 + its number is not told apart here) or hung past `seconds`.
inline int in_child(const std::function<int()>& body, unsigned seconds = 120) {
  pid_t pid = fork();
  if (pid == 0) {
    alarm(seconds);  // a hang fails, it does not stall the suite
    _exit(body());
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Pages of fill_page(p, version) that do not hold it.
inline int wrong_pages(const unsigned char* base, size_t first, size_t n, uint64_t version) {
  int wrong = 0;
  for (size_t p = first; p < first + n; ++p) wrong += page_mismatch(base + p * kPage, p, version) != -1;
  return wrong;
}

// read(2) of `len` bytes of `fill` from a pipe into dst: a syscall's access to region memory,
// the kernel's own fault if the page is evicted. The bytes read, or -1 with errno.
inline ssize_t read_from_pipe_into(void* dst, size_t len, char fill) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  std::vector<char> bytes(len, fill);
  ssize_t w = write(fds[1], bytes.data(), len);
  ssize_t n = w == static_cast<ssize_t>(len) ? read(fds[0], dst, len) : -1;
  int saved = errno;
  close(fds[0]);
  close(fds[1]);
  errno = saved;
  return n;
}

}  // namespace zsm_test
