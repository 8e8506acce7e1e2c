// The region's threads never keep a process alive. glibc ends a process when its last thread
// exits (pthread_exit() in main, then the others return): exit(0) on that thread. glibc counts
// the region's threads (the evictor, the handlers) among them, so without this a program whose
// last thread ends that way would live on as a zombie leader held by the region's threads,
// which block every signal but SIGKILL.
//
// One watcher thread per process, while any region lives, does what glibc would: once the
// leader thread has exited, it looks, every kPeriod, for a thread of the process that is not
// the region's (registered below) and not a zombie; when none is left, it calls exit(0), as
// the last thread would have, so atexit handlers and stdio's flush run. It runs on the
// program's descriptor table (it is started by a program thread, not by the keeper) and with
// SIGBUS unblocked then, so that what exit() touches of region memory is served as for any
// program thread. Its cost while the leader lives: one read of /proc/self/task/PID/stat each
// period.
#pragma once

#include <sys/types.h>

namespace zsm::region {

// The region's own threads, by thread id: the watcher passes over them.
void register_region_thread(pid_t tid);
void unregister_region_thread(pid_t tid);

// A region was made (the first starts the watcher) or destroyed (the last stops it).
void watcher_region_made();
void watcher_region_gone();
// In a child of fork(): the parent's watcher and threads are not there (forget, first), and
// the child's regions, once set up, get a watcher of their own (start).
void watcher_forget_in_child();
void watcher_start_in_child();

}  // namespace zsm::region
