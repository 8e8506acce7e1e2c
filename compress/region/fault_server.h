// Serving a fault: what a handler thread does with a message from the userfaultfd, and what a
// faulting thread does in its SIGBUS handler (self_serve.cpp). A fault only decompresses and
// installs; making room is the evictor's (evictor.h), and a fault waits for it only past the
// hard limit (budget.h).
//
// A MISSING fault installs the page: a never-written page as the zero page (a write fault: a
// zeroed page it may write), a page in probation by moving it back from its slot (a minor
// fault: copied from its slot), a stored page from its copy: write-protected and clean for a read (its copy stays
// valid), writable for a write (the copy is freed). A read fault that continues its thread's
// sequential stream also installs the stored pages after it, clean, in one UFFDIO_COPY: the
// window doubles while the stream goes on (2, 4, ... fault_around_pages) and starts again at
// one page when it breaks; each thread has its own stream (the fault's thread id). A
// write-protect fault on a clean page frees its copy and un-protects it. A fault on a page
// installed meanwhile (another thread's fault on the same page) only wakes its thread; one on
// a page the state says is mapped but the kernel does not (the program dropped it, against
// the contract) installs zeros, which is what a dropped page reads as.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "budget.h"
#include "copy_store.h"
#include "counters.h"
#include "fork_gate.h"
#include "page_calls.h"
#include "page_moves.h"
#include "page_table.h"
#include "probation.h"

namespace zsm::region {

// A serving thread's buffers: fault_around pages to decompress into, and one for file reads.
struct ServeBuffers {
  std::byte* pages = nullptr;
  std::byte* file_buf = nullptr;
};

// Which fault-around window each thread's next fault gets: a small table keyed by the
// thread, racy by design (a lost update costs one window).
class Streams {
 public:
  // The pages to install at p (1 = no fault-around), given the thread's last fault.
  uint32_t window(uint64_t thread, uint32_t p, uint32_t most);
  // The thread installed [p, p + n): its stream continues at p + n with this window.
  void note(uint64_t thread, uint32_t p, uint32_t n, uint32_t window);

 private:
  struct Entry {
    std::atomic<uint64_t> thread{0};
    std::atomic<uint32_t> next{0};
    std::atomic<uint32_t> window{1};
  };
  static constexpr size_t kEntries = 64;
  Entry entries_[kEntries];
};

struct RegionParts {
  PageTable& pages;
  CopyStore& copies;
  Probation& probation;
  Budget& budget;
  Counters& counters;
  PageCalls& calls;
  ForkGate& gate;
  Event& evictor_wake;
};

class FaultServer {
 public:
  struct Fault {
    uint32_t page;
    bool write;          // a write access (x86's error code in the SIGBUS mode; else a read)
    bool write_protect;  // a write-protect fault (handler threads: the message says; SIGBUS:
                         // a fault on a mapped clean page is one)
    uint64_t thread;     // the faulting thread, for its fault-around stream
    pid_t tid = 0;       // its thread id where the message names it (the fork gate), 0: this one
  };

  FaultServer(const RegionParts& parts, uintptr_t base, unsigned fault_around, bool self_serve)
      : parts_(parts), base_(base), fault_around_(fault_around), self_serve_(self_serve) {}

  // Serves one fault, inside the fork gate; `in_signal` when on a SIGBUS handler (nothing
  // allocates then).
  void serve(const Fault& f, ServeBuffers& b, bool in_signal);

  // For the range calls, which hold p's lock and took the budget for an unmapped page: maps
  // it (writable if asked), or makes a mapped one writable.
  void install(PageLock& l, bool writable, ServeBuffers& b);
  void make_writable(PageLock& l, bool may_allocate);
  // After installing: wakes the evictor below the low watermark.
  void poke_evictor();
  // The calling thread's codec contexts, before it serves (copy_store.h).
  void prepare_thread() const { parts_.copies.prepare_thread(); }

 private:
  uintptr_t addr(uint32_t p) const { return base_ + uintptr_t{p} * kPageSize; }
  // One attempt: false when the budget had no room (nothing held; wait and retry).
  // *brought_back: the page was in probation or stored.
  // What a fault did that counts as the program's stall: a page brought back from probation,
  // or decompressed (a promotion, which the cold age's steering reads).
  enum class BroughtBack { no, from_probation, decompressed };
  bool serve_once(const Fault& f, ServeBuffers& b, bool in_signal, BroughtBack* brought_back);
  void serve_mapped(const Fault& f, PageLock& l, bool in_signal);
  void install_zero(PageLock& l, bool write);
  void install_from_probation(PageLock& l, bool write, bool may_allocate);
  void install_copy(PageLock& l, bool write, ServeBuffers& b, bool may_allocate);
  uint32_t install_run(const Fault& f, PageLock& l, ServeBuffers& b, uint32_t window);
  uint32_t lock_stored_run(uint32_t p, uint32_t most, PageLock* out);
  bool marked_on_refault(const PageState& s) const;

  RegionParts parts_;
  PageMoves moves_{parts_.copies, parts_.probation, parts_.budget, parts_.counters};
  uintptr_t base_;
  unsigned fault_around_;
  bool self_serve_;
  Streams streams_;
};

}  // namespace zsm::region
