// The cache's backing file (zsm/backing_file.hpp says what it is for and what it promises).
//
// Layout. The file is a ring of segments of batch_bytes each. Records are appended to the
// batch buffer of the current segment; a full batch goes to the writer thread, which writes
// it whole at its segment's offset, and the next segment begins (its old records dropped from
// the index first). A record is a 48-byte header (magic, the file's identity, key and stored
// sizes, the entry's kind, value size and generation, the key's hash, and an XXH3-64 checksum
// over all that follows it) then the key and the stored bytes, padded to 16 bytes.
//
// Index. Open addressing on the key's 64-bit hash, 24 bytes an entry (the hash, the record's
// offset and length, its generation): the key itself is on file and checked on every read.
// Two keys with one hash share an entry, the later one winning: the earlier is a miss.
// Beside it, the log: every record staged, oldest first (its hash and generation, 16 bytes),
// in a ring buffer. Each live index entry has exactly one log item with its generation; an
// item whose entry has moved on (a later record of the key, an erase) is dead and is popped
// when it reaches the front. Reusing a segment pops its records from the front of the log;
// keeping the index within its memory limit pops the oldest records, whatever their segment.
// A batch knows its records as a range of log positions, so that a failed write forgets them
// and a successful one reports those staged for release.
//
// Locks. One mutex for the index, the log and the buffers. File I/O happens outside it: the
// writer thread writes a queued batch buffer that nothing changes while it waits or is
// written, and a read copies its record out of a buffer under the lock or reads the file
// without it, then checks what it read. The writer calls Released without the lock (the cache
// takes a shard lock in it; the cache calls in here with a shard lock held: shard, then file).
//
// fork(). A child process must not use the parent's file: every call on a BackingFile made in
// a child of the process that opened it acts as on a file that holds nothing and takes
// nothing, without taking the lock (another thread of the parent may have held it at the
// fork). BackingFilePtr's deleter closes only the child's descriptor and leaves the rest: its
// writer thread does not exist there, and its memory is the child's copy of the parent's.
#pragma once

#include <zsm/backing_file.hpp>

#include "owned_file.h"

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <thread>
#include <vector>

namespace zsm::detail {

// What a record on file says of its entry, beside the key and stored bytes.
struct FileRecordInfo {
  uint8_t kind = 0;
  uint32_t value_size = 0;
  uint64_t generation = 0;  // set by stage(): no other record of this file has it
};

// What stage() did with a record. A refusal is counted by the caller that drops the entry for
// it (count_dropped()): a record that stays in memory is not a drop.
enum class Staged { taken, queue_full, write_limit, too_large, detached };

// A ring buffer of log items, oldest first, with positions that only grow (a batch names its
// records by them). Grows by doubling up to the capacity it is given.
class RecordLog {
 public:
  struct Item {
    uint64_t hash = 0;
    uint64_t generation = 0;  // kRelease set: the entry is freed from memory once on file
  };
  static constexpr uint64_t kRelease = uint64_t{1} << 63;

  [[nodiscard]] uint64_t begin() const { return head_; }
  [[nodiscard]] uint64_t end() const { return tail_; }
  [[nodiscard]] size_t size() const { return static_cast<size_t>(tail_ - head_); }
  [[nodiscard]] size_t bytes() const { return items_.size() * sizeof(Item); }
  [[nodiscard]] const Item& at(uint64_t position) const { return items_[position & mask()]; }
  Item& at(uint64_t position) { return items_[position & mask()]; }
  // Makes room for one more item below `most` items (a power of two); false when full.
  bool reserve_one(size_t most);
  void shrink_to(size_t most);  // to `most` items' room (a power of two), if they fit
  void push_back(Item item) { items_[tail_++ & mask()] = item; }  // after reserve_one()
  void pop_front() { head_++; }
  void clear();  // empty, its memory given back; positions go on from where they were

 private:
  [[nodiscard]] size_t mask() const { return items_.size() - 1; }
  void resize(size_t n);
  std::vector<Item> items_;
  uint64_t head_ = 0, tail_ = 0;
};

class BackingFile;
// Deletes a BackingFile in the process that opened it; in a child of fork(), closes its
// descriptor only (see "fork()" above).
struct CloseBackingFile {
  void operator()(BackingFile* file) const noexcept;
};
using BackingFilePtr = std::unique_ptr<BackingFile, CloseBackingFile>;

class BackingFile {
 public:
  // Called on the writer thread (or in flush()), without the lock, with the hash and
  // generation of each record staged with release = true once it is on file.
  using Released = std::function<void(uint64_t hash, uint64_t generation)>;

  // Opens the file as zsm/backing_file.hpp says and starts the writer; the index and log take
  // at most `index_limit` bytes. Throws std::system_error for a path it will not or cannot
  // use (naming it) and std::invalid_argument for options out of range (naming the option).
  static BackingFilePtr open(BackingFileOptions options, size_t index_limit, Released released);
  ~BackingFile();  // stops the writer, removes the file if it has its name still, closes it
  BackingFile(const BackingFile&) = delete;
  BackingFile& operator=(const BackingFile&) = delete;

