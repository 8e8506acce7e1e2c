// The compressed cache (zsm/cache.hpp).
//
// Index. Shards of open-addressing tables with linear probing and backward-shift deletion;
// the top bits of a key's 64-bit hash pick the shard, the low bits the slot. A Slot (24 B)
// holds the record's handle and sizes, 32 more bits of the hash, and the CLOCK bit.
//
// Records. The pool object of an entry is [key][stored bytes], where the stored bytes are the
// compressed value, the raw value, or the 8-byte word of a same-filled value. A record longer
// than a page is split into a chain: objects of exactly one page, each ending with the handle
// of the next, then one object that holds the rest (at most a page). A page-sized object takes
// a page of its own (the huge class), so a chain wastes only its links and its last piece's
// class rounding.
//
// Locks. A shard's std::shared_mutex: get, contains and for_each_key read; put, erase and
// eviction write. No call holds two shard locks: a put stores its objects before it takes its
// shard's lock, and makes room (eviction, compaction) after it has dropped it, one shard at a
// time. The pool has its own locks (no pool-wide one on store, free or read).
//
// Capacity. bytes_held() = pool pages + pool bookkeeping + index slots. The pool's page limit
// is the capacity, so its pages can never exceed it; the index and bookkeeping are brought
// back under it by make_room() before put() returns.
//
// Density. Every call that frees a record (erase, a put replacing a value, an eviction)
// checks afterwards whether the pool's holes have grown by kCompactAfterZspages zspages since
// the last compaction, and compacts if so (compact_if_worth()); a get that drops a corrupt
// value does not (compaction moves objects through links the corruption may have hit). Holes
// only grow when a record is freed, so after any mix of puts, erases and evictions the pool
// holds at most what the last compaction could not free (about one partly filled zspage a
// class) plus that margin.
// Checking only where a put found no room was not enough: a put at the capacity first evicts
// an entry of its own class and takes its slot, so a tier whose hits are erased (RocksDB's
// advise_erase) never failed a store and kept a third of its pool as holes.
#include <zsm/cache.hpp>

#include "backing_file.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <shared_mutex>

namespace zsm {

namespace {

class CacheCategory : public std::error_category {
 public:
  const char* name() const noexcept override { return "zsm.cache"; }
  std::string message(int value) const override {
    switch (static_cast<CacheError>(value)) {
      case CacheError::value_too_large: return "value larger than the cache's maximum";
      case CacheError::key_too_large: return "key empty or larger than the cache's maximum";
      case CacheError::no_memory: return "no room for the value, even after evicting";
      case CacheError::corrupt: return "stored value failed to decompress; entry dropped";
      case CacheError::buffer_too_small: return "buffer smaller than the value";
      case CacheError::bad_options: return "cache options out of range";
    }
    return "unknown cache error";
  }
};

[[noreturn]] void fail(CacheError e) { throw std::system_error(make_error_code(e)); }

enum Kind : uint8_t { kCompressed, kRecompressed, kRaw, kSame };
constexpr uint8_t kReferenced = 1;       // CLOCK: used since the hand last passed
constexpr uint8_t kRecompressTried = 2;  // recompress() has looked at it
constexpr uint8_t kIdle = 4;             // not read or written since mark_idle()
constexpr uint8_t kOnFile = 8;           // promoted from the backing file, which still has it
constexpr size_t kTailLink = sizeof(unsigned long);
constexpr size_t kLargestValue = size_t{1} << 20;  // CacheOptions::max_value_size's bound
constexpr unsigned kAnyClass = UINT32_MAX;  // evict_one(): no class preferred
// evict_one() looks at up to this many slots from the hand for an entry of the class it prefers.
constexpr unsigned kClassScan = 64;
// The pool is compacted once its holes have grown by this many zspages since the last
// compaction (see "Density" above); in a 32 MiB pool, two 32 KiB zspages are 0.2 %.
// RocksDB bench, 32 MiB zsm-2nd tier, blocks held at the end, zipf/uniform:
// 1: 15,538/15,533 (3,603/11,073 compactions); 2: 15,450/15,451; 4: 15,323/15,247
// (2,390/4,534 compactions); the old rule, a quarter of the pool in holes: 14,048/13,545.
constexpr size_t kCompactAfterZspages = 2;

struct Slot {
  unsigned long handle = 0;  // 0: an empty slot
  uint32_t hash = 0;         // bits 0..31 of the key's hash (bits above pick the shard)
  uint32_t value_size = 0;
  uint32_t stored_size = 0;  // bytes after the key
  uint16_t key_size = 0;
  uint8_t kind = 0;
  uint8_t flags = 0;         // set by readers too: through std::atomic_ref

  [[nodiscard]] size_t record_size() const { return size_t{key_size} + stored_size; }
};
static_assert(sizeof(Slot) == 24, "the index costs 24 bytes an entry");

// A get's mark: referenced, and no longer idle.
void mark_used(Slot& s) {
  std::atomic_ref<uint8_t> flags(s.flags);
  if (flags.fetch_or(kReferenced, std::memory_order_relaxed) & kIdle)
    flags.fetch_and(static_cast<uint8_t>(~kIdle), std::memory_order_relaxed);
}
bool test_and_clear(Slot& s, uint8_t flag) {
  return std::atomic_ref<uint8_t>(s.flags).fetch_and(static_cast<uint8_t>(~flag),
                                                     std::memory_order_relaxed) & flag;
}

struct Shard {
  mutable std::shared_mutex lock;
  std::vector<Slot> slots;  // a power of two long, or empty
  size_t used = 0;
  size_t hand = 0;          // CLOCK hand
};

uint64_t hash_key(std::string_view key) { return std::hash<std::string_view>{}(key); }

// One 8-byte word repeated (the word, if so).
std::optional<uint64_t> same_filled_word(std::span<const std::byte> v) {
  if (v.empty() || v.size() % 8 != 0) return std::nullopt;
  uint64_t first, word;
  std::memcpy(&first, v.data(), 8);
  for (size_t off = 8; off < v.size(); off += 8) {
    std::memcpy(&word, v.data() + off, 8);
    if (word != first) return std::nullopt;
  }
  return first;
}

void fill_words(std::span<std::byte> out, uint64_t word) {
  for (size_t off = 0; off < out.size(); off += 8) std::memcpy(out.data() + off, &word, 8);
}

// Per-thread buffers: 0 a record being assembled, 1 a copy of an object spanning pages,
// 2 a split record put back together.
std::vector<std::byte>& scratch(int which, size_t size) {
  thread_local std::vector<std::byte> buffers[3];
  if (buffers[which].size() < size) buffers[which].resize(size);
  return buffers[which];
}

}  // namespace

const std::error_category& cache_category() noexcept {
  static const CacheCategory category;
  return category;
}

std::error_code make_error_code(CacheError e) noexcept {
  return {static_cast<int>(e), cache_category()};
}

struct Cache::Impl {
  CacheOptions options;
  std::unique_ptr<Codec> codec, recodec;
  zs_pool* pool = nullptr;
  size_t page_size = 0;
  size_t huge_class_size = 0;
  size_t zspage_bytes = 0;  // the largest zspage: the most one store can add to the pool
  std::vector<Shard> shards;
  unsigned shard_shift = 0;  // 64 - log2(shards)

