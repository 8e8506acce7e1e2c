// tests/zsm/fork_test.cpp: fork() while other threads use the pools (zsmalloc.h, "fork()"). The
// child has only the thread that forked; whatever the parent's other threads were doing at
// the fork (cached store/free pairs, locked ones, compaction, drains), the child must be able
// to store into, read, free, drain, compact, check and destroy every pool it inherited. Each
// child runs under alarm(), so a hang kills it, and the parent waits for it with a deadline
// and asserts that it exited 0.
#include <gtest/gtest.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zsm/zsmalloc.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <random>
#include <thread>
#include <vector>

#include "test_support.h"

namespace {

using zsm_test::make_pattern;

#ifdef ZSM_TEST_SANITIZED
constexpr int kForks = 30;
constexpr unsigned kChildSeconds = 60;
#else
constexpr int kForks = 40;
constexpr unsigned kChildSeconds = 20;
#endif

zs_pool* make_pool(unsigned flags, unsigned shards, unsigned long max_pages) {
  zs_pool_config cfg{};
  cfg.flags = flags;
  cfg.nr_shards = shards;
  cfg.max_pages = max_pages;
  return zs_create_pool_ex("fork", &cfg);
}

// What a child does with one inherited pool; returns 0, or the step that failed (1..).
int use_inherited_pool(zs_pool* pool) {
  std::vector<unsigned long> hs;
  std::vector<size_t> sizes;
  for (size_t i = 0; i < 300; i++) {
    size_t size = 16 + (hs.size() * 37) % 3000;
    std::vector<uint8_t> bytes = make_pattern(size, 7000 + hs.size());
    unsigned long h = zs_store(pool, bytes.data(), size);
    if (h == 0 && errno != ENOMEM) return 1;
    if (h == 0) continue;
    hs.push_back(h);
    sizes.push_back(size);
  }
  for (size_t i = 0; i < hs.size(); i++)
    if (!zsm_test::check_object(pool, hs[i], make_pattern(sizes[i], 7000 + i))) return 2;
  for (size_t i = 0; i < hs.size(); i += 2) zs_free(pool, hs[i]);
  zs_drain_thread_caches(pool);
  struct zs_pool_stats stats{};
  zs_pool_stats(pool, &stats);
  if (stats.cached_objs != 0) return 3;
  zs_compact(pool);
  for (size_t i = 1; i < hs.size(); i += 2)
    if (!zsm_test::check_object(pool, hs[i], make_pattern(sizes[i], 7000 + i))) return 4;
  if (zs_check_pool(pool, stderr) != 0) return 5;
  for (size_t i = 1; i < hs.size(); i += 2) zs_free(pool, hs[i]);
  zs_compact(pool);
  if (zs_check_pool(pool, stderr) != 0) return 6;
  zs_destroy_pool(pool);
  return 0;
}

// Waits up to `limit` for the child; kills it when it is still running. Returns its status.
int wait_with_deadline(pid_t pid, std::chrono::seconds limit, bool* timed_out) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  *timed_out = false;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return -1;
    if (std::chrono::steady_clock::now() > deadline) {
      *timed_out = true;
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

TEST(Fork, ChildUsesInheritedPoolsWhateverOtherThreadsWereDoing) {
  std::vector<zs_pool*> pools = {
      make_pool(0, 0, 0),                         // caches, a shard per CPU
      make_pool(0, 1, 64),                        // caches, one shard, a memory limit
      make_pool(ZS_POOL_NO_THREAD_CACHE, 2, 0),   // the locked path only
  };
  for (zs_pool* p : pools) ASSERT_NE(p, nullptr);
  std::atomic<bool> stop{false};
  std::atomic<unsigned long> pairs{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < 3; t++) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(t + 1);
      std::vector<std::vector<unsigned long>> live(pools.size());
      const std::vector<uint8_t> bytes = make_pattern(4096, t);
      while (!stop.load(std::memory_order_relaxed)) {
        for (size_t p = 0; p < pools.size(); p++) {
          size_t size = 16 + rng() % 3000;
          unsigned long h = zs_store(pools[p], bytes.data(), size);
          if (h != 0) live[p].push_back(h);
          if (live[p].size() > 50 || (h == 0 && !live[p].empty())) {
            size_t i = rng() % live[p].size();
            zs_free(pools[p], live[p][i]);
            live[p][i] = live[p].back();
            live[p].pop_back();
          }
          pairs.fetch_add(1, std::memory_order_relaxed);
        }
        if (t == 2 && rng() % 64 == 0) zs_compact(pools[rng() % pools.size()]);
        if (t == 1 && rng() % 64 == 0) zs_drain_thread_caches(pools[rng() % pools.size()]);
      }
      for (size_t p = 0; p < pools.size(); p++)
        for (unsigned long h : live[p]) zs_free(pools[p], h);
    });
  }
  int failed = 0;
  for (int i = 0; i < kForks; i++) {
    unsigned long before = pairs.load();
    while (pairs.load() < before + 200) std::this_thread::yield();  // the workers are busy
    pid_t pid = fork();
    ASSERT_GE(pid, 0) << "fork failed, errno " << errno;
    if (pid == 0) {
      alarm(kChildSeconds);
      int rc = 0;
      for (size_t p = 0; p < pools.size() && rc == 0; p++)
        if (int step = use_inherited_pool(pools[p])) rc = 10 * static_cast<int>(p + 1) + step;
      _exit(rc);
    }
    bool timed_out = false;
    int status = wait_with_deadline(pid, std::chrono::seconds(kChildSeconds + 10), &timed_out);
    bool ok = !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    EXPECT_TRUE(ok) << "fork " << i << ": "
                    << (timed_out             ? "the child hung"
                        : WIFSIGNALED(status) ? "the child died of signal " +
                                                    std::to_string(WTERMSIG(status)) +
                                                    (WTERMSIG(status) == SIGALRM ? " (hung)" : "")
                                              : "the child exited " +
                                                    std::to_string(WEXITSTATUS(status)));
    failed += ok ? 0 : 1;
    if (failed >= 3) break;  // a regression fails in a minute, not in kForks deadlines
  }
  stop = true;
  for (auto& w : workers) w.join();
  EXPECT_EQ(failed, 0) << "of " << kForks << " forks";
  for (zs_pool* p : pools) {
    EXPECT_EQ(zs_check_pool(p, stderr), 0);
    EXPECT_TRUE(zsm_test::compact_and_check_empty(p));
    zs_destroy_pool(p);
  }
}

}  // namespace
