// The region's counters (zsm_region_stats()), written by whichever part does the work and read
// without any lock: each is an atomic, and a reader may see one lag another.
#pragma once

#include <atomic>
#include <cstdint>

namespace zsm::region {

struct Counters {
  // Pages: mapped now, in probation now, pinned now.
  std::atomic<uint64_t> resident{0}, probation{0}, pinned{0};
  // Copies (copy_store.cpp): held, their pool bytes, same-filled, whole pages.
  std::atomic<uint64_t> stored{0}, compr_bytes{0}, same{0}, whole{0};
  // Faults (fault_server.cpp).
  std::atomic<uint64_t> faults{0}, zero_faults{0}, wp_faults{0}, fault_around{0}, refaults{0};
  std::atomic<uint64_t> probation_faults{0}, budget_waits{0};
  // Eviction (evictor.cpp).
  std::atomic<uint64_t> evictions{0}, clean_evictions{0}, io_pinned{0}, evictor_runs{0};
  std::atomic<uint64_t> over_budget{0};  // pages faulted in past the hard limit (evictor stalled)
  std::atomic<uint64_t> sweep_ns{0};     // the CLOCK hand's last whole turn over the region
  // The most used (decompressed pages, at each fault), and the pool's and everything's most
  // (at each evictor batch), in bytes.
  std::atomic<uint64_t> peak_used{0}, peak_pool{0}, peak_total{0};
  // Aging (evictor_aging.cpp): pages moved out to learn their idle age, probation pages
  // retired for it, the hand's last whole turn while aging (wall time), and the time faults
  // spent bringing pages back (from probation, the pool or the file; waits for room included),
  // of it the faults that decompressed; the cold age now, and the bytes saved and the pages'
  // bytes summed over time.
  std::atomic<uint64_t> aged{0}, cold_evictions{0}, aging_turn_ms{0}, stall_ns{0};
  std::atomic<uint64_t> promotion_stall_ns{0}, cold_age_ms{0}, saved_kib_ms{0}, held_kib_ms{0};
  std::atomic<uint64_t> kept_incompressible{0};  // cold pages aging put back, incompressible
  std::atomic<uint64_t> clean{0};  // mapped pages whose copy is still valid (PageMoves::set_kind)
  // The backing file.
  std::atomic<uint64_t> written_back{0}, read_back{0}, file_bytes{0};
};

inline void bump(std::atomic<uint64_t>& c, uint64_t n = 1) { c.fetch_add(n, std::memory_order_relaxed); }
inline void drop(std::atomic<uint64_t>& c, uint64_t n = 1) { c.fetch_sub(n, std::memory_order_relaxed); }
inline uint64_t get(const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); }
inline void raise_to(std::atomic<uint64_t>& peak, uint64_t v) {
  uint64_t old = peak.load(std::memory_order_relaxed);
  while (v > old && !peak.compare_exchange_weak(old, v, std::memory_order_relaxed)) {
  }
}

}  // namespace zsm::region