  std::mutex compact_lock;  // zs_compact() returns 0 while another runs: callers take turns
  std::atomic<size_t> index_bytes{0};
  std::atomic<size_t> holes_left{0};  // holes() after the last compaction
  std::atomic<size_t> next_victim{0};
  std::atomic<uint64_t> orig{0}, compr{0}, record_bytes{0}, same{0}, huge{0}, huge_since{0},
      entries{0}, hits{0}, misses{0}, evictions{0}, recompressed{0}, mem_used_max{0},
      written_back{0};
  std::unique_ptr<detail::BackingFile> file;  // with CacheOptions::backing_file

  explicit Impl(CacheOptions o);
  ~Impl();

  Shard& shard_of(uint64_t h) { return shards[shard_shift == 64 ? 0 : h >> shard_shift]; }

  size_t pool_bytes() const { return zs_get_total_pages(pool) * page_size; }
  size_t bytes_held() const {
    return pool_bytes() + zs_pool_bookkeeping_bytes(pool) + index_bytes.load() +
           (file ? file->memory_bytes() : 0);
  }

  // --- records -------------------------------------------------------------------------

  bool split(size_t record_size) const { return record_size > page_size; }
  size_t head_payload() const { return page_size - kTailLink; }
  // The page-sized pieces before the last one of a split record.
  size_t heads_of(size_t record_size) const {
    return (record_size - page_size + head_payload() - 1) / head_payload();
  }
  // The pool bytes a record of this size takes: its pieces' slots (a page for those in the
  // huge class), bookkeeping aside.
  size_t footprint(size_t record_size) const;

  // Stores a record (key and stored bytes, contiguous); returns the head handle, or 0 when
  // the pool has no room.
  unsigned long store_record(std::span<const std::byte> record);
  void free_record(const Slot& s);
  void free_chain(unsigned long handle, size_t size);
  // Copies a record out of the pool into `out` (record_size() bytes).
  void read_record(const Slot& s, std::span<std::byte> out) const;
  // Calls fn(record bytes) with the record readable in one piece: straight from the pool
  // when it lies in one page, else from a copy; returns what fn returns.
  template <typename Fn>
  auto with_record(const Slot& s, Fn fn) const;
  bool key_matches(const Slot& s, std::string_view key) const;

  // --- index ---------------------------------------------------------------------------

  Slot* find(Shard& sh, uint64_t h, std::string_view key) const;
  void insert(Shard& sh, const Slot& s);
  void remove_at(Shard& sh, size_t i);
  void grow(Shard& sh);
  void shrink(Shard& sh);
  void resize(Shard& sh, size_t nr_slots);
  void account(const Slot& s, int sign);
  void drop(Shard& sh, Slot* s);
  bool erase_entry(std::string_view key);  // erase() without the compaction after

  // --- room ----------------------------------------------------------------------------

  // The pool's size class of a record: the class a store of it needs a slot in.
  unsigned class_of_record(size_t record_size) const;
  bool evict_one(unsigned long keep, unsigned prefer_class);
  Slot* clock_hand(Shard& sh, unsigned long keep);
  Slot* of_class_near_hand(Shard& sh, Slot* at_hand, unsigned long keep, unsigned cls) const;
  size_t holes() const;
  bool worth_compacting() const;
  unsigned long compact();
  void compact_if_worth();
  // What free_some() did: nothing, evicted an entry, or compacted the pool below its floor.
  enum class Room { none, evicted, compacted };
  Room free_some(size_t floor, unsigned long keep = 0, unsigned prefer_class = kAnyClass);
  bool make_room(size_t limit, unsigned long keep = 0);
  unsigned long store_making_room(std::span<const std::byte> record);
  // Decodes a record's value into out (value_size bytes): CodecError::corrupt when it does not
  // decompress, another error when the codec could not run (no memory for its context).
  std::error_code decode(const Slot& s, std::span<const std::byte> record,
                         std::span<std::byte> out) const;

  // --- the backing file ----------------------------------------------------------------