  // Appends a record for the key (info's kind and value size, a new generation), or says why
  // it did not (the writer's queue is full, the write limit is reached, the record is larger
  // than a batch, or this is a child of fork()). Never waits for I/O. A record of the key
  // already on file is replaced.
  Staged stage(uint64_t hash, std::string_view key, FileRecordInfo info,
               std::span<const std::byte> stored, bool release = false);
  // The key's record: its info, and its stored bytes in `stored`. std::nullopt when the file
  // does not hold the key, or holds it but the record could not be read or checked (counted).
  std::optional<FileRecordInfo> read(uint64_t hash, std::string_view key,
                                     std::vector<std::byte>& stored);
  // Whether the file holds the record of that generation for the hash.
  [[nodiscard]] bool holds(uint64_t hash, uint64_t generation) const;
  // Whether the index has a record of that hash (its key is not checked).
  [[nodiscard]] bool contains(uint64_t hash) const;
  // Forgets the hash's record (its space is reused when the ring comes round); with a
  // generation, only if it is that one.
  void erase(uint64_t hash);
  void erase(uint64_t hash, uint64_t generation);
  // Forgets every record and gives the index's and the log's memory back.
  void clear();
  // Writes what is staged and waits until it is on file. A partial batch is written up to
  // its fill, rounded to 4 KiB, and stays the current batch: its segment is not given up.
  void flush();
  // Waits until a stage() would not find the writer's queue full, or the deadline passes
  // (false then). Counts a wait.
  bool wait_for_writer(std::chrono::steady_clock::time_point deadline);
  // Another owner (a resized cache): who is told of released records, and the index's limit.
  // No other call may run meanwhile, and nothing staged for release may be unwritten (flush()
  // first).
  void set_owner(Released released, size_t index_limit);

  void count_hit();
  void count_promoted();
  void count_dropped(Staged why);

  [[nodiscard]] BackingFileStats stats() const;
  // The index, the log and the buffers, in bytes (read without the lock); 0 in a child.
  [[nodiscard]] size_t memory_bytes() const;
  [[nodiscard]] const BackingFileOptions& options() const { return options_; }
  // Whether this is a child of fork() of the process that opened the file.
  [[nodiscard]] bool detached() const noexcept;

 private:
  friend struct CloseBackingFile;
  struct Entry {
    uint64_t hash = 0;
    uint64_t where = 0;  // offset << 24 | length; 0: empty
    uint64_t generation = 0;
  };
  struct Batch {
    std::byte* data = nullptr;  // batch_bytes, aligned for O_DIRECT
    uint64_t segment = 0;
    size_t fill = 0;
    size_t flushed = 0;          // bytes from the segment's start already on file
    uint64_t log_unflushed = 0;  // the first of its records not yet on file (a log position)
    uint64_t log_end = 0;        // past its last record, once it is queued
  };
  enum class Next { begun, busy, limit };

  BackingFile(BackingFileOptions options, size_t index_limit, Released released);
  void open_file();

  static uint64_t offset_of(uint64_t where) { return where >> 24; }
  static size_t length_of(uint64_t where) { return where & ((1u << 24) - 1); }

  // Index and log (lock held).
  Entry* find(uint64_t hash);
  const Entry* find(uint64_t hash) const;
  bool is_live(const RecordLog::Item& item) const;
  void set_index_limit(size_t index_limit);
  void count_memory();
  void insert(uint64_t hash, uint64_t where, uint64_t generation);
  void remove_at(size_t i);
  void remove(uint64_t hash, uint64_t generation, uint64_t& counter);
  void resize_index(size_t slots);
  void make_index_room();
  void drop_oldest(uint64_t& counter);
  void forget_segment(uint64_t segment);
  void forget_range(uint64_t from, uint64_t to);
  std::vector<std::pair<uint64_t, uint64_t>> to_release(uint64_t from, uint64_t to);

  // Batches (lock held).
  Next begin_next_segment();
  bool within_write_limit();
  void queue_current_batch();
  const Batch* batch_holding(uint64_t offset) const;
  void report(const std::vector<std::pair<uint64_t, uint64_t>>& released);

  void writer_loop();
  bool write_batch(const Batch& b);
  bool write_range(const std::byte* data, uint64_t offset, size_t length);
  bool read_from_file(uint64_t where, std::vector<std::byte>& record);
  bool record_checks(std::span<const std::byte> record, uint64_t hash, std::string_view key,
                     uint64_t generation) const;
  void drop_from_page_cache(uint64_t offset, size_t length);

  BackingFileOptions options_;
  Released released_;
  OwnedFile file_;
  int fd_ = -1;  // file_'s
  bool direct_io_ = false;
  uint64_t identity_ = 0;      // random: in every record
  uint64_t forked_at_ = 0;     // the process's fork count when opened
  uint64_t segments_ = 0;
  uint64_t next_generation_ = 1;  // under the lock

  mutable std::mutex lock_;
  std::condition_variable writer_wake_, writer_done_;
  std::vector<Entry> index_;
  size_t index_used_ = 0;
  size_t most_slots_ = 0;      // the index's size at its memory limit (a power of two)
  RecordLog log_;
  Batch current_;
  std::deque<Batch> queue_;    // full batches in order; the writer writes the front one
  std::vector<std::byte*> spare_buffers_;
  uint64_t next_segment_ = 0;
  uint64_t period_start_ns_ = 0, written_in_period_ = 0;
  bool stopping_ = false;
  bool flushing_ = false;  // flush() is writing from current_'s buffer: it must stay current
  BackingFileStats stats_;
  std::atomic<size_t> memory_bytes_{0};
  std::thread writer_;
};

}  // namespace zsm::detail
