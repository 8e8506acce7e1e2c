// The region's backing file (zsm_region_options.backing_file): the copies of stored pages
// that the pool has no room for (compressed_budget_bytes), written by the evictor and read
// back when a page faults. The file is made by the cold tier's rules (owned_file.h: the path
// is the user's), and nothing else writes it. Not thread-safe: the copy store serialises
// every call but read_at(), which any thread may make at once with the others.
//
// Space is 512-byte sectors: a copy takes the fewest that hold it (1 to 8: a copy is at most
// one 4 KiB page, whatever the pool's page size) as one extent.
// Freed extents go on a list for their length and are reused first; past them the file grows
// to its capacity, and then a longer free extent is split. Nothing is ever overwritten while
// a page's copy is in it: a full file refuses the write, and the copy stays in the pool.
//
// Each extent's location carries the low 32 bits of its bytes' XXH3, checked on every read,
// so a copy the disk changed is never installed as the page. After each batch of writes the
// written pages leave the page cache (sync_file_range, then POSIX_FADV_DONTNEED): the file's
// data does not stay in the memory that writing it back was meant to free.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "owned_file.h"

namespace zsm::region {

class PageFile {
 public:
  static constexpr size_t kSector = 512;
  static constexpr size_t kMaxSectors = 8;  // a whole 4 KiB page

  // The file at `path`, holding at most `capacity` bytes. Throws std::system_error naming the
  // path (the cold tier's refusals: it exists, it cannot be made or locked).
  PageFile(const std::string& path, uint64_t capacity);

  // Writes a copy of 1..4096 bytes: its location, or std::nullopt when the file is full, the
  // write failed (the file is left as it was) or the copy is longer than a page.
  std::optional<uint64_t> write(std::span<const std::byte> bytes);
  // Reads the copy at `where` through descriptor `fd` (out.size() is the length written):
  // false when the read failed or the bytes are not those written.
  static bool read_at(int fd, uint64_t where, std::span<std::byte> out);
  // The copy at `where`, of `length` bytes, is no longer needed: its sectors are reused.
  // With `may_allocate` false (a signal handler's call) nothing is allocated: the free list
  // keeps room for kReleaseRoom more releases after every call that may allocate, and past
  // that the sectors are left unused (counted in lost_bytes()).
  void release(uint64_t where, size_t length, bool may_allocate = true);
  // After a batch of writes: to disk, then out of the page cache.
  void end_batch();
  // Before fork(): an unnamed file in the same directory holding a copy of this one's
  // sectors, for the child (whose copies must not change when the parent reuses sectors), as
  // far as the file system takes it: `bytes` copied from the start (all the file's when
  // `error` is 0), no file at all when it could not be made (a full disk, no descriptor left).
  struct ChildCopy {
    detail::OwnedFile file;
    uint64_t bytes = 0;
    int error = 0;
    std::string why;  // when `error`: what failed, naming the directory
  };
  ChildCopy copy_for_child() const;
  // Whether the copy at `where`, `length` bytes long, lies within the first `bytes` of the file.
  static bool within(uint64_t where, size_t length, uint64_t bytes) {
    return (sector_of(where) + sectors_for(length)) * kSector <= bytes;
  }
  // In the child: the copy becomes this file (the parent's name, lock and file stay its own).
  void adopt_in_child(detail::OwnedFile copy);
  int fd() const { return file_.fd(); }

  // Whether the last write found no room, or failed (the disk is full): no write is tried
  // again until a release makes room.
  [[nodiscard]] bool full() const { return full_.load(std::memory_order_relaxed); }
  [[nodiscard]] uint64_t live_bytes() const { return live_sectors_ * kSector; }
  [[nodiscard]] uint64_t lost_bytes() const { return lost_sectors_ * kSector; }

 private:
  static size_t sectors_for(size_t length) { return (length + kSector - 1) / kSector; }
  static uint64_t sector_of(uint64_t where) { return where >> 32; }
  std::optional<uint64_t> allocate(size_t sectors);
  void free_extent(uint64_t sector, size_t sectors);  // may allocate

  detail::OwnedFile file_;
  std::string directory_;  // where the file is, for the child's copy
  uint64_t capacity_sectors_ = 0;
  uint64_t next_sector_ = 0;  // the file's end: sectors past it were never used
  uint64_t live_sectors_ = 0;
  uint64_t lost_sectors_ = 0;  // released where no free list had room (release())
  static constexpr size_t kReleaseRoom = 256;
  std::atomic<bool> full_{false};  // read without the caller's lock (CopyStore::file_full)
  std::vector<uint64_t> free_[kMaxSectors + 1];  // free extents by length, in sectors
  std::vector<std::byte> buffer_;                // one page, a copy padded to its sectors
};

}  // namespace zsm::region
