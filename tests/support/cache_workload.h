// tests/support/cache_workload.h: the cache as a workload's target (workload.h). CacheTarget is
// a zsm::Cache with a model: a checked live set of key -> value that forgets what the cache
// evicted. A get that hits returns exactly the model's value for a key the model holds (a miss
// makes the model forget the key); an erase that finds a key finds one the model holds; a put
// that finds no room (when the test allows it) leaves its key absent; reconcile() checks that
// the cache's keys, values and statistics are exactly the model's. The threaded cache tests
// keep versions instead of values and state their own targets over the same engine.
// Depends on workload.h and the cache's public header.
#pragma once

#include <zsm/cache.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "bytes.h"
#include "workload.h"

namespace zsm_test {

class CacheTarget {
 public:
  LiveSet<std::string, Bytes> model;
  std::function<std::string(Rng&)> keys;  // the key each operation draws
  std::function<Bytes(Rng&)> values;      // the value each put draws
  bool puts_may_fail = false;             // a put may find no room (CacheError::no_memory)

  explicit CacheTarget(zsm::Cache& cache) : cache_(cache) {}

  zsm::Cache& cache() { return cache_; }
  size_t live_size() const { return model.size(); }

  // ---- operations ----

  Check put(Rng& rng) {
    const std::string key = keys(rng);
    Bytes value = values(rng);
    try {
      cache_.put(key, value);
    } catch (const std::system_error& e) {
      if (!puts_may_fail || e.code() != zsm::CacheError::no_memory)
        return ::testing::AssertionFailure() << "put(" << key << ", " << value.size()
                                             << " bytes) threw " << e.what();
      model.erase(key);
      if (cache_.contains(key))
        return ::testing::AssertionFailure() << "a failed put left " << key << " present";
      return ::testing::AssertionSuccess();
    }
    model.set(key, std::move(value));
    return ::testing::AssertionSuccess();
  }
  Check get(Rng& rng) {
    const std::string key = keys(rng);
    std::optional<Bytes> got = cache_.get(key);
    auto* want = model.find(key);
    if (!got) {
      model.erase(key);  // evicted, or never there
      return ::testing::AssertionSuccess();
    }
    if (want == nullptr)
      return ::testing::AssertionFailure() << "get(" << key << ") found a key never put or erased";
    if (*got != want->bytes)
      return ::testing::AssertionFailure() << "get(" << key << ") returned " << got->size()
                                           << " bytes, not the " << want->bytes.size() << " put";
    return ::testing::AssertionSuccess();
  }
  Check erase(Rng& rng) {
    const std::string key = keys(rng);
    const bool found = cache_.erase(key);
    if (!model.erase(key) && found)
      return ::testing::AssertionFailure() << "erase(" << key
                                           << ") found a key never put or erased";
    return ::testing::AssertionSuccess();
  }
  // The model forgets what the cache evicted; anything else must match exactly: keys, values,
  // entries and the bytes they hold before compression.
  Check reconcile(Rng&) {
    std::set<std::string> present;
    cache_.for_each_key([&](std::string_view k) { present.emplace(k); });
    std::vector<std::string> evicted;
    for (const auto& o : model)
      if (present.count(o.key) == 0) evicted.push_back(o.key);
    for (const std::string& key : evicted) model.erase(key);
    if (present.size() != model.size())
      return ::testing::AssertionFailure() << "the cache holds " << present.size() - model.size()
                                           << " keys never put or erased";
    uint64_t orig = 0;
    for (const auto& o : model) {
      if (cache_.get(o.key) != o.bytes)
        return ::testing::AssertionFailure() << o.key << " does not hold the value put";
      orig += o.bytes.size();
    }
    const zsm::CacheStats s = cache_.stats();
    if (s.entries != model.size())
      return ::testing::AssertionFailure() << "entries " << s.entries << " != " << model.size();
    if (s.orig_data_size != orig)
      return ::testing::AssertionFailure() << "orig_data_size " << s.orig_data_size << " != "
                                           << orig;
    return ::testing::AssertionSuccess();
  }

 private:
  zsm::Cache& cache_;
};

}  // namespace zsm_test
