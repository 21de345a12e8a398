// What every use case of the application layer works with; owned by
// app::Application, which outlives the use cases.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "app/access.h"
#include "app/arbiter.h"
#include "app/ended_keys.h"
#include "app/node_directory.h"
#include "app/telemetry_maintenance.h"
#include "app/watch_hub.h"
#include "app/worker_pool.h"
#include "core/clock.h"
#include "store/store.h"

namespace arbiter::app {

struct Context {
  Arbiter* arbiter = nullptr;  // Commands: decided on its thread, answered after COMMIT.
  store::Store* store = nullptr;
  WorkerPool* reads = nullptr;           // Database reads run here, never on the caller's thread.
  EndedKeyLookup* ended_keys = nullptr;  // Asked before a new capacity request is decided.
  NodeDirectory* nodes = nullptr;
  WatchHub* hub = nullptr;
  const Access* access = nullptr;
  Clock* clock = nullptr;
  TelemetryMaintenance* telemetry = nullptr;
};

// [from, to) of a report or a period, as the edge converted it.
struct Span {
  absl::Time from;
  absl::Time to;
};

// How a use case answers: called exactly once, on the arbiter's responder
// thread (commands), a read worker (reads) or the caller's thread (a refusal
// found before any work was queued). It must not block.
template <typename T>
using Reply = std::function<void(absl::StatusOr<T>)>;

// Runs `read` on `ctx.reads` and replies with what it returns;
// RESOURCE_EXHAUSTED with `busy` when too many reads are waiting.
template <typename T>
void RunRead(const Context& ctx, std::function<absl::StatusOr<T>()> read, Reply<T> reply,
             const char* busy = "too many reads in flight; retry") {
  auto task = [read = std::move(read), reply]() { reply(read()); };
  if (!ctx.reads->Submit(std::move(task))) reply(absl::ResourceExhaustedError(busy));
}

// A command's result when it has none beyond success.
struct Done {
  bool done = true;  // A member, so that copies are never of uninitialized storage.
};

// A command: decides against the engine's state at `now`, appending durable
// changes; it must leave `state` untouched when it fails.
template <typename T>
using DecideFn =
    std::function<absl::StatusOr<T>(core::State& state, absl::Time now, core::ChangeSet& changes)>;

// Submits `decide` to the engine on behalf of `actor` (the ledger's actor)
// and replies with what it returned once its batch committed, or with the
// commit's failure (UNAVAILABLE).
template <typename T>
void RunCommand(const Context& ctx, const std::string& actor, DecideFn<T> decide, Reply<T> reply) {
  auto decided = std::make_shared<T>();
  ctx.arbiter->Submit(
      [decide = std::move(decide), decided](core::State& state, absl::Time now,
                                            core::ChangeSet& changes) -> absl::Status {
        absl::StatusOr<T> out = decide(state, now, changes);
        if (!out.ok()) return out.status();
        *decided = *std::move(out);
        return absl::OkStatus();
      },
      [decided, reply = std::move(reply)](const absl::Status& status) {
        if (!status.ok()) return reply(status);
        reply(std::move(*decided));
      },
      actor);
}

}  // namespace arbiter::app
