// The cache's backing file: a ring of batch-sized segments on a file, an index of the records
// on it, and a writer thread (backing_file.h has the layout and the locking).
#include "backing_file.h"

#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <system_error>
#include <unistd.h>
#include <utility>

namespace zsm {

ssize_t BackingFileIo::pwrite(int fd, const void* buf, size_t count, off_t offset) {
  return ::pwrite(fd, buf, count, offset);
}

ssize_t BackingFileIo::pread(int fd, void* buf, size_t count, off_t offset) {
  return ::pread(fd, buf, count, offset);
}

namespace detail {

namespace {

constexpr size_t kAlign = 4096;  // O_DIRECT: buffers, offsets and lengths
constexpr uint32_t kMagic = 0x465a534d;  // "MSZF"
constexpr size_t kMinBatch = size_t{128} << 10, kMaxBatch = size_t{16} << 20;

struct Header {
  uint64_t checksum;  // XXH3-64 of everything after it: the rest of the header, key, stored
  uint32_t magic;
  uint16_t key_size;
  uint8_t kind;
  uint8_t unused;
  uint32_t value_size;
  uint32_t stored_size;
  uint64_t hash;
};
static_assert(sizeof(Header) == 32);

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
size_t record_length(size_t key_size, size_t stored_size) {
  return round_up(sizeof(Header) + key_size + stored_size, 16);
}

// The checksum of a record laid out at `at`: its bytes from after the checksum field to the
// end of the stored bytes (padding excluded).
uint64_t checksum_of(const std::byte* at, size_t key_size, size_t stored_size) {
  constexpr size_t skip = sizeof(uint64_t);
  return XXH3_64bits(at + skip, sizeof(Header) - skip + key_size + stored_size);
}

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

std::byte* aligned_buffer(size_t size) {
  void* p = std::aligned_alloc(kAlign, round_up(size, kAlign));
  if (p == nullptr) throw std::bad_alloc();
  return static_cast<std::byte*>(p);
}

struct FreeAligned {
  void operator()(std::byte* p) const { std::free(p); }
};

// Index slots from a key's hash: the multiply spreads hashes whose low bits the cache's
// shards already picked.
size_t home_slot(uint64_t hash, size_t mask) {
  return static_cast<size_t>((hash * 0x9E3779B97F4A7C15ull) >> 20) & mask;
}

void check_options(const BackingFileOptions& o) {
  if (o.path.empty()) throw std::invalid_argument("backing_file.path is empty");
  if (o.batch_bytes < kMinBatch || o.batch_bytes > kMaxBatch || o.batch_bytes % kAlign != 0)
    throw std::invalid_argument("backing_file.batch_bytes " + std::to_string(o.batch_bytes) +
                                " is not a multiple of 4096 in 128 KiB .. 16 MiB");
  if (o.capacity_bytes / o.batch_bytes < 2)
    throw std::invalid_argument("backing_file.capacity_bytes " +
                                std::to_string(o.capacity_bytes) +
                                " is below two batches (2 x batch_bytes)");
  if (o.capacity_bytes >> 40 != 0)
    throw std::invalid_argument("backing_file.capacity_bytes is above 1 TiB");
  if (o.write_queue_batches < 1 || o.write_queue_batches > 64)
    throw std::invalid_argument("backing_file.write_queue_batches " +
                                std::to_string(o.write_queue_batches) + " is not in 1 .. 64");
  if (o.capacity_bytes / o.batch_bytes < o.write_queue_batches + 1)
    throw std::invalid_argument("backing_file.capacity_bytes " +
                                std::to_string(o.capacity_bytes) +
                                " holds fewer segments than the write queue and one more");
  if (o.write_limit_bytes != 0 && o.write_limit_period.count() <= 0)
    throw std::invalid_argument("backing_file.write_limit_period must be positive");
}

}  // namespace

BackingFile::BackingFile(BackingFileOptions options, Released released)
    : options_(std::move(options)), released_(std::move(released)) {
  check_options(options_);
  if (!options_.io) options_.io = std::make_shared<BackingFileIo>();
  const int flags = O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC;
  fd_ = ::open(options_.path.c_str(), flags | O_DIRECT, 0600);
  direct_io_ = fd_ >= 0;
  if (fd_ < 0 && errno == EINVAL) fd_ = ::open(options_.path.c_str(), flags, 0600);
  if (fd_ < 0)
    throw std::system_error(errno, std::generic_category(),
                            "backing file " + options_.path + " cannot be opened");
  stats_.direct_io = direct_io_;
  segments_ = options_.capacity_bytes / options_.batch_bytes;
  segment_hashes_.resize(segments_);
  current_.data = aligned_buffer(options_.batch_bytes);
  for (unsigned i = 0; i < options_.write_queue_batches; i++)
    spare_buffers_.push_back(aligned_buffer(options_.batch_bytes));
  current_.segment = next_segment_++;
  index_.resize(1024);
  count_memory();
  period_start_ns_ = now_ns();
  written_in_period_ = options_.batch_bytes;  // the first segment's write, to come
  writer_ = std::thread([this] { writer_loop(); });
}

BackingFile::~BackingFile() {
  {
    std::lock_guard guard(lock_);
    stopping_ = true;
  }
  writer_wake_.notify_all();
  writer_.join();
  std::free(current_.data);
  for (std::byte* b : spare_buffers_) std::free(b);
  ::close(fd_);
  ::unlink(options_.path.c_str());
}

// --- index ------------------------------------------------------------------------------

BackingFile::Entry* BackingFile::find(uint64_t hash) {
  return const_cast<Entry*>(std::as_const(*this).find(hash));
}

const BackingFile::Entry* BackingFile::find(uint64_t hash) const {
  const size_t mask = index_.size() - 1;
  for (size_t i = home_slot(hash, mask);; i = (i + 1) & mask) {
    const Entry& e = index_[i];
    if (e.where == 0) return nullptr;
    if (e.hash == hash) return &e;
  }
}

void BackingFile::count_memory() {
  memory_bytes_ = index_.size() * sizeof(Entry) + listed_hashes_ * sizeof(uint64_t) +
                  (1 + options_.write_queue_batches) * options_.batch_bytes;
}

void BackingFile::insert(uint64_t hash, uint64_t where) {
  if (Entry* e = find(hash)) {
    stats_.bytes_on_file -= length_of(e->where);
    stats_.bytes_on_file += length_of(where);
    e->where = where;
    return;
  }
  if ((index_used_ + 1) * 8 > index_.size() * 7) grow();
  const size_t mask = index_.size() - 1;
  size_t i = home_slot(hash, mask);
  while (index_[i].where != 0) i = (i + 1) & mask;
  index_[i] = {hash, where};
  index_used_++;
  stats_.bytes_on_file += length_of(where);
  stats_.entries_on_file++;
}

// Backward-shift deletion, as the cache's own index: no tombstones.
void BackingFile::remove_at(size_t i) {
  stats_.bytes_on_file -= length_of(index_[i].where);
  stats_.entries_on_file--;
  const size_t mask = index_.size() - 1;
  for (size_t j = (i + 1) & mask; index_[j].where != 0; j = (j + 1) & mask) {
    const size_t home = home_slot(index_[j].hash, mask);
    if (((j - home) & mask) >= ((j - i) & mask)) {
      index_[i] = index_[j];
      i = j;
    }
  }
  index_[i] = Entry{};
  index_used_--;
}

void BackingFile::grow() {
  std::vector<Entry> old = std::move(index_);
  index_ = std::vector<Entry>(old.size() * 2);
  const size_t mask = index_.size() - 1;
  for (const Entry& e : old) {
    if (e.where == 0) continue;
    size_t i = home_slot(e.hash, mask);
    while (index_[i].where != 0) i = (i + 1) & mask;
    index_[i] = e;
  }
  count_memory();
}

// Drops every record of a segment from the index: those its list names whose entry still
// points into it (a later stage of the same key, elsewhere, keeps its entry).
void BackingFile::forget_segment(uint64_t segment, uint64_t& counter) {
  const uint64_t begin = segment * options_.batch_bytes, end = begin + options_.batch_bytes;
  std::vector<uint64_t>& hashes = segment_hashes_[segment];
  for (uint64_t hash : hashes) {
    Entry* e = find(hash);
    if (e == nullptr || offset_of(e->where) < begin || offset_of(e->where) >= end) continue;
    remove_at(static_cast<size_t>(e - index_.data()));
    counter++;
  }
  listed_hashes_ -= hashes.size();
  hashes.clear();
  count_memory();
}

void BackingFile::forget_if(uint64_t hash, uint64_t where, uint64_t& counter) {
  Entry* e = find(hash);
  if (e == nullptr || e->where != where) return;
  remove_at(static_cast<size_t>(e - index_.data()));
  counter++;
}

// --- staging and writing ----------------------------------------------------------------

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
  queue_.push_back(std::move(current_));
  writer_wake_.notify_one();
  current_ = Batch{};
  current_.data = spare_buffers_.back();
  spare_buffers_.pop_back();
  current_.segment = next_segment_++ % segments_;
  forget_segment(current_.segment, stats_.evicted);
}

// Queues the full current batch and starts the next segment; false (and the batch stays)
// while the queue is full or the write limit is reached.
bool BackingFile::begin_next_segment() {
  if (spare_buffers_.empty() || flushing_) return false;
  if (!within_write_limit()) return false;
  written_in_period_ += options_.batch_bytes;
  queue_current_batch();
  return true;
}

Staged BackingFile::stage(uint64_t hash, std::string_view key, FileRecordInfo info,
                          std::span<const std::byte> stored, bool release,
                          unsigned long token) {
  const size_t length = record_length(key.size(), stored.size());
  std::unique_lock guard(lock_);
  if (length > options_.batch_bytes) return Staged::too_large;
  if (current_.fill + length > options_.batch_bytes) {
    const bool busy = spare_buffers_.empty() || flushing_;
    if (!begin_next_segment()) {
      (busy ? stats_.dropped_busy : stats_.dropped_limit)++;
      return busy ? Staged::queue_full : Staged::write_limit;
    }
  }
  Header h{0, kMagic, static_cast<uint16_t>(key.size()), info.kind, 0, info.value_size,
            static_cast<uint32_t>(stored.size()), hash};
  std::byte* at = current_.data + current_.fill;
  std::memcpy(at, &h, sizeof h);
  std::memcpy(at + sizeof h, key.data(), key.size());
  if (!stored.empty()) std::memcpy(at + sizeof h + key.size(), stored.data(), stored.size());
  std::memset(at + sizeof h + key.size() + stored.size(), 0,
              length - sizeof h - key.size() - stored.size());
  h.checksum = checksum_of(at, key.size(), stored.size());
  std::memcpy(at, &h.checksum, sizeof h.checksum);
  const uint64_t offset = current_.segment * options_.batch_bytes + current_.fill;
  insert(hash, offset << 24 | length);
  segment_hashes_[current_.segment].push_back(hash);
  listed_hashes_++;
  count_memory();
  if (release) current_.released.emplace_back(hash, token);
  current_.fill += length;
  return Staged::taken;
}

void BackingFile::flush() {
  std::unique_lock guard(lock_);
  writer_done_.wait(guard, [this] { return queue_.empty() && !flushing_; });
  if (current_.fill == current_.flushed) return;
  const size_t from = current_.flushed, to = round_up(current_.fill, kAlign);
  std::memset(current_.data + current_.fill, 0, to - current_.fill);
  current_.fill = to;  // later records start past what this write covers
  std::vector<std::pair<uint64_t, unsigned long>> released;
  released.swap(current_.released);
  flushing_ = true;
  const std::byte* data = current_.data;
  const uint64_t segment = current_.segment;
  guard.unlock();
  const bool ok = write_range(data + from, segment * options_.batch_bytes + from, to - from);
  guard.lock();
  flushing_ = false;
  if (ok) {
    stats_.bytes_written += to - from;
    if (current_.segment == segment) current_.flushed = to;
  } else {
    stats_.write_errors++;
    uint64_t dropped = 0;
    forget_segment(segment, dropped);
    released.clear();
  }
  writer_done_.notify_all();
  const bool report = released_ && !stopping_;
  guard.unlock();
  if (report)
    for (auto [hash, token] : released) released_(hash, token);
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
    if (queue_.empty()) return;
    Batch& front = queue_.front();  // a deque: stage() appending keeps the reference valid
    const bool report = released_ && !stopping_;  // no calls into a cache being destroyed
    guard.unlock();
    const bool ok = write_batch(front);
    if (ok && report)
      for (auto [hash, token] : front.released) released_(hash, token);
    guard.lock();
    if (ok) {
      stats_.bytes_written += round_up(front.fill, kAlign) - front.flushed;
    } else {
      stats_.write_errors++;
      uint64_t dropped = 0;
      forget_segment(front.segment, dropped);
    }
    spare_buffers_.push_back(front.data);
    queue_.pop_front();
    writer_done_.notify_all();
  }
}