  // Stages the entry's record for the file (shard lock held); with `release`, the entry is
  // freed from memory once it is on file (release_written()).
  detail::Staged write_back(const Slot& s, bool release);
  void release_written(uint64_t hash, unsigned long token);
  // A get that missed in memory: the value from the file into `out`, put back into the pool
  // with promote_on_read. std::nullopt when the file does not have it.
  std::optional<size_t> get_from_file(std::string_view key, uint64_t h, std::span<std::byte> out);
  void promote(std::string_view key, uint64_t h, const detail::FileRecordInfo& info,
               std::span<const std::byte> stored);
  size_t writeback_idle_shard(Shard& sh, bool& queue_full);
};

namespace {

// What is wrong with the options, naming the option and its range; empty when nothing is.
// max_value_size 0 has been resolved to the page size.
std::string options_problem(const CacheOptions& o, size_t page_size) {
  auto is = [](const char* name, uint64_t value, const std::string& want) {
    return std::string(name) + " " + std::to_string(value) + ": want " + want;
  };
  if (o.shards == 0 || (o.shards & (o.shards - 1)) != 0 || o.shards > 1024)
    return is("shards", o.shards, "a power of two in 1 .. 1024");
  if (o.capacity_bytes < page_size)
    return is("capacity_bytes", o.capacity_bytes,
              "at least the pool's page size, " + std::to_string(page_size));
  if (o.max_value_size > kLargestValue)
    return is("max_value_size", o.max_value_size, "0 (a page) or 1 .. 1048576");
  if (o.max_key_size == 0 || o.max_key_size > page_size / 2 || o.max_key_size > UINT16_MAX)
    return is("max_key_size", o.max_key_size, "1 .. half a page, " + std::to_string(page_size / 2));
  if (!o.backing_file) return {};
  const BackingFileOptions& f = *o.backing_file;
  if (f.batch_bytes < o.max_key_size + o.max_value_size + 64)
    return is("backing_file.batch_bytes", f.batch_bytes,
              "at least the largest record, max_key_size + max_value_size + 64");
  if ((1 + uint64_t{f.write_queue_batches}) * f.batch_bytes > o.capacity_bytes / 4)
    return "backing_file buffers ((1 + write_queue_batches) x batch_bytes = " +
           std::to_string((1 + uint64_t{f.write_queue_batches}) * f.batch_bytes) +
           " bytes): want at most a quarter of capacity_bytes";
  return {};
}

}  // namespace

Cache::Impl::Impl(CacheOptions o) : options(std::move(o)) {
  codec = Codec::create(options.codec);
  if (options.recompress_codec) recodec = Codec::create(*options.recompress_codec);
  const unsigned n = options.shards;
  zs_pool_config pc = options.pool;
  page_size = pc.page_size != 0 ? pc.page_size : 4096;
  if (options.max_value_size == 0) options.max_value_size = page_size;
  if (std::string why = options_problem(options, page_size); !why.empty())
    throw std::system_error(make_error_code(CacheError::bad_options), why);
  pc.max_pages = options.capacity_bytes / page_size;
  pool = zs_create_pool_ex("zsm-cache", &pc);
  if (pool == nullptr && errno == ENOMEM) fail(CacheError::no_memory);
  if (pool == nullptr)
    throw std::system_error(make_error_code(CacheError::bad_options),
                            "pool: zs_create_pool_ex() refused its page_size, chain_size, "
                            "nr_shards or flags");
  huge_class_size = zs_huge_class_size(pool);
  zspage_bytes = (pc.chain_size != 0 ? pc.chain_size : 8) * page_size;
  shards = std::vector<Shard>(n);
  shard_shift = 64;
  while ((1u << (64 - shard_shift)) < n) shard_shift--;
  if (options.backing_file) {
    try {
      file = std::make_unique<detail::BackingFile>(
          *options.backing_file,
          [this](uint64_t hash, unsigned long token) { release_written(hash, token); });
    } catch (const std::invalid_argument& e) {
      zs_destroy_pool(pool);
      throw std::system_error(make_error_code(CacheError::bad_options), e.what());
    } catch (...) {
      zs_destroy_pool(pool);
      throw;
    }
  }
}

// The file first: its writer may still be freeing written entries from the pool.
Cache::Impl::~Impl() {
  file.reset();
  zs_destroy_pool(pool);
}

// A split record's pieces, first to last: page-sized objects of head_payload() bytes and the
// link to the next piece, then one object of the rest (at most a page).
unsigned long Cache::Impl::store_record(std::span<const std::byte> record) {
  if (!split(record.size())) {
    unsigned long h = zs_malloc(pool, record.size());
    if (h != 0) zs_obj_write(pool, h, record.data(), record.size());
    return h;
  }
  // Stored from the last piece back, so that each piece is written with its link.
  const size_t heads = heads_of(record.size());
  auto last = record.subspan(heads * head_payload());
  unsigned long next = zs_malloc(pool, last.size());
  if (next == 0) return 0;
  zs_obj_write(pool, next, last.data(), last.size());
  std::vector<std::byte>& buf = scratch(1, page_size);
  for (size_t i = heads; i-- > 0;) {
    unsigned long head = zs_malloc(pool, page_size);
    if (head == 0) {
      free_chain(next, record.size() - (i + 1) * head_payload());
      return 0;
    }
    std::memcpy(buf.data(), record.data() + i * head_payload(), head_payload());
    std::memcpy(buf.data() + head_payload(), &next, kTailLink);
    zs_obj_write(pool, head, buf.data(), page_size);
    next = head;
  }
  return next;
}

// Frees the chain of pieces from `handle` that holds the last `size` bytes of a record.
void Cache::Impl::free_chain(unsigned long handle, size_t size) {
  std::vector<std::byte>& copy = scratch(1, page_size);
  while (split(size)) {
    void* mem = zs_obj_read_begin(pool, handle, page_size, copy.data());
    unsigned long next;
    std::memcpy(&next, static_cast<std::byte*>(mem) + head_payload(), kTailLink);
    zs_obj_read_end(pool, handle, page_size, mem);
    zs_free(pool, handle);
    handle = next;
    size -= head_payload();
  }
  zs_free(pool, handle);
}

void Cache::Impl::read_record(const Slot& s, std::span<std::byte> out) const {
  std::vector<std::byte>& copy = scratch(1, page_size);
  unsigned long handle = s.handle;
  size_t done = 0, size = s.record_size();
  while (split(size - done)) {
    void* mem = zs_obj_read_begin(pool, handle, page_size, copy.data());
    zs_memcpy(out.data() + done, mem, head_payload());
    unsigned long next;
    std::memcpy(&next, static_cast<std::byte*>(mem) + head_payload(), kTailLink);
    zs_obj_read_end(pool, handle, page_size, mem);
    handle = next;
    done += head_payload();
  }
  void* mem = zs_obj_read_begin(pool, handle, size - done, copy.data());
  zs_memcpy(out.data() + done, mem, size - done);
  zs_obj_read_end(pool, handle, size - done, mem);
}

void Cache::Impl::free_record(const Slot& s) { free_chain(s.handle, s.record_size()); }

template <typename Fn>
auto Cache::Impl::with_record(const Slot& s, Fn fn) const {
  size_t size = s.record_size();
  if (split(size)) {
    std::vector<std::byte>& whole = scratch(2, size);
    read_record(s, whole);
    return fn(std::span<const std::byte>(whole.data(), size));
  }
  struct ReadGuard {
    zs_pool* pool;
    unsigned long handle;
    size_t size;
    void* mem;
    ~ReadGuard() { zs_obj_read_end(pool, handle, size, mem); }
  } read{pool, s.handle, size, zs_obj_read_begin(pool, s.handle, size, scratch(1, size).data())};
  return fn(std::span<const std::byte>(static_cast<const std::byte*>(read.mem), size));
}

bool Cache::Impl::key_matches(const Slot& s, std::string_view key) const {
  if (s.key_size != key.size()) return false;
  std::vector<std::byte>& copy = scratch(1, page_size);
  void* mem = zs_obj_read_begin(pool, s.handle, key.size(), copy.data());
  bool same = std::memcmp(mem, key.data(), key.size()) == 0;
  zs_obj_read_end(pool, s.handle, key.size(), mem);
  return same;
}

Slot* Cache::Impl::find(Shard& sh, uint64_t h, std::string_view key) const {
  if (sh.slots.empty()) return nullptr;
  size_t mask = sh.slots.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    Slot& s = sh.slots[i];
    if (s.handle == 0) return nullptr;
    if (s.hash == static_cast<uint32_t>(h) && key_matches(s, key)) return &s;
  }
}

