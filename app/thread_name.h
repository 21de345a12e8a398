// NameThisThread: gives the calling thread a name that `top -H`, `ps -L`,
// perf and /proc/<pid>/task/<tid>/comm show, so that a profile or bench/soak
// can say which of arbiterd's threads spent the CPU.
//
// Thread-safe: names only the calling thread.
#pragma once

#include <pthread.h>

namespace arbiter::app {

// REQUIRES: `name` is at most 15 characters (the kernel's limit); a longer
// name is refused by the kernel and the thread keeps its old one.
inline void NameThisThread(const char* name) { pthread_setname_np(pthread_self(), name); }

}  // namespace arbiter::app
