// The cache's backing file (zsm/backing_file.hpp says what it is for and what it promises).
//
// Layout. The file is a ring of segments of batch_bytes each. Records are appended to the
// batch buffer of the current segment; a full batch goes to the writer thread, which writes
// it whole at its segment's offset, and the next segment begins (its old records dropped from
// the index first). A record is a 32-byte header (magic, key and stored sizes, the entry's
// kind and value size, the key's hash, and an XXH3-64 checksum over all that follows it) then the
// key and the stored bytes, padded to 16 bytes.
//
// Index. Open addressing on the key's 64-bit hash, 16 bytes an entry (the hash, and the
// record's offset and length): the key itself is on file and checked on every read. Two keys
// with one hash share an entry, the later one winning: the earlier is a miss. Each segment
// also lists the hashes of the records staged into it (8 bytes each), so that reusing a
// segment forgets its records without a walk over the whole index.
//
// Locks. One mutex for the index and the buffers. File I/O happens outside it: the writer
// thread writes a queued batch buffer that nothing changes while it waits or is written, and
// a read copies its record out of a buffer under the lock or reads the file without it, then
// checks what it read against the key and the checksum. At most write_queue_batches full
// batches wait for the writer; a stage() that finds the current batch full and the queue full
// too is refused (the entry is evicted as without a file), so a put never waits for the disk.
#pragma once

#include <zsm/backing_file.hpp>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
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
};

// What stage() did with a record.
enum class Staged { taken, queue_full, write_limit, too_large };

class BackingFile {
 public:
  // Called on the writer thread, outside the lock, with the (hash, token) of each record
  // staged with release = true once it is on file.
  using Released = std::function<void(uint64_t hash, unsigned long token)>;

  // Opens (creates, truncates) the file and starts the writer. Throws std::system_error for a
  // file that cannot be opened and std::invalid_argument for options out of range.
  BackingFile(BackingFileOptions options, Released released);
  ~BackingFile();  // stops the writer, closes and removes the file
  BackingFile(const BackingFile&) = delete;
  BackingFile& operator=(const BackingFile&) = delete;

  // Appends a record for the key, or says why it did not (the writer's queue is full, the
  // write limit is reached, or the record is larger than a batch). Never waits for I/O.
  Staged stage(uint64_t hash, std::string_view key, FileRecordInfo info,
               std::span<const std::byte> stored, bool release = false,
               unsigned long token = 0);
  // The key's record: its info, and its stored bytes in `stored`. std::nullopt when the file
  // does not hold the key, or holds it but the record could not be read or checked (counted).
  std::optional<FileRecordInfo> read(uint64_t hash, std::string_view key,
                                     std::vector<std::byte>& stored);
  // Forgets the key's record (its space is reused when the ring comes round).
  void erase(uint64_t hash);
  // Whether the index has a record of that hash (its key is not checked).
  [[nodiscard]] bool contains(uint64_t hash) const;
  // Forgets every record.
  void clear();
  // Writes what is staged and waits until it is on file. A partial batch is written up to
  // its fill, rounded to 4 KiB, and stays the current batch: its segment is not given up.
  void flush();
  void count_promoted() { std::lock_guard guard(lock_); stats_.promoted++; }

  [[nodiscard]] BackingFileStats stats() const;
  // The index and the buffers, in bytes (read without the lock).
  [[nodiscard]] size_t memory_bytes() const { return memory_bytes_.load(std::memory_order_relaxed); }
  [[nodiscard]] const BackingFileOptions& options() const { return options_; }

 private:
  struct Entry {
    uint64_t hash = 0;
    uint64_t where = 0;  // offset << 24 | length; 0: empty
  };
  struct Batch {
    std::byte* data = nullptr;  // batch_bytes, aligned for O_DIRECT
    uint64_t segment = 0;
    size_t fill = 0;
    size_t flushed = 0;  // bytes from the segment's start that flush() already wrote
    std::vector<std::pair<uint64_t, unsigned long>> released;
  };

  static uint64_t offset_of(uint64_t where) { return where >> 24; }
  static size_t length_of(uint64_t where) { return where & ((1u << 24) - 1); }

  // Index (lock held).
  Entry* find(uint64_t hash);
  const Entry* find(uint64_t hash) const;
  void count_memory();
  void insert(uint64_t hash, uint64_t where);
  void remove_at(size_t i);
  void grow();
  void forget_segment(uint64_t segment, uint64_t& counter);
  void forget_if(uint64_t hash, uint64_t where, uint64_t& counter);

  // Batches (lock held).
  bool begin_next_segment();
  bool within_write_limit();
  void queue_current_batch();
  const Batch* batch_holding(uint64_t offset) const;

  void writer_loop();
  bool write_batch(const Batch& b);
  bool write_range(const std::byte* data, uint64_t offset, size_t length);
  bool read_from_file(uint64_t where, std::vector<std::byte>& record);
  void drop_from_page_cache(uint64_t offset, size_t length);

  BackingFileOptions options_;
  Released released_;
  int fd_ = -1;
  bool direct_io_ = false;
  uint64_t segments_ = 0;

  mutable std::mutex lock_;
  std::condition_variable writer_wake_, writer_done_;
  std::vector<Entry> index_;
  size_t index_used_ = 0;
  std::vector<std::vector<uint64_t>> segment_hashes_;  // per segment, in staging order
  size_t listed_hashes_ = 0;                            // their sum
  Batch current_;
  std::deque<Batch> queue_;  // full batches in order; the writer writes the front one
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