// --- reading ----------------------------------------------------------------------------

const BackingFile::Batch* BackingFile::batch_holding(uint64_t offset) const {
  const uint64_t segment = offset / options_.batch_bytes;
  if (segment == current_.segment) return &current_;
  for (const Batch& b : queue_)
    if (b.segment == segment) return &b;
  return nullptr;
}

// The record at `where`, read from the file in whole aligned blocks; false on a short read
// or an error.
bool BackingFile::read_from_file(uint64_t where, std::vector<std::byte>& record) {
  const uint64_t offset = offset_of(where);
  const size_t length = length_of(where);
  const uint64_t begin = offset / kAlign * kAlign;
  const size_t span = round_up(offset + length, kAlign) - begin;
  std::unique_ptr<std::byte, FreeAligned> buf(aligned_buffer(span));
  const ssize_t n = options_.io->pread(fd_, buf.get(), span, static_cast<off_t>(begin));
  drop_from_page_cache(begin, span);
  if (n < static_cast<ssize_t>(offset - begin + length)) return false;
  record.assign(buf.get() + (offset - begin), buf.get() + (offset - begin) + length);
  std::lock_guard guard(lock_);
  stats_.bytes_read += span;
  return true;
}

std::optional<FileRecordInfo> BackingFile::read(uint64_t hash, std::string_view key,
                                                std::vector<std::byte>& stored) {
  std::vector<std::byte> record;
  uint64_t where = 0;
  {
    std::lock_guard guard(lock_);
    Entry* e = find(hash);
    if (e == nullptr) return std::nullopt;
    where = e->where;
    if (const Batch* b = batch_holding(offset_of(where))) {
      const std::byte* at = b->data + offset_of(where) % options_.batch_bytes;
      record.assign(at, at + length_of(where));
    }
  }
  if (record.empty() && !read_from_file(where, record)) {
    std::lock_guard guard(lock_);
    stats_.misses++;
    forget_if(hash, where, stats_.read_errors);
    return std::nullopt;
  }
  Header h;
  std::memcpy(&h, record.data(), sizeof h);
  const bool fits = h.magic == kMagic && h.hash == hash && h.key_size == key.size() &&
                    record_length(h.key_size, h.stored_size) == record.size();
  const std::span<const std::byte> rest(record.data() + sizeof h,
                                        fits ? h.key_size + size_t{h.stored_size} : 0);
  if (!fits || std::memcmp(rest.data(), key.data(), key.size()) != 0 ||
      checksum_of(record.data(), h.key_size, h.stored_size) != h.checksum) {
    std::lock_guard guard(lock_);
    stats_.misses++;
    forget_if(hash, where, stats_.corrupt);
    return std::nullopt;
  }
  stored.assign(rest.begin() + key.size(), rest.end());
  std::lock_guard guard(lock_);
  stats_.hits++;
  return FileRecordInfo{h.kind, h.value_size};
}

void BackingFile::erase(uint64_t hash) {
  std::lock_guard guard(lock_);
  if (Entry* e = find(hash)) remove_at(static_cast<size_t>(e - index_.data()));
}

bool BackingFile::contains(uint64_t hash) const {
  std::lock_guard guard(lock_);
  return find(hash) != nullptr;
}

void BackingFile::clear() {
  std::lock_guard guard(lock_);
  std::fill(index_.begin(), index_.end(), Entry{});
  index_used_ = 0;
  for (std::vector<uint64_t>& hashes : segment_hashes_) hashes.clear();
  listed_hashes_ = 0;
  count_memory();
  stats_.bytes_on_file = 0;
  stats_.entries_on_file = 0;
}

BackingFileStats BackingFile::stats() const {
  std::lock_guard guard(lock_);
  BackingFileStats s = stats_;
  s.memory_bytes = memory_bytes();
  return s;
}

}  // namespace detail
}  // namespace zsm
