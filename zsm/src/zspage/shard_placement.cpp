// Shard placement off the store path (design: shard_placement.h): handing out and giving
// back the threads' own hints, and moving a thread off a busy shard.
#include "zspage/shard_placement.h"

#include <atomic>

namespace zsm {
inline namespace ZSM_VARIANT_NS {

constinit thread_local uint32_t shard_hint = 0;

namespace {

// The hints of the threads placed now, one bit each; bit 0 stands for the threads not
// placed, which use shard 0. A thread is placed on the lowest free hint and gives it back
// when it exits, so a thread that starts after another exited takes its place. (Hints are
// per process and masks per pool, so after exits two live threads can still share a shard
// that another leaves free.) Past 63 threads alive at once, hints count on from 64.
std::atomic<uint64_t> hints_in_use{1};
std::atomic<uint32_t> hints_past_bitmap{64};

// The hint bit this thread holds (0: none), given back when the thread exits.
struct HeldHint {
  uint32_t bit = 0;
  ~HeldHint() {
    if (bit != 0) hints_in_use.fetch_and(~(uint64_t{1} << bit), std::memory_order_relaxed);
  }
};
thread_local HeldHint held_hint;

// Pauses a store spends on its busy shard before it moves. Stores and frees hold a shard for
// tens of nanoseconds, so most waits end within this; a thread that moves leaves its objects
// behind, and their frees keep taking its old shard.
constexpr int kBusyShardSpins = 64;

}  // namespace

uint32_t own_shard_hint() {
  uint64_t used = hints_in_use.load(std::memory_order_relaxed);
  while (~used != 0) {
    const uint32_t bit = static_cast<uint32_t>(__builtin_ctzll(~used));
    if (hints_in_use.compare_exchange_weak(used, used | (uint64_t{1} << bit),
                                           std::memory_order_relaxed)) {
      held_hint.bit = bit;
      return kPlaced | bit;
    }
  }
  return kPlaced | hints_past_bitmap.fetch_add(1, std::memory_order_relaxed);
}

// A thread's first move takes it to a shard of its own (own_shard_hint()), so threads that
// store at the same time spread over the shards at once; later moves go to the next.
ClassShard* lock_busy_store_shard(const ZsPool* pool, ClassShard* first, ClassShard* shard) {
  if (shard->lock.try_lock_spinning(kBusyShardSpins)) {
    count_under_lock(shard->lock_waits);
    return shard;
  }
  if (pool->fast.shard_mask != 0) {
    shard_hint = (shard_hint & kPlaced) != 0 ? shard_hint + 1 : own_shard_hint();
    shard = first + (shard_hint & pool->fast.shard_mask);
    lock_shard(shard);
    count_under_lock(shard->moves_in);
    return shard;
  }
  lock_shard_contended(shard);
  return shard;
}

void forget_other_threads_shard_hints() {
  uint64_t mine = held_hint.bit != 0 ? uint64_t{1} << held_hint.bit : 0;
  hints_in_use.store(1 | mine, std::memory_order_relaxed);
}

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