void Cache::Impl::grow(Shard& sh) { resize(sh, sh.slots.empty() ? 16 : sh.slots.size() * 2); }

// Halves the index when its entries fit below the growth threshold at half the size: undoes
// the growth of a put that failed. (Not on every erase: the threshold would make a shard
// at the boundary grow and shrink in turn.)
void Cache::Impl::shrink(Shard& sh) {
  if (sh.slots.size() > 16 && sh.used * 8 <= sh.slots.size() / 2 * 7)
    resize(sh, sh.slots.size() / 2);
}

void Cache::Impl::resize(Shard& sh, size_t nr_slots) {
  std::vector<Slot> old = std::move(sh.slots);
  sh.slots = std::vector<Slot>(nr_slots);
  index_bytes += sh.slots.size() * sizeof(Slot);
  index_bytes -= old.size() * sizeof(Slot);
  size_t mask = sh.slots.size() - 1;
  for (const Slot& s : old) {
    if (s.handle == 0) continue;
    size_t i = s.hash & mask;
    while (sh.slots[i].handle != 0) i = (i + 1) & mask;
    sh.slots[i] = s;
  }
  sh.hand = 0;
}

void Cache::Impl::insert(Shard& sh, const Slot& s) {
  // Linear probing with backward-shift deletion stays quick up to 7/8 full; growing later
  // keeps the index near 30 bytes an entry.
  if ((sh.used + 1) * 8 > sh.slots.size() * 7) grow(sh);
  size_t mask = sh.slots.size() - 1;
  size_t i = s.hash & mask;
  while (sh.slots[i].handle != 0) i = (i + 1) & mask;
  sh.slots[i] = s;
  sh.used++;
}

// Backward-shift deletion: no tombstones, probe sequences stay short.
void Cache::Impl::remove_at(Shard& sh, size_t i) {
  size_t mask = sh.slots.size() - 1;
  for (size_t j = (i + 1) & mask; sh.slots[j].handle != 0; j = (j + 1) & mask) {
    size_t home = sh.slots[j].hash & mask;
    // Move j back into the hole at i when its home does not lie in (i, j].
    if (((j - home) & mask) >= ((j - i) & mask)) {
      sh.slots[i] = sh.slots[j];
      i = j;
    }
  }
  sh.slots[i] = Slot{};
  sh.used--;
}

void Cache::Impl::account(const Slot& s, int sign) {
  auto add = [sign](std::atomic<uint64_t>& counter, uint64_t v) {
    if (sign > 0)
      counter += v;
    else
      counter -= v;
  };
  add(orig, s.value_size);
  add(compr, s.kind == kSame ? 0 : s.stored_size);
  add(record_bytes, s.record_size());
  add(entries, 1);
  if (s.kind == kSame) add(same, 1);
  if (s.kind == kRaw) add(huge, 1);
}

void Cache::Impl::drop(Shard& sh, Slot* s) {
  account(*s, -1);
  free_record(*s);
  remove_at(sh, static_cast<size_t>(s - sh.slots.data()));
}

bool Cache::Impl::erase_entry(std::string_view key) {
  uint64_t h = hash_key(key);
  Shard& sh = shard_of(h);
  std::unique_lock guard(sh.lock);
  const bool on_file = file && file->contains(h);
  if (on_file) file->erase(h);
  Slot* s = find(sh, h, key);
  if (s == nullptr) return on_file;
  drop(sh, s);
  return true;
}

size_t Cache::Impl::footprint(size_t record_size) const {
  size_t heads = split(record_size) ? heads_of(record_size) : 0;
  size_t last = record_size - heads * head_payload();
  return heads * page_size + (last >= huge_class_size ? page_size : last + ZS_HANDLE_SIZE);
}

unsigned Cache::Impl::class_of_record(size_t record_size) const {
  size_t first_object = split(record_size) ? page_size : record_size;
  return zs_lookup_class_index(pool, static_cast<unsigned>(first_object + ZS_HANDLE_SIZE));
}

