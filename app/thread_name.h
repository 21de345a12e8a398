// Named threads: `top -H`, `ps -L`, perf and /proc/<pid>/task/<tid>/comm show
// the name, so that a profile or bench/soak can say which of arbiterd's
// threads spent the CPU.
//
// Thread-safe: NameThisThread names only the calling thread.
#pragma once

#include <thread>
#include <utility>

#include <pthread.h>

namespace arbiter::app {

// REQUIRES: `name` is at most 15 characters (the kernel's limit); a longer
// name is refused by the kernel and the thread keeps its old one.
inline void NameThisThread(const char* name) { pthread_setname_np(pthread_self(), name); }

// Starts a thread that names itself `name`, then runs `body`.
// REQUIRES: `name` outlives the thread (a string literal) and is at most 15
// characters.
template <typename Body>
std::thread StartNamedThread(const char* name, Body body) {
  return std::thread([name, body = std::move(body)]() mutable {
    NameThisThread(name);
    body();
  });
}

}  // namespace arbiter::app
