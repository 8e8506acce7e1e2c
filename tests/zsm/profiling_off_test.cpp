// tests/zsm/profiling_off_test.cpp: allocation profiling compiled out (ZSM_PROFILING=0), in every
// build whatever the ZSM_PROFILING option says: this test links its own variant of the core
// (namespace zsm::noprof, tests/zsm/CMakeLists.txt) and calls it directly. The switch reports
// EOPNOTSUPP, nothing is ever counted, and the report says profiling is not built in.
#define ZSM_VARIANT_NS noprof
#include "pool/pool.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

namespace core = zsm::noprof;

TEST(ProfilingOff, SwitchReportsNotSupportedAndNothingIsCounted) {
  errno = 0;
  EXPECT_EQ(core::zs_alloc_profiling_set(1), -1);
  EXPECT_EQ(errno, EOPNOTSUPP);
  EXPECT_EQ(core::zs_alloc_profiling_enabled(), 0);

  static zs_alloc_tag tag = {"off.c", "f", 1, 0, 0, 0, nullptr};
  core::ZsPool* pool = core::zs_create_pool("off", nullptr);
  ASSERT_NE(pool, nullptr);
  unsigned long h = core::locked_path::malloc_tagged(pool, 100, &tag);
  ASSERT_NE(h, 0u);
  EXPECT_EQ(tag.calls, 0u);
  EXPECT_EQ(tag.registered, 0u);
  EXPECT_EQ(core::zs_alloc_info_read(nullptr, 0), 0u);
  core::locked_path::free(pool, h);
  core::zs_destroy_pool(pool);

  char* text = nullptr;
  size_t len = 0;
  FILE* out = open_memstream(&text, &len);
  EXPECT_EQ(core::zs_print_allocinfo(out, 0), 0);
  std::fclose(out);
  EXPECT_NE(std::string(text, len).find("not built in"), std::string::npos);
  std::free(text);
}

}  // namespace
