// The cache's backing file (backing_file.h has the layout and the locking; zsm/backing_file.hpp
// the contract): opening its file and starting the writer, closing it (in a child of fork()
// too), reading a record back from a buffer or the file, and the calls that forget records or
// count. The index and log are in backing_file_index.cpp, the writing in backing_file_writer.cpp.
#include "backing_file.h"
#include "backing_file_parts.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <new>
#include <pthread.h>
#include <random>
#include <stdexcept>
#include <string>
#include <sys/random.h>
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

using namespace backing_file_parts;

namespace {

constexpr size_t kMinBatch = size_t{128} << 10, kMaxBatch = size_t{16} << 20;
constexpr size_t kFirstSlots = 1024;
constexpr auto kLongestPeriod = std::chrono::hours(24 * 366);
constexpr auto kLongestWait = std::chrono::seconds(10);

std::byte* aligned_buffer(size_t size) {
  void* p = std::aligned_alloc(kAlign, round_up(size, kAlign));
  if (p == nullptr) throw std::bad_alloc();
  return static_cast<std::byte*>(p);
}

struct FreeAligned {
  void operator()(std::byte* p) const { std::free(p); }
};

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
