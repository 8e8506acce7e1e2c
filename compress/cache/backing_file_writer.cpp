// The backing file's writing (backing_file.h, "Layout" and "Locks"): staging a record in the
// current batch, starting the next segment within the write limit, the writer thread that
// writes queued batches outside the lock, flush(), and reporting the records written that
// were staged for release.
#include "backing_file.h"
#include "backing_file_parts.h"

#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>
#include <utility>

namespace zsm::detail {

using namespace backing_file_parts;

// --- staging and writing ------------------------------------------------------------------

// zram's writeback_limit: a period's writes, whole batches, stay within the limit.
bool BackingFile::within_write_limit() {
  if (options_.write_limit_bytes == 0) return true;
  const uint64_t now = now_ns();
  const auto period = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.write_limit_period).count());
  if (now - period_start_ns_ >= period) {
    period_start_ns_ = now;
    written_in_period_ = 0;
  }
  return written_in_period_ + options_.batch_bytes <= options_.write_limit_bytes;
}

// Queues the current batch for the writer and starts the next segment in a spare buffer,
// its old records dropped from the index (lock held; a spare buffer is there).
void BackingFile::queue_current_batch() {
  current_.log_end = log_.end();
  queue_.push_back(std::move(current_));
  writer_wake_.notify_one();
  current_ = Batch{};
  current_.data = spare_buffers_.back();
  spare_buffers_.pop_back();
  current_.segment = next_segment_++ % segments_;
  current_.log_unflushed = log_.end();
  forget_segment(current_.segment);
}

// Queues the full current batch and starts the next segment, unless the queue is full (or a
// flush is writing from the current batch) or the write limit is reached.
BackingFile::Next BackingFile::begin_next_segment() {
  if (spare_buffers_.empty() || flushing_) return Next::busy;
  if (!within_write_limit()) return Next::limit;
  written_in_period_ += options_.batch_bytes;
  queue_current_batch();
  return Next::begun;
}

Staged BackingFile::stage(uint64_t hash, std::string_view key, FileRecordInfo info,
                          std::span<const std::byte> stored, bool release) {
  if (detached()) return Staged::detached;
  const size_t length = record_length(key.size(), stored.size());
  std::unique_lock guard(lock_);
  if (length > options_.batch_bytes) return Staged::too_large;
  if (current_.fill + length > options_.batch_bytes) {
    const Next next = begin_next_segment();
    if (next == Next::busy) return Staged::queue_full;
    if (next == Next::limit) return Staged::write_limit;
  }
  make_index_room();
  const uint64_t generation = next_generation_++;
  Header h{0,
           kMagic,
           static_cast<uint16_t>(key.size()),
           info.kind,
           0,
           info.value_size,
           static_cast<uint32_t>(stored.size()),
           hash,
           identity_,
           generation};
  std::byte* at = current_.data + current_.fill;
  std::memcpy(at, &h, sizeof h);
  std::memcpy(at + sizeof h, key.data(), key.size());
  if (!stored.empty()) std::memcpy(at + sizeof h + key.size(), stored.data(), stored.size());
  std::memset(at + sizeof h + key.size() + stored.size(), 0,
              length - sizeof h - key.size() - stored.size());
  h.checksum = checksum_of(at, key.size(), stored.size());
  std::memcpy(at, &h.checksum, sizeof h.checksum);
  const uint64_t offset = current_.segment * options_.batch_bytes + current_.fill;
  insert(hash, offset << 24 | length, generation);
  log_.push_back({hash, generation | (release ? RecordLog::kRelease : 0)});
  count_memory();
  current_.fill += length;
  return Staged::taken;
}

bool BackingFile::wait_for_writer(std::chrono::steady_clock::time_point deadline) {
  if (detached()) return false;
  std::unique_lock guard(lock_);
  stats_.writer_waits++;
  return writer_done_.wait_until(guard, deadline, [this] {
    return stopping_ || (!spare_buffers_.empty() && !flushing_);
  }) && !stopping_;
}

void BackingFile::report(const std::vector<std::pair<uint64_t, uint64_t>>& released) {
  for (auto [hash, generation] : released) released_(hash, generation);
}

void BackingFile::flush() {
  if (detached()) return;
  std::unique_lock guard(lock_);
  writer_done_.wait(guard, [this] { return (queue_.empty() && !flushing_) || stopping_; });
  if (stopping_ || current_.fill == current_.flushed) return;
  const size_t from = current_.flushed, to = round_up(current_.fill, kAlign);
  std::memset(current_.data + current_.fill, 0, to - current_.fill);
  current_.fill = to;  // later records start past what this write covers
  const uint64_t log_from = current_.log_unflushed, log_to = log_.end();
  flushing_ = true;
  const std::byte* data = current_.data;
  const uint64_t segment = current_.segment;
  guard.unlock();
  const bool ok = write_range(data + from, segment * options_.batch_bytes + from, to - from);
  guard.lock();
  flushing_ = false;
  std::vector<std::pair<uint64_t, uint64_t>> released;
  if (ok) {
    stats_.bytes_written += to - from;
    current_.flushed = to;
    current_.log_unflushed = log_to;
    released = to_release(log_from, log_to);
  } else {
    stats_.write_errors++;
    forget_range(log_from, log_to);
  }
  writer_done_.notify_all();
  guard.unlock();
  report(released);
}

bool BackingFile::write_batch(const Batch& b) {
  const size_t to = round_up(b.fill, kAlign);
  return write_range(b.data + b.flushed, b.segment * options_.batch_bytes + b.flushed,
                     to - b.flushed);
}

bool BackingFile::write_range(const std::byte* data, uint64_t offset, size_t length) {
  const ssize_t n = options_.io->pwrite(fd_, data, length, static_cast<off_t>(offset));
  if (n != static_cast<ssize_t>(length)) return false;
  if (!direct_io_) {
    if (::fdatasync(fd_) != 0) return false;
    drop_from_page_cache(offset, length);
  }
  return true;
}

void BackingFile::drop_from_page_cache(uint64_t offset, size_t length) {
  if (!direct_io_)
    ::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(length),
                    POSIX_FADV_DONTNEED);
}

// Writes the queued batches in order. A batch stays queued, and readable from memory, until
// it is written and its released records have been reported, so flush() returns after both.
void BackingFile::writer_loop() {
  std::unique_lock guard(lock_);
  for (;;) {
    writer_wake_.wait(guard, [this] { return !queue_.empty() || stopping_; });
    if (stopping_) return;
    Batch& front = queue_.front();  // a deque: stage() appending keeps the reference valid
    guard.unlock();
    const bool ok = write_batch(front);
    guard.lock();
    std::vector<std::pair<uint64_t, uint64_t>> released;
    if (ok) {
      stats_.bytes_written += round_up(front.fill, kAlign) - front.flushed;
      released = to_release(front.log_unflushed, front.log_end);
    } else {
      stats_.write_errors++;
      forget_range(front.log_unflushed, front.log_end);
    }
    guard.unlock();
    report(released);
    guard.lock();
    spare_buffers_.push_back(front.data);
    queue_.pop_front();
    writer_done_.notify_all();
  }
}

}  // namespace zsm::detail
