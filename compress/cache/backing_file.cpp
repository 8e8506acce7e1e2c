// The cache's backing file: opening a file of its own, a ring of batch-sized segments on it,
// an index and a log of the records on it, and a writer thread (backing_file.h has the layout
// and the locking; zsm/backing_file.hpp the contract).
#include "backing_file.h"

#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <pthread.h>
#include <random>
#include <stdexcept>
#include <sys/random.h>
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
constexpr size_t kFirstSlots = 1024, kLeastSlots = 64;
constexpr auto kLongestPeriod = std::chrono::hours(24 * 366);
constexpr auto kLongestWait = std::chrono::seconds(10);

struct Header {
  uint64_t checksum;  // XXH3-64 of everything after it: the rest of the header, key, stored
  uint32_t magic;
  uint16_t key_size;
  uint8_t kind;
  uint8_t unused;
  uint32_t value_size;
  uint32_t stored_size;
  uint64_t hash;
  uint64_t identity;
  uint64_t generation;
};
static_assert(sizeof(Header) == 48);

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

// The number of fork()s this process descends from: a child's copy of a BackingFile sees it
// differ from the one it was opened at.
std::atomic<uint64_t> forks{0};
void count_fork_in_child() { forks.fetch_add(1, std::memory_order_relaxed); }
uint64_t fork_count() {
  static const int registered = pthread_atfork(nullptr, nullptr, count_fork_in_child);
  (void)registered;
  return forks.load(std::memory_order_relaxed);
}

uint64_t random_identity() {
  uint64_t id = 0;
  if (getrandom(&id, sizeof id, 0) != sizeof id) id = std::random_device{}() * 0x9E3779B97F4A7C15ull;
  return id | 1;  // never 0: a zeroed record never matches
}

void check_options(const BackingFileOptions& o) {
  auto bad = [](const std::string& why) { throw std::invalid_argument("backing_file." + why); };
  if (o.path.empty()) bad("path is empty");
  if (o.batch_bytes < kMinBatch || o.batch_bytes > kMaxBatch || o.batch_bytes % kAlign != 0)
    bad("batch_bytes " + std::to_string(o.batch_bytes) +
        " is not a multiple of 4096 in 128 KiB .. 16 MiB");
  if (o.capacity_bytes / o.batch_bytes < 2)
    bad("capacity_bytes " + std::to_string(o.capacity_bytes) +
        " is below two batches (2 x batch_bytes)");
  if (o.capacity_bytes >> 40 != 0) bad("capacity_bytes is not below 1 TiB");
  if (o.write_queue_batches < 1 || o.write_queue_batches > 64)
    bad("write_queue_batches " + std::to_string(o.write_queue_batches) + " is not in 1 .. 64");
  if (o.capacity_bytes / o.batch_bytes < o.write_queue_batches + 1)
    bad("capacity_bytes " + std::to_string(o.capacity_bytes) +
        " holds fewer segments than the write queue and one more");
  if (o.write_limit_bytes != 0 && o.write_limit_bytes < o.batch_bytes)
    bad("write_limit_bytes " + std::to_string(o.write_limit_bytes) + " is below one batch (" +
        std::to_string(o.batch_bytes) + " bytes): nothing could be written");
  if (o.write_limit_period.count() <= 0 || o.write_limit_period > kLongestPeriod)
    bad("write_limit_period " + std::to_string(o.write_limit_period.count()) +
        " ms is not in 1 ms .. 366 days");
  if (o.max_write_wait.count() < 0 || o.max_write_wait > kLongestWait)
    bad("max_write_wait " + std::to_string(o.max_write_wait.count()) +
        " ms is not in 0 .. 10 s");
}

}  // namespace

// --- the log ------------------------------------------------------------------------------

bool RecordLog::reserve_one(size_t most) {
  if (size() < items_.size()) return true;
  if (items_.size() >= most) return false;
  resize(std::max<size_t>(64, std::min(most, items_.size() * 2)));
  return true;
}

void RecordLog::shrink_to(size_t most) {
  if (items_.size() > most && size() <= most) resize(most);
}

