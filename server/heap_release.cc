#include "server/heap_release.h"

#include <gperftools/malloc_extension.h>
#include <spdlog/spdlog.h>

#include "app/thread_name.h"

namespace arbiter::server {

int64_t HeapFreeBytes() {
  size_t value = 0;
  if (!MallocExtension::instance()->GetNumericProperty("tcmalloc.pageheap_free_bytes", &value)) {
    return 0;
  }
  return static_cast<int64_t>(value);
}

HeapReleaser::HeapReleaser(absl::Duration every, int64_t keep_free_bytes)
    : every_(every),
      keep_free_bytes_(keep_free_bytes),
      thread_(app::StartNamedThread("arb-heap-free", [this] { Run(); })) {}

HeapReleaser::~HeapReleaser() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

int64_t HeapReleaser::ReleaseIfOver() {
  const int64_t before = HeapFreeBytes();
  if (before <= keep_free_bytes_) return 0;
  MallocExtension::instance()->ReleaseFreeMemory();
  const int64_t released = before - HeapFreeBytes();
  spdlog::debug("heap: returned {} MiB of free pages to the system", released >> 20);
  return released;
}

void HeapReleaser::Run() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), every_)) return;
    }
    ReleaseIfOver();
  }
}

}  // namespace arbiter::server
