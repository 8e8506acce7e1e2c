// tests/zsm/dcheck_test.cpp: the debug-assert tier (ZSM_DCHECK, report.h). This file is compiled
// as the invariants build compiles the library (ZSM_DEBUG_INVARIANTS=1) and links a core
// variant that holds the report path (namespace zsm::noprof, tests/zsm/CMakeLists.txt): a false
// condition is one fatal line naming it and its place; a true one does nothing. In other
// builds the macro compiles to nothing, which the library's own build shows (no DCHECK code
// on the golden fast path, bench/golden/fast_path.json).
#define ZSM_VARIANT_NS noprof
#define ZSM_DEBUG_INVARIANTS 1
#include "zspage/report.h"

#include <gtest/gtest.h>

namespace {

int evaluations = 0;
bool counted(bool value) {
  evaluations++;
  return value;
}

TEST(DCheck, TrueConditionPassesAndIsEvaluatedOnce) {
  evaluations = 0;
  ZSM_DCHECK(counted(true));
  EXPECT_EQ(evaluations, 1);
}

TEST(DCheckDeathTest, FalseConditionIsOneFatalReport) {
  EXPECT_DEATH(ZSM_DCHECK(1 + 1 == 3),
               "zsm: fatal: .*dcheck_test.cpp:[0-9]+: ZSM_DCHECK\\(1 \\+ 1 == 3\\) failed");
}

}  // namespace