// CLOCK over one shard at a time, shards in turn. Evicts an entry the hand finds
// unreferenced, never the record `keep`.
//
// With a class to prefer (a store found the pool at its page limit and no free slot in that
// class), it evicts instead the first unreferenced entry of that class within kClassScan slots
// of the hand, if there is one (see of_class_near_hand()). Why: evicting another class's entry
// frees a slot there, rarely a page, so the store still fails and every such eviction leaves
// a hole that only compaction (moving objects) gives back; a slot of the store's own class is
// taken by the store at once.
bool Cache::Impl::evict_one(unsigned long keep, unsigned prefer_class) {
  size_t start = next_victim.fetch_add(1, std::memory_order_relaxed);
  for (size_t tries = 0; tries < shards.size(); tries++) {
    Shard& sh = shards[(start + tries) % shards.size()];
    std::unique_lock guard(sh.lock);
    Slot* victim = clock_hand(sh, keep);
    if (victim == nullptr) continue;
    if (prefer_class != kAnyClass) victim = of_class_near_hand(sh, victim, keep, prefer_class);
    if (file && write_back(*victim, false) == detail::Staged::taken) written_back++;
    drop(sh, victim);
    evictions++;
    return true;
  }
  return false;
}

// Moves the shard's hand to the next entry other than `keep` that is not referenced since the
// hand last passed, clearing the bit of each referenced one on the way, and returns that entry;
// the hand stays on it. Nullptr when the shard holds no other entry.
Slot* Cache::Impl::clock_hand(Shard& sh, unsigned long keep) {
  if (sh.used == 0) return nullptr;
  size_t mask = sh.slots.size() - 1;
  for (size_t steps = 0; steps < 2 * sh.slots.size() + 1; steps++) {
    Slot& s = sh.slots[sh.hand];
    if (s.handle != 0 && s.handle != keep && !test_and_clear(s, kReferenced)) return &s;
    sh.hand = (sh.hand + 1) & mask;
  }
  return nullptr;
}

// The first unreferenced entry of class `cls` (other than `keep`) in the kClassScan slots from
// the hand, else `at_hand`. It only reads the bits: the hand moves no faster than CLOCK's, so
// entries read since it last passed keep their standing. (Advancing the hand over every entry
// looked at cleared their bits up to 64 times faster than evictions and cost a Zipf-read
// RocksDB tier 4 points of hit ratio.)
Slot* Cache::Impl::of_class_near_hand(Shard& sh, Slot* at_hand, unsigned long keep,
                                      unsigned cls) const {
  size_t mask = sh.slots.size() - 1;
  for (size_t n = 0, i = sh.hand; n < kClassScan; n++, i = (i + 1) & mask) {
    Slot& s = sh.slots[i];
    if (s.handle == 0 || s.handle == keep ||
        (std::atomic_ref<uint8_t>(s.flags).load(std::memory_order_relaxed) & kReferenced))
      continue;
    if (class_of_record(s.record_size()) == cls) return &s;
  }
  return at_hand;
}

// Pool bytes outside live objects: free slots inside zspages, and the rounding of objects up
// to their class's slot size (an estimate: each object counted at its size with its header).
size_t Cache::Impl::holes() const {
  size_t held = pool_bytes(), live = record_bytes.load() + entries.load() * ZS_HANDLE_SIZE;
  return held > live ? held - live : 0;
}

// Whether compacting may free pages: the holes have grown by more than kCompactAfterZspages
// of the largest zspage since the last compaction left them. Not the holes alone: part of
// them no compaction frees (each class's last, partly filled zspage, and class rounding), and
// a pool held with those above a threshold would compact for nothing at every call.
bool Cache::Impl::worth_compacting() const {
  return pool_bytes() > 4 * page_size &&
         holes() > holes_left.load() + kCompactAfterZspages * zspage_bytes;
}

// Frees some pool memory, and says what counts as progress: an entry evicted, or the pool
// compacted below `floor` pages. Compacts first when worth_compacting(); otherwise, or when
// compaction does not go below the floor, evicts one entry other than `keep` (of
// `prefer_class` if it can, see evict_one()); with nothing left to evict, compaction is the
// last resort.
Cache::Impl::Room Cache::Impl::free_some(size_t floor, unsigned long keep,
                                         unsigned prefer_class) {
  if (worth_compacting() && compact() > 0 && zs_get_total_pages(pool) < floor)
    return Room::compacted;
  if (evict_one(keep, prefer_class)) return Room::evicted;
  compact();
  return zs_get_total_pages(pool) < floor ? Room::compacted : Room::none;
}

// Compacts when worth_compacting(), unless another thread is compacting already: that one
// frees the same holes (zs_compact() covers the whole pool).
void Cache::Impl::compact_if_worth() {
  if (!worth_compacting()) return;
  std::unique_lock guard(compact_lock, std::try_to_lock);
  if (!guard.owns_lock() || !worth_compacting()) return;
  zs_compact(pool);
  holes_left = holes();
}

unsigned long Cache::Impl::compact() {
  std::lock_guard guard(compact_lock);
  unsigned long freed = zs_compact(pool);
  holes_left = holes();
  return freed;
}

// Brings bytes_held() down to `limit`, keeping the record `keep` (the one a put just stored).
// False when everything else is gone and it still does not fit.
bool Cache::Impl::make_room(size_t limit, unsigned long keep) {
  while (bytes_held() > limit)
    if (free_some(zs_get_total_pages(pool), keep) == Room::none) return false;
  return true;
}

// Stores a record, making room while the pool has none; 0 when it cannot fit even in an
// empty pool.
//
// Why this ends. A failed attempt can leave pages behind: a split record's last pieces are
// stored, a piece before them finds no page, and their zspages, freed again, stay as their
// classes' spares. Compacting frees exactly those spares, so "compaction freed pages" would let
// the next attempt do the same forever. Progress is therefore measured against the pages held
// before the failed attempt: each retry follows an eviction (entries fall) or a pool smaller
// than before that attempt (pages fall, entries unchanged). Alone, the pair (entries, pages
// before the attempt) falls in lexicographic order at every retry and cannot fall forever. With
// puts failing on other threads at the same time, the pages before an attempt may include their
// leftovers, which their compaction then frees, and two such puts could each see the other's
// leftovers go and retry forever. So at most kCompactionRetries retries may follow a compaction
// alone; past that the floor is 0, which no compaction goes below, so only an eviction lets a
// put retry, and each eviction removes an entry (what other threads add is their own puts'
// progress).
//
// Within a zspage of the capacity, a put first evicts an entry of its own class (see
// evict_one()): the store then takes the slot that freed, so a full cache replaces entries
// without opening a zspage. Otherwise the store would open one past the capacity, and
// make_room() would evict entries of every class until enough zspages empty or compaction,
// moving objects, frees them.
unsigned long Cache::Impl::store_making_room(std::span<const std::byte> record) {
  constexpr unsigned kCompactionRetries = 4;
  if (bytes_held() + zspage_bytes > options.capacity_bytes)
    evict_one(0, class_of_record(record.size()));
  for (unsigned compactions = 0;;) {
    size_t pages_before = zs_get_total_pages(pool);
    if (unsigned long handle = store_record(record)) return handle;
    Room room = free_some(compactions < kCompactionRetries ? pages_before : 0, 0,
                          class_of_record(record.size()));
    if (room == Room::none) return 0;
    if (room == Room::compacted) compactions++;
  }
}

