// The cache's index alone (compress/cache/index.h): entries placed by their hash, found
// through a predicate, removed with backward-shift deletion (entries after the hole move back
// only when their home allows it, across the table's end too), tables grown at 7/8 full and
// their bytes counted, the CLOCK hand, and sweeps that remove as they go. An entry's handle
// stands for its key here: the index never reads a record.
#include "index.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

namespace {

using zsm::detail::Entry;
using zsm::detail::Index;
using zsm::detail::IndexShard;
using zsm::detail::kFirstSlots;
using zsm::detail::Sweep;

// An entry for `handle` whose hash is `hash` (its home slot: hash masked to the table).
Entry entry(unsigned long handle, uint32_t hash) {
  Entry s;
  s.handle = handle;
  s.hash = hash;
  s.value_size = static_cast<uint32_t>(handle * 10);
  return s;
}

Entry* place(IndexShard& sh, const Entry& s) {
  EXPECT_TRUE(sh.reserve_slot());
  return sh.insert(s);
}

// The entry of `handle` in hash's probe sequence, or nullptr.
Entry* find(IndexShard& sh, unsigned long handle, uint32_t hash) {
  return sh.find_if(hash, [handle](const Entry& s) { return s.handle == handle; });
}

std::set<unsigned long> handles_of(IndexShard& sh) {
  std::set<unsigned long> handles;
  sh.for_each([&](const Entry& s) { handles.insert(s.handle); });
  return handles;
}

TEST(CacheIndex, ShardOfTakesTheTopBitsOfTheHash) {
  Index four(4);
  ASSERT_EQ(four.nr_shards(), 4u);
  EXPECT_EQ(&four.shard_of(0), &four.shard(0));
  EXPECT_EQ(&four.shard_of(UINT32_MAX), &four.shard(0)) << "the low bits pick the slot only";
  EXPECT_EQ(&four.shard_of(uint64_t{1} << 62), &four.shard(1));
  EXPECT_EQ(&four.shard_of(uint64_t{2} << 62), &four.shard(2));
  EXPECT_EQ(&four.shard_of(~uint64_t{0}), &four.shard(3));
  Index one(1);
  EXPECT_EQ(&one.shard_of(~uint64_t{0}), &one.shard(0));
  size_t walked = 0;
  for (IndexShard& sh : four) {
    EXPECT_EQ(sh.size(), 0u);
    walked++;
  }
  EXPECT_EQ(walked, 4u);
}

TEST(CacheIndex, InsertFindAndRemove) {
  Index index(1);
  IndexShard& sh = index.shard(0);
  EXPECT_EQ(find(sh, 1, 7), nullptr) << "an empty shard has no table to probe";
  for (unsigned long h = 1; h <= 10; h++) place(sh, entry(h, static_cast<uint32_t>(h * 0x9e37)));
  EXPECT_EQ(sh.size(), 10u);
  for (unsigned long h = 1; h <= 10; h++) {
    Entry* s = find(sh, h, static_cast<uint32_t>(h * 0x9e37));
    ASSERT_NE(s, nullptr) << h;
    EXPECT_EQ(s->value_size, h * 10);
  }
  EXPECT_EQ(find(sh, 3, 2 * 0x9e37), nullptr) << "found only in its own hash's sequence";
  sh.remove(find(sh, 4, 4 * 0x9e37));
  EXPECT_EQ(sh.size(), 9u);
  EXPECT_EQ(find(sh, 4, 4 * 0x9e37), nullptr);
  EXPECT_EQ(handles_of(sh), (std::set<unsigned long>{1, 2, 3, 5, 6, 7, 8, 9, 10}));
}

// Entries that differ only above the table's mask share a home slot: each lies further along
// the probe sequence, and removing one moves the rest back so no empty slot cuts the sequence.
TEST(CacheIndex, CollisionsOnTheLowBitsShiftBackOnRemoval) {
  Index index(1);
  IndexShard& sh = index.shard(0);
  ASSERT_TRUE(sh.reserve_slot());
  ASSERT_EQ(sh.table_slots(), kFirstSlots);
  const uint32_t home = 5;
  std::vector<Entry*> at;
  for (unsigned long h = 1; h <= 4; h++)
    at.push_back(place(sh, entry(h, home + static_cast<uint32_t>(h) * kFirstSlots)));
  for (size_t i = 1; i < at.size(); i++) EXPECT_EQ(at[i], at[0] + i) << "placed one after another";
  sh.remove(at[0]);
  for (unsigned long h = 2; h <= 4; h++)
    EXPECT_EQ(find(sh, h, home + static_cast<uint32_t>(h) * kFirstSlots), at[h - 2])
        << "entry " << h << " moved back one slot";
  EXPECT_EQ(sh.size(), 3u);
}

// The same 32 bits of hash twice: the predicate tells the entries apart.
TEST(CacheIndex, EqualHashesAreToldApartByThePredicate) {
  Index index(1);
  IndexShard& sh = index.shard(0);
  Entry* first = place(sh, entry(1, 42));
  Entry* second = place(sh, entry(2, 42));
  EXPECT_EQ(find(sh, 1, 42), first);
  EXPECT_EQ(find(sh, 2, 42), second);
  EXPECT_EQ(find(sh, 3, 42), nullptr);
  int asked = 0;
  EXPECT_EQ(sh.find_if(42, [&](const Entry&) { return ++asked == 2; }), second);
  EXPECT_EQ(asked, 2) << "asked of each entry with the hash, in probe order";
}

// An entry whose home lies after the hole stays; one whose home lies before it moves back.
TEST(CacheIndex, RemovalMovesBackOnlyEntriesWhoseHomeAllows) {
  Index index(1);
  IndexShard& sh = index.shard(0);
  Entry* a = place(sh, entry(1, 5));   // slot 5, its home
  Entry* b = place(sh, entry(2, 6));   // slot 6, its home
  Entry* c = place(sh, entry(3, 21));  // home 5 (21 & 15): slot 7
  ASSERT_EQ(b, a + 1);
  ASSERT_EQ(c, a + 2);
  sh.remove(a);
  EXPECT_EQ(find(sh, 2, 6), b) << "at its home: not moved";
  EXPECT_EQ(find(sh, 3, 21), a) << "moved back to its home, the hole";
}

// Probe sequences wrap at the table's end, and so does the backward shift.
TEST(CacheIndex, RemovalShiftsAcrossTheTableEnd) {
  Index index(1);
  IndexShard& sh = index.shard(0);
  const uint32_t last = kFirstSlots - 1;
  Entry* x = place(sh, entry(1, last));
  Entry* y = place(sh, entry(2, last + kFirstSlots));  // home 15: wraps to slot 0
  Entry* z = place(sh, entry(3, 0));                   // home 0: slot 1
  ASSERT_EQ(y, x - last);
  ASSERT_EQ(z, y + 1);
  sh.remove(x);
  EXPECT_EQ(find(sh, 2, last + kFirstSlots), x) << "back across the end, to its home";
  EXPECT_EQ(find(sh, 3, 0), y) << "then into the slot y left";
  EXPECT_EQ(sh.size(), 2u);
}

// A table grows to kFirstSlots at its first entry, doubles when an entry would pass 7/8 full,
// keeps every entry through a growth, and the index counts the bytes of every shard's table.
TEST(CacheIndex, TablesGrowAtSevenEighthsAndTheirBytesAreCounted) {
  Index index(2);
  IndexShard& sh = index.shard(0);
  EXPECT_EQ(sh.growth(), kFirstSlots * sizeof(Entry));
  EXPECT_EQ(index.bytes(), 0u);
  const size_t fit = kFirstSlots * 7 / 8;  // 14 of 16
  for (unsigned long h = 1; h <= fit; h++) {
    place(sh, entry(h, static_cast<uint32_t>(h)));
    EXPECT_EQ(sh.table_slots(), kFirstSlots);
  }
  EXPECT_EQ(index.bytes(), kFirstSlots * sizeof(Entry));
  EXPECT_EQ(sh.growth(), kFirstSlots * sizeof(Entry)) << "a 15th entry would pass 7/8";
  place(sh, entry(fit + 1, static_cast<uint32_t>(fit + 1)));
  EXPECT_EQ(sh.table_slots(), 2 * kFirstSlots);
  EXPECT_EQ(sh.growth(), 0u);
  EXPECT_EQ(index.bytes(), 2 * kFirstSlots * sizeof(Entry));
  for (unsigned long h = 1; h <= fit + 1; h++)
    EXPECT_NE(find(sh, h, static_cast<uint32_t>(h)), nullptr) << h;

  place(index.shard(1), entry(100, 100));
  EXPECT_EQ(index.bytes(), 3 * kFirstSlots * sizeof(Entry)) << "both shards' tables";
  sh.clear();
  EXPECT_EQ(sh.size(), 0u);
  EXPECT_EQ(sh.table_slots(), 0u);
  EXPECT_EQ(find(sh, 1, 1), nullptr);
  EXPECT_EQ(index.bytes(), kFirstSlots * sizeof(Entry));
  index.shard(1).clear();
  EXPECT_EQ(index.bytes(), 0u);
}

// Removals leave the table its size: it never shrinks.
TEST(CacheIndex, TablesDoNotShrink) {
  Index index(1);
  IndexShard& sh = index.shard(0);
  for (unsigned long h = 1; h <= 40; h++) place(sh, entry(h, static_cast<uint32_t>(h * 7919)));
  const size_t slots = sh.table_slots();
  EXPECT_EQ(slots, 4 * kFirstSlots);
  for (unsigned long h = 1; h <= 40; h++) sh.remove(find(sh, h, static_cast<uint32_t>(h * 7919)));
  EXPECT_EQ(sh.size(), 0u);
  EXPECT_EQ(sh.table_slots(), slots);
  EXPECT_EQ(index.bytes(), slots * sizeof(Entry));
}

TEST(CacheIndex, ForEachVisitsEveryEntryAndStopsOnFalse) {
  Index index(1);
  IndexShard& sh = index.shard(0);
  for (unsigned long h = 1; h <= 5; h++) place(sh, entry(h, static_cast<uint32_t>(h)));
  EXPECT_EQ(handles_of(sh), (std::set<unsigned long>{1, 2, 3, 4, 5}));
  int visited = 0;
  sh.for_each([&](const Entry&) { return ++visited < 2; });
  EXPECT_EQ(visited, 2);
}

// The hand stops at the first entry the predicate accepts and stays there; near_hand() looks
// from it without moving it.
TEST(CacheIndex, TheHandStaysOnTheEntryItStoppedAt) {
  Index index(1);
  IndexShard& sh = index.shard(0);
  EXPECT_EQ(sh.turn_hand(100, [](Entry&) { return true; }), nullptr) << "an empty shard";
  // Slots 1..6, each entry at its home.
  for (unsigned long h = 1; h <= 6; h++) place(sh, entry(h, static_cast<uint32_t>(h)));
  std::vector<unsigned long> passed;
  Entry* stop = sh.turn_hand(100, [&](Entry& s) {
    passed.push_back(s.handle);
    return s.handle == 3;
  });
  ASSERT_NE(stop, nullptr);
  EXPECT_EQ(stop->handle, 3u);
  EXPECT_EQ(passed, (std::vector<unsigned long>{1, 2, 3}));
  EXPECT_EQ(sh.near_hand(1, [](Entry&) { return true; }), stop) << "the hand stayed on it";
  Entry* five = sh.near_hand(3, [](Entry& s) { return s.handle == 5; });
  ASSERT_NE(five, nullptr);
  EXPECT_EQ(five->handle, 5u);
  EXPECT_EQ(sh.near_hand(2, [](Entry& s) { return s.handle == 5; }), nullptr) << "3 and 4 only";
  EXPECT_EQ(sh.turn_hand(1, [](Entry& s) { return s.handle == 3; }), stop)
      << "not moved by near_hand()";

  // Out of steps: the hand stops where they ran out, and goes round the table's end.
  EXPECT_EQ(sh.turn_hand(4, [](Entry&) { return false; }), nullptr);  // over 3, 4, 5, 6
  Entry* next = sh.turn_hand(kFirstSlots, [](Entry&) { return true; });
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->handle, 1u) << "from slot 7, past the end, to slot 1";
}