void RecordLog::resize(size_t n) {
  std::vector<Item> items(n);
  for (uint64_t p = head_; p < tail_; p++) items[p & (n - 1)] = at(p);
  items_ = std::move(items);
}

void RecordLog::clear() {
  head_ = tail_;
  items_ = {};
}

// --- opening and closing ------------------------------------------------------------------

void CloseBackingFile::operator()(BackingFile* file) const noexcept {
  if (file == nullptr) return;
  if (file->detached()) {
    file->file_.close_descriptor_only();  // the parent's file and lock stay the parent's
    return;
  }
  delete file;
}

BackingFilePtr BackingFile::open(BackingFileOptions options, size_t index_limit,
                                 Released released) {
  return BackingFilePtr(new BackingFile(std::move(options), index_limit, std::move(released)));
}

BackingFile::BackingFile(BackingFileOptions options, size_t index_limit, Released released)
    : options_(std::move(options)), released_(std::move(released)) {
  check_options(options_);
  if (!options_.io) options_.io = std::make_shared<BackingFileIo>();
  forked_at_ = fork_count();
  identity_ = random_identity();
  open_file();
  try {
    stats_.direct_io = direct_io_;
    segments_ = options_.capacity_bytes / options_.batch_bytes;
    current_.data = aligned_buffer(options_.batch_bytes);
    for (unsigned i = 0; i < options_.write_queue_batches; i++)
      spare_buffers_.push_back(aligned_buffer(options_.batch_bytes));
    current_.segment = next_segment_++;
    set_index_limit(index_limit);
    index_.resize(std::min(kFirstSlots, most_slots_));
    count_memory();
    period_start_ns_ = now_ns();
    written_in_period_ = options_.batch_bytes;  // the first segment's write, to come
    writer_ = std::thread([this] { writer_loop(); });
  } catch (...) {
    std::free(current_.data);
    for (std::byte* b : spare_buffers_) std::free(b);
    throw;  // file_ closes and removes what it made
  }
}

void BackingFile::open_file() {
  file_ = OwnedFile::create(options_.path, "backing file", ".zsm-cold-");
  fd_ = file_.fd();
  direct_io_ = ::fcntl(fd_, F_SETFL, O_DIRECT) == 0;
}

BackingFile::~BackingFile() {
  {
    std::lock_guard guard(lock_);
    stopping_ = true;
  }
  writer_wake_.notify_all();
  writer_done_.notify_all();
  writer_.join();  // it leaves what is still queued: the file goes with the cache
  std::free(current_.data);
  for (std::byte* b : spare_buffers_) std::free(b);
  for (Batch& b : queue_) std::free(b.data);
}  // file_ removes its name if still ours, and closes

bool BackingFile::detached() const noexcept { return fork_count() != forked_at_; }

// --- index and log ------------------------------------------------------------------------

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

bool BackingFile::is_live(const RecordLog::Item& item) const {
  const Entry* e = find(item.hash);
  return e != nullptr && e->generation == (item.generation & ~RecordLog::kRelease);
}

// The index's size at its limit: the largest power of two whose slots and as many log items
// fit in `index_limit` bytes. Past 7/8 of it, or with the log full, the oldest records go.
void BackingFile::set_index_limit(size_t index_limit) {
  constexpr size_t per_slot = sizeof(Entry) + sizeof(RecordLog::Item);
  most_slots_ = kLeastSlots;
  while (most_slots_ * 2 * per_slot <= index_limit) most_slots_ *= 2;
  if (index_.empty()) return;
  while ((index_used_ > most_slots_ / 8 * 7 || log_.size() > most_slots_) && log_.size() > 0)
    drop_oldest(stats_.evicted_for_index);
  if (index_.size() > most_slots_) resize_index(most_slots_);
  log_.shrink_to(most_slots_);
}

void BackingFile::count_memory() {
  memory_bytes_ = index_.size() * sizeof(Entry) + log_.bytes() +
                  (1 + options_.write_queue_batches) * options_.batch_bytes;
}