std::error_code Cache::Impl::decode(const Slot& s, std::span<const std::byte> record,
                                    std::span<std::byte> out) const {
  auto stored = record.subspan(s.key_size, s.stored_size);
  switch (s.kind) {
    case kSame: {
      uint64_t word;
      std::memcpy(&word, stored.data(), 8);
      fill_words(out, word);
      return {};
    }
    case kRaw:
      zs_memcpy(out.data(), stored.data(), out.size());
      return {};
    default: {
      const Codec& c = s.kind == kRecompressed ? *recodec : *codec;
      return c.decompress(stored, out);
    }
  }
}

// --- the backing file ------------------------------------------------------------------------

// An entry promoted from the file and evicted again is not written again while the file
// still holds its record (a put of a new value makes a new entry and erases that record).
detail::Staged Cache::Impl::write_back(const Slot& s, bool release) {
  return with_record(s, [&](std::span<const std::byte> record) {
    std::string_view key(reinterpret_cast<const char*>(record.data()), s.key_size);
    const uint64_t h = hash_key(key);
    if (!release && (s.flags & kOnFile) && file->contains(h)) return detail::Staged::taken;
    return file->stage(h, key, {s.kind, s.value_size},
                       record.subspan(s.key_size, s.stored_size), release, s.handle);
  });
}

// On the writer thread: the entry staged with `token` (its handle then) is on file; frees it
// from memory if it is still that record (no put or eviction replaced it meanwhile).
void Cache::Impl::release_written(uint64_t hash, unsigned long token) {
  Shard& sh = shard_of(hash);
  std::unique_lock guard(sh.lock);
  if (sh.slots.empty()) return;
  const size_t mask = sh.slots.size() - 1;
  for (size_t i = hash & mask; sh.slots[i].handle != 0; i = (i + 1) & mask) {
    Slot& s = sh.slots[i];
    if (s.handle != token || s.hash != static_cast<uint32_t>(hash)) continue;
    drop(sh, &s);
    written_back++;
    return;
  }
}

std::optional<size_t> Cache::Impl::get_from_file(std::string_view key, uint64_t h,
                                                 std::span<std::byte> out) {
  std::vector<std::byte> stored;
  std::optional<detail::FileRecordInfo> info = file->read(h, key, stored);
  if (!info) return std::nullopt;
  if (out.size() < info->value_size) fail(CacheError::buffer_too_small);
  Slot s;
  s.kind = info->kind;
  s.value_size = info->value_size;
  s.stored_size = static_cast<uint32_t>(stored.size());
  if (std::error_code ec = decode(s, stored, out.first(s.value_size))) {
    file->erase(h);
    if (ec == CodecError::corrupt) fail(CacheError::corrupt);
    fail(CacheError::no_memory);
  }
  if (options.backing_file->promote_on_read) promote(key, h, *info, stored);
  return s.value_size;
}

// Puts a record read from the file back into the pool, as it was (no recompression), unless
// a put got there first. The file keeps the record (kOnFile), so that evicting the entry
// again costs no write.
void Cache::Impl::promote(std::string_view key, uint64_t h, const detail::FileRecordInfo& info,
                          std::span<const std::byte> stored) {
  std::vector<std::byte>& record = scratch(0, key.size() + stored.size());
  std::memcpy(record.data(), key.data(), key.size());
  if (!stored.empty()) std::memcpy(record.data() + key.size(), stored.data(), stored.size());
  Slot s;
  s.hash = static_cast<uint32_t>(h);
  s.key_size = static_cast<uint16_t>(key.size());
  s.value_size = info.value_size;
  s.stored_size = static_cast<uint32_t>(stored.size());
  s.kind = info.kind;
  s.flags = kReferenced;
  s.handle = store_making_room(std::span(record).first(s.record_size()));
  if (s.handle == 0) return;  // no room: it stays on file
  {
    Shard& sh = shard_of(h);
    std::unique_lock guard(sh.lock);
    if (find(sh, h, key) != nullptr) {
      free_record(s);
      return;
    }
    s.flags |= kOnFile;  // the file keeps its record: an eviction need not write it again
    insert(sh, s);
    account(s, +1);
  }
  file->count_promoted();
  make_room(options.capacity_bytes, s.handle);
}

// Stages the shard's idle entries, clearing their mark; stops when the writer's queue is full
// (queue_full then says so) or the write limit is reached. Returns how many it staged.
size_t Cache::Impl::writeback_idle_shard(Shard& sh, bool& queue_full) {
  std::unique_lock guard(sh.lock);
  size_t staged = 0;
  for (Slot& s : sh.slots) {
    if (s.handle == 0 || (s.flags & (kIdle | kReferenced)) != kIdle) continue;
    detail::Staged r = write_back(s, true);
    if (r == detail::Staged::queue_full) {
      queue_full = true;
      return staged;
    }
    if (r == detail::Staged::write_limit) return staged;
    if (r == detail::Staged::taken) {
      s.flags &= static_cast<uint8_t>(~kIdle);
      staged++;
    }
  }
  return staged;
}

// --- the API ---------------------------------------------------------------------------------