// A sweep that removes an entry looks at its slot again: the entry the backward shift moved
// there is visited too, and every entry exactly once.
TEST(CacheIndex, SweepLooksAgainAtASlotItEmptied) {
  Index index(1);
  IndexShard& sh = index.shard(0);
  for (unsigned long h = 1; h <= 4; h++)
    place(sh, entry(h, 3 + static_cast<uint32_t>(h) * kFirstSlots));  // slots 3..6, home 3
  place(sh, entry(10, 9));
  std::vector<unsigned long> visited;
  sh.sweep([&](Entry& s) {
    visited.push_back(s.handle);
    if (s.handle % 2 == 0 && s.handle != 10) return Sweep::next;
    sh.remove(&s);
    return Sweep::again;
  });
  EXPECT_EQ(visited, (std::vector<unsigned long>{1, 2, 3, 4, 10}));
  EXPECT_EQ(handles_of(sh), (std::set<unsigned long>{2, 4}));
  EXPECT_NE(find(sh, 2, 3 + 2 * kFirstSlots), nullptr);
  EXPECT_NE(find(sh, 4, 3 + 4 * kFirstSlots), nullptr);

  visited.clear();
  sh.sweep([&](Entry& s) {
    visited.push_back(s.handle);
    return Sweep::stop;
  });
  EXPECT_EQ(visited.size(), 1u);
}

}  // namespace
