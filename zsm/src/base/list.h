// An intrusive doubly linked list: each element carries its links (ListLinks<T>), so that
// linking and unlinking never allocate and take O(1), and the list itself is one pointer
// to its first element. The pool's three lists are made of it: a shard's fullness lists of
// zspages (zspage/types.h, ClassShard::fullness_list), a pool's thread caches
// (ZsPool::tcache.caches) and the process-wide registry of pools (tcache/registry.h).
//
// An element type T names its links with a member function `ListLinks<T>& list_links()`,
// so that the list needs T complete only where an operation is used: a list of thread
// caches can be a field of ZsPool, which zspage/types.h declares before ThreadCache. One
// element is on at most one list of its type at a time.
//
// Null-terminated, not circular: the head is one pointer (eleven of them in a shard) and an
// empty list is a null pointer, so a list can be constinit and a zeroed struct holds empty
// lists. Unlinking an element branches on its neighbours instead of writing through a
// sentinel; it leaves the element's own links as they were (nothing reads them until the
// element is linked again, and the locked path writes no more than it needs).
//
// Every operation is always inlined (ZSM_ALWAYS_INLINE): the fullness lists are on the
// locked path, where an operation must cost what the pointer stores written out in its
// caller cost; bench/golden/fast_path.json counts that path.
//
// No locking: each list is guarded by whoever owns its head (the ZSM_GUARDED_BY of the field).
// Depends on base/compiler.h only.
#pragma once

#include "base/compiler.h"

namespace zsm {

template <typename T>
struct ListLinks {
  T* prev = nullptr;  // nullptr: the first element
  T* next = nullptr;  // nullptr: the last element
};

template <typename T>
class IntrusiveList {
 public:
  // Walks the list front to back. The loop's body may unlink (even free) the element it is
  // given, as the iterator has read the next one already, but no other element.
  class Iterator {
   public:
    constexpr explicit Iterator(T* at) : at_(at), next_(at != nullptr ? links(at).next : nullptr) {}
    constexpr T* operator*() const { return at_; }
    constexpr Iterator& operator++() {
      at_ = next_;
      if (next_ != nullptr) next_ = links(next_).next;
      return *this;
    }
    constexpr bool operator==(const Iterator& other) const { return at_ == other.at_; }

   private:
    T* at_;
    T* next_;
  };

  [[nodiscard]] ZSM_ALWAYS_INLINE constexpr bool empty() const { return head_ == nullptr; }
  [[nodiscard]] ZSM_ALWAYS_INLINE constexpr T* front() const { return head_; }

  ZSM_ALWAYS_INLINE constexpr void push_front(T* t) {
    T* old_head = head_;
    links(t).prev = nullptr;
    links(t).next = old_head;
    if (old_head != nullptr) links(old_head).prev = t;
    head_ = t;
  }

  // `t` must be on this list.
  ZSM_ALWAYS_INLINE constexpr void remove(T* t) {
    if (links(t).prev != nullptr)
      links(links(t).prev).next = links(t).next;
    else
      head_ = links(t).next;
    if (links(t).next != nullptr) links(links(t).next).prev = links(t).prev;
  }

  constexpr Iterator begin() const { return Iterator(head_); }
  constexpr Iterator end() const { return Iterator(nullptr); }

 private:
  ZSM_ALWAYS_INLINE static constexpr ListLinks<T>& links(T* t) { return t->list_links(); }

  T* head_ = nullptr;
};

}  // namespace zsm