Cache::Cache(CacheOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Cache::~Cache() = default;

void Cache::put(std::string_view key, std::span<const std::byte> value) {
  Impl& m = *impl_;
  if (key.empty() || key.size() > m.options.max_key_size) fail(CacheError::key_too_large);
  if (value.size() > m.options.max_value_size) fail(CacheError::value_too_large);

  Slot s;
  uint64_t h = hash_key(key);
  s.hash = static_cast<uint32_t>(h);
  s.key_size = static_cast<uint16_t>(key.size());
  s.value_size = static_cast<uint32_t>(value.size());
  s.flags = kReferenced;
  // The record, [key][stored bytes], assembled where compression writes.
  std::vector<std::byte>& record = scratch(0, key.size() + m.codec->bound(value.size()) + 8);
  std::memcpy(record.data(), key.data(), key.size());
  std::span<std::byte> after_key = std::span(record).subspan(key.size());
  if (auto word = same_filled_word(value)) {
    s.kind = kSame;
    s.stored_size = 8;
    std::memcpy(after_key.data(), &*word, 8);
  } else {
    std::optional<size_t> n = m.codec->compress(value, after_key);
    // Raw when compression saves no pool memory: zram's rule (a compressed record in the
    // huge class takes a page, as the raw one does), for chains too.
    if (!n || *n >= value.size() ||
        m.footprint(key.size() + *n) >= m.footprint(key.size() + value.size())) {
      s.kind = kRaw;
      s.stored_size = static_cast<uint32_t>(value.size());
      if (!value.empty()) std::memcpy(after_key.data(), value.data(), value.size());
    } else {
      s.kind = kCompressed;
      s.stored_size = static_cast<uint32_t>(*n);
    }
  }
  s.handle = m.store_making_room(std::span(record).first(s.record_size()));
  if (s.handle == 0) fail(CacheError::no_memory);
  {
    Shard& sh = m.shard_of(h);
    std::unique_lock guard(sh.lock);
    if (Slot* old = m.find(sh, h, key)) m.drop(sh, old);
    m.insert(sh, s);
    m.account(s, +1);
    if (s.kind == kRaw) m.huge_since++;
    if (m.file) {
      m.file->erase(h);  // an older value on file must not come back
      if (s.kind == kRaw && m.options.backing_file->write_huge)
        m.file->stage(h, key, {s.kind, s.value_size},
                      std::span(record).subspan(key.size(), s.stored_size), true, s.handle);
    }
  }
  uint64_t used = m.pool_bytes(), max = m.mem_used_max.load();
  while (used > max && !m.mem_used_max.compare_exchange_weak(max, used)) {
  }
  if (!m.make_room(m.options.capacity_bytes, s.handle)) {
    erase(key);
    {
      Shard& sh = m.shard_of(h);
      std::unique_lock guard(sh.lock);
      m.shrink(sh);  // the slots this put grew the index by
    }
    m.make_room(m.options.capacity_bytes);  // the zspage it leaves empty, compacted away
    fail(CacheError::no_memory);
  }
  m.compact_if_worth();  // the value it replaced, the entries it evicted
}

std::optional<size_t> Cache::get(std::string_view key, std::span<std::byte> out) {
  Impl& m = *impl_;
  uint64_t h = hash_key(key);
  Shard& sh = m.shard_of(h);
  bool corrupt = false;
  {
    std::shared_lock guard(sh.lock);
    size_t mask = sh.slots.size() - 1;
    for (size_t i = h & mask; !sh.slots.empty(); i = (i + 1) & mask) {
      Slot& s = sh.slots[i];
      if (s.handle == 0) break;
      if (s.hash != static_cast<uint32_t>(h) || s.key_size != key.size()) continue;
      // One read of the record: compare the key, then decode from the same bytes.
      int found = m.with_record(s, [&](std::span<const std::byte> record) {
        if (std::memcmp(record.data(), key.data(), key.size()) != 0) return 0;
        if (out.size() < s.value_size) return -1;
        std::error_code ec = m.decode(s, record, out.first(s.value_size));
        return !ec ? 1 : ec == CodecError::corrupt ? -2 : -3;
      });
      if (found == 0) continue;
      if (found == -1) fail(CacheError::buffer_too_small);
      if (found == -3) fail(CacheError::no_memory);  // the value is fine: keep it
      if (found == 1) {
        mark_used(s);
        m.hits++;
        return s.value_size;
      }
      corrupt = true;
      break;
    }
  }
  if (!corrupt) {
    if (m.file) {
      if (std::optional<size_t> n = m.get_from_file(key, h, out)) {
        m.hits++;
        return n;
      }
    }
    m.misses++;
    return std::nullopt;
  }
  // A value that does not decompress is worth nothing: drop it. Not compacted after: objects
  // are moved through the pool's own links, which the corruption may have hit too.
  m.erase_entry(key);
  fail(CacheError::corrupt);
}

std::optional<std::vector<std::byte>> Cache::get(std::string_view key) {
  Impl& m = *impl_;
  uint64_t h = hash_key(key);
  size_t size;
  {
    Shard& sh = m.shard_of(h);
    std::shared_lock guard(sh.lock);
    Slot* s = m.find(sh, h, key);
    if (s == nullptr && !m.file) {
      m.misses++;
      return std::nullopt;
    }
    size = s != nullptr ? s->value_size : m.options.max_value_size;  // on file, perhaps
  }
  std::vector<std::byte> value(size);
  // The value may change between the two looks: retry with its new size.
  for (;;) {
    try {
      std::optional<size_t> n = get(key, value);
      if (!n) return std::nullopt;
      value.resize(*n);
      return value;
    } catch (const std::system_error& e) {
      if (e.code() != CacheError::buffer_too_small) throw;
      value.resize(m.options.max_value_size);
    }
  }
}

bool Cache::erase(std::string_view key) {
  if (!impl_->erase_entry(key)) return false;
  impl_->compact_if_worth();
  return true;
}

bool Cache::contains(std::string_view key) const {
  Impl& m = *impl_;
  uint64_t h = hash_key(key);
  Shard& sh = m.shard_of(h);
  std::shared_lock guard(sh.lock);
  return m.find(sh, h, key) != nullptr || (m.file && m.file->contains(h));
}

void Cache::for_each_key(const std::function<void(std::string_view)>& fn) const {
  Impl& m = *impl_;
  for (Shard& sh : m.shards) {
    std::shared_lock guard(sh.lock);
    for (const Slot& s : sh.slots) {
      if (s.handle == 0) continue;
      m.with_record(s, [&](std::span<const std::byte> record) {
        fn(std::string_view(reinterpret_cast<const char*>(record.data()), s.key_size));
      });
    }
  }
}

void Cache::clear() {
  Impl& m = *impl_;
  for (Shard& sh : m.shards) {
    std::unique_lock guard(sh.lock);
    for (Slot& s : sh.slots) {
      if (s.handle == 0) continue;
      m.account(s, -1);
      m.free_record(s);
    }
    m.index_bytes -= sh.slots.size() * sizeof(Slot);
    sh.slots = {};
    sh.used = 0;
    sh.hand = 0;
  }
  if (m.file) m.file->clear();
  m.compact();
}

void Cache::mark_idle() {
  for (Shard& sh : impl_->shards) {
    std::unique_lock guard(sh.lock);
    for (Slot& s : sh.slots)
      if (s.handle != 0) s.flags = static_cast<uint8_t>((s.flags | kIdle) & ~kReferenced);
  }
}

size_t Cache::writeback_idle() {
  Impl& m = *impl_;
  if (!m.file) return 0;
  size_t staged = 0;
  for (Shard& sh : m.shards) {
    for (bool queue_full = true; queue_full;) {
      queue_full = false;
      staged += m.writeback_idle_shard(sh, queue_full);
      if (queue_full) m.file->flush();  // without the shard's lock: the writer takes it
    }
  }
  m.file->flush();
  return staged;
}

void Cache::flush_backing_file() {
  if (impl_->file) impl_->file->flush();
}

size_t Cache::recompress(size_t max_entries) {
  Impl& m = *impl_;
  if (!m.recodec) return 0;
  size_t moved = 0, tried = 0;
  std::vector<std::byte> value;
  for (Shard& sh : m.shards) {
    std::unique_lock guard(sh.lock);
    for (Slot& s : sh.slots) {
      if (tried == max_entries) break;
      bool candidate = s.kind == kCompressed || s.kind == kRaw;  // zram: type=huge too
      if (s.handle == 0 || !candidate || (s.flags & kRecompressTried)) continue;
      tried++;
      s.flags |= kRecompressTried;
      value.resize(s.value_size);
      std::vector<std::byte>& record = scratch(0, s.key_size + m.recodec->bound(s.value_size));
      bool ok = m.with_record(s, [&](std::span<const std::byte> old) {
        zs_memcpy(record.data(), old.data(), s.key_size);
        return !m.decode(s, old, value);
      });
      if (!ok) continue;
      std::optional<size_t> n =
          m.recodec->compress(value, std::span(record).subspan(s.key_size));
      auto class_of = [&](size_t record_size) {
        return zs_lookup_class_index(m.pool, static_cast<unsigned>(record_size + ZS_HANDLE_SIZE));
      };
      if (!n || class_of(s.key_size + *n) >= class_of(s.record_size())) continue;
      unsigned long h = m.store_record(std::span(record).first(s.key_size + *n));
      if (h == 0) continue;
      m.account(s, -1);
      m.free_record(s);
      s.handle = h;
      s.stored_size = static_cast<uint32_t>(*n);
      s.kind = kRecompressed;
      m.account(s, +1);
      moved++;
      m.recompressed++;
    }
  }
  if (moved > 0) m.compact();  // the old records left holes
  m.make_room(m.options.capacity_bytes);  // new records may have opened zspages
  return moved;
}

CacheStats Cache::stats() const {
  const Impl& m = *impl_;
  struct zs_pool_stats ps{};
  zs_pool_stats(m.pool, &ps);
  CacheStats s;
  s.orig_data_size = m.orig.load();
  s.compr_data_size = m.compr.load();
  s.mem_used_total = m.pool_bytes();
  s.mem_limit = m.options.capacity_bytes;
  s.mem_used_max = std::max<uint64_t>(m.mem_used_max.load(), s.mem_used_total);
  s.same_pages = m.same.load();
  s.pages_compacted = ps.pages_compacted;
  s.huge_pages = m.huge.load();
  s.huge_pages_since = m.huge_since.load();
  s.entries = m.entries.load();
  s.bytes_held = m.bytes_held();
  s.hits = m.hits.load();
  s.misses = m.misses.load();
  s.evictions = m.evictions.load();
  s.recompressed = m.recompressed.load();
  s.written_back = m.written_back.load();
  if (m.file) s.backing_file = m.file->stats();
  return s;
}

std::string Cache::bd_stat() const {
  const BackingFileStats f = stats().backing_file;
  auto pages = [](uint64_t bytes) { return static_cast<unsigned long long>((bytes + 4095) / 4096); };
  char line[96];
  std::snprintf(line, sizeof line, "%8llu %8llu %8llu", pages(f.bytes_on_file),
                pages(f.bytes_read), pages(f.bytes_written));
  return line;
}

std::string Cache::mm_stat() const {
  CacheStats s = stats();
  char line[256];
  std::snprintf(line, sizeof line, "%8llu %8llu %8llu %8llu %8llu %8llu %8llu %8llu %8llu",
                static_cast<unsigned long long>(s.orig_data_size),
                static_cast<unsigned long long>(s.compr_data_size),
                static_cast<unsigned long long>(s.mem_used_total),
                static_cast<unsigned long long>(s.mem_limit),
                static_cast<unsigned long long>(s.mem_used_max),
                static_cast<unsigned long long>(s.same_pages),
                static_cast<unsigned long long>(s.pages_compacted),
                static_cast<unsigned long long>(s.huge_pages),
                static_cast<unsigned long long>(s.huge_pages_since));
  return line;
}

zs_pool* Cache::pool() const noexcept { return impl_->pool; }
const CacheOptions& Cache::options() const noexcept { return impl_->options; }

}  // namespace zsm