void BackingFile::insert(uint64_t hash, uint64_t where, uint64_t generation) {
  if (Entry* e = find(hash)) {
    stats_.bytes_on_file -= length_of(e->where);
    stats_.bytes_on_file += length_of(where);
    e->where = where;
    e->generation = generation;
    return;
  }
  const size_t mask = index_.size() - 1;
  size_t i = home_slot(hash, mask);
  while (index_[i].where != 0) i = (i + 1) & mask;
  index_[i] = {hash, where, generation};
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

void BackingFile::remove(uint64_t hash, uint64_t generation, uint64_t& counter) {
  Entry* e = find(hash);
  if (e == nullptr || e->generation != generation) return;
  remove_at(static_cast<size_t>(e - index_.data()));
  counter++;
}

void BackingFile::resize_index(size_t slots) {
  std::vector<Entry> old = std::exchange(index_, std::vector<Entry>(slots));
  const size_t mask = index_.size() - 1;
  for (const Entry& e : old) {
    if (e.where == 0) continue;
    size_t i = home_slot(e.hash, mask);
    while (index_[i].where != 0) i = (i + 1) & mask;
    index_[i] = e;
  }
}

// Room in the index and the log for one more record: growing them within the limit, else
// dropping the oldest records. Throws std::bad_alloc when the heap is short, with nothing
// changed but records dropped.
void BackingFile::make_index_room() {
  while (index_used_ + 1 > index_.size() / 8 * 7 && (index_.size() < most_slots_ || log_.size() > 0)) {
    if (index_.size() < most_slots_)
      resize_index(index_.size() * 2);
    else
      drop_oldest(stats_.evicted_for_index);
  }
  while (!log_.reserve_one(most_slots_) && log_.size() > 0) drop_oldest(stats_.evicted_for_index);
}

void BackingFile::drop_oldest(uint64_t& counter) {
  const RecordLog::Item item = log_.at(log_.begin());
  log_.pop_front();
  remove(item.hash, item.generation & ~RecordLog::kRelease, counter);
}

// Pops the records of `segment` from the front of the log (the oldest segment: the one the
// ring reuses), and the dead items among them.
void BackingFile::forget_segment(uint64_t segment) {
  const uint64_t begin = segment * options_.batch_bytes, end = begin + options_.batch_bytes;
  while (log_.size() > 0) {
    const RecordLog::Item& item = log_.at(log_.begin());
    if (const Entry* e = find(item.hash);
        e != nullptr && e->generation == (item.generation & ~RecordLog::kRelease) &&
        (offset_of(e->where) < begin || offset_of(e->where) >= end))
      return;  // a live record of a later segment
    drop_oldest(stats_.evicted);
  }
}

// Forgets the records at log positions [from, to) (a batch whose write failed).
void BackingFile::forget_range(uint64_t from, uint64_t to) {
  uint64_t dropped = 0;
  for (uint64_t p = std::max(from, log_.begin()); p < std::min(to, log_.end()); p++) {
    const RecordLog::Item& item = log_.at(p);
    remove(item.hash, item.generation & ~RecordLog::kRelease, dropped);
  }
}

// The (hash, generation) of the records at log positions [from, to) staged for release and
// still live: those whose entries memory may now free.
// A heap too short for the list leaves the rest in memory, which loses nothing.
std::vector<std::pair<uint64_t, uint64_t>> BackingFile::to_release(uint64_t from, uint64_t to) {
  std::vector<std::pair<uint64_t, uint64_t>> released;
  if (!released_ || stopping_) return released;
  try {
    for (uint64_t p = std::max(from, log_.begin()); p < std::min(to, log_.end()); p++) {
      const RecordLog::Item& item = log_.at(p);
      if ((item.generation & RecordLog::kRelease) && is_live(item))
        released.emplace_back(item.hash, item.generation & ~RecordLog::kRelease);
    }
  } catch (const std::bad_alloc&) {
  }
  return released;
}

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

void BackingFile::set_owner(Released released, size_t index_limit) {
  std::lock_guard guard(lock_);
  released_ = std::move(released);
  set_index_limit(index_limit);
  count_memory();
}

// --- reading ------------------------------------------------------------------------------

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

// Whether a record read back is the one the index named: this file's, of this key and hash,
// of this generation, its length and checksum right.
bool BackingFile::record_checks(std::span<const std::byte> record, uint64_t hash,
                                std::string_view key, uint64_t generation) const {
  if (record.size() < sizeof(Header)) return false;
  Header h;
  std::memcpy(&h, record.data(), sizeof h);
  return h.magic == kMagic && h.identity == identity_ && h.hash == hash &&
         h.generation == generation && h.key_size == key.size() &&
         record_length(h.key_size, h.stored_size) == record.size() &&
         std::memcmp(record.data() + sizeof h, key.data(), key.size()) == 0 &&
         checksum_of(record.data(), h.key_size, h.stored_size) == h.checksum;
}

std::optional<FileRecordInfo> BackingFile::read(uint64_t hash, std::string_view key,
                                                std::vector<std::byte>& stored) {
  if (detached()) return std::nullopt;
  std::vector<std::byte> record;
  uint64_t where = 0, generation = 0;
  {
    std::lock_guard guard(lock_);
    const Entry* e = find(hash);
    if (e == nullptr) return std::nullopt;
    where = e->where;
    generation = e->generation;
    if (const Batch* b = batch_holding(offset_of(where))) {
      const std::byte* at = b->data + offset_of(where) % options_.batch_bytes;
      record.assign(at, at + length_of(where));
    }
  }
  if (record.empty() && !read_from_file(where, record)) {
    std::lock_guard guard(lock_);
    stats_.misses++;
    remove(hash, generation, stats_.read_errors);
    return std::nullopt;
  }
  if (!record_checks(record, hash, key, generation)) {
    std::lock_guard guard(lock_);
    stats_.misses++;
    remove(hash, generation, stats_.corrupt);
    return std::nullopt;
  }
  Header h;
  std::memcpy(&h, record.data(), sizeof h);
  const std::byte* bytes = record.data() + sizeof h + h.key_size;
  stored.assign(bytes, bytes + h.stored_size);
  return FileRecordInfo{h.kind, h.value_size, generation};
}

bool BackingFile::holds(uint64_t hash, uint64_t generation) const {
  if (detached()) return false;
  std::lock_guard guard(lock_);
  const Entry* e = find(hash);
  return e != nullptr && e->generation == generation;
}

bool BackingFile::contains(uint64_t hash) const {
  if (detached()) return false;
  std::lock_guard guard(lock_);
  return find(hash) != nullptr;
}

void BackingFile::erase(uint64_t hash) {
  if (detached()) return;
  std::lock_guard guard(lock_);
  if (Entry* e = find(hash)) remove_at(static_cast<size_t>(e - index_.data()));
}

void BackingFile::erase(uint64_t hash, uint64_t generation) {
  if (detached()) return;
  std::lock_guard guard(lock_);
  uint64_t dropped = 0;
  remove(hash, generation, dropped);
}

void BackingFile::clear() {
  if (detached()) return;
  std::lock_guard guard(lock_);
  index_ = std::vector<Entry>(std::min(kFirstSlots, most_slots_));
  index_used_ = 0;
  log_.clear();
  count_memory();
  stats_.bytes_on_file = 0;
  stats_.entries_on_file = 0;
}

void BackingFile::count_hit() {
  if (detached()) return;
  std::lock_guard guard(lock_);
  stats_.hits++;
}

void BackingFile::count_promoted() {
  if (detached()) return;
  std::lock_guard guard(lock_);
  stats_.promoted++;
}

void BackingFile::count_dropped(Staged why) {
  if (detached() || (why != Staged::queue_full && why != Staged::write_limit)) return;
  std::lock_guard guard(lock_);
  (why == Staged::queue_full ? stats_.dropped_busy : stats_.dropped_limit)++;
}

BackingFileStats BackingFile::stats() const {
  if (detached()) {
    BackingFileStats s;
    s.direct_io = direct_io_;
    s.detached = true;
    return s;
  }
  std::lock_guard guard(lock_);
  BackingFileStats s = stats_;
  s.memory_bytes = memory_bytes();
  return s;
}

size_t BackingFile::memory_bytes() const {
  return detached() ? 0 : memory_bytes_.load(std::memory_order_relaxed);
}

}  // namespace detail
}  // namespace zsm
