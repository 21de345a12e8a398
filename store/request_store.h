// RequestReads: capacity requests of any state, served straight from the
// store by any replica.
//
// Status codes, for every method: UNAVAILABLE when the store cannot be
// reached (retry the call); ABORTED on a serialization failure or deadlock
// (retry the whole operation); INTERNAL for anything else. Further codes are
// stated per method.
//
// Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "core/model.h"

namespace arbiter::store {

struct RequestFilter {
  std::string team;                                             // Empty: all teams.
  core::RequestState state = core::RequestState::kUnspecified;  // Unspecified: all.
  int64_t before_id = 0;  // Only ids below this (paging); 0: from the newest.
  int32_t limit = 100;
};

// One page of requests and the revision it reflects: the sequence number of
// the ledger's head in the same snapshot, so the page holds every change up
// to `revision` and none after it. A watch started from `revision`
// (WatchAllocations) misses nothing and repeats nothing of the page.
struct RequestPage {
  std::vector<core::CapacityRequest> requests;
  int64_t revision = 0;
};

// An idempotency key of an ended request, as FindEndedKeys finds it.
struct EndedKey {
  std::string key;
  int64_t request_id = 0;
  uint64_t body_hash = 0;  // core::FingerprintRequestSpec of the request's spec.
};

class RequestReads {
 public:
  virtual ~RequestReads() = default;

  // Request `id` with the placements it was given. NOT_FOUND if there is no
  // request `id`.
  [[nodiscard]] virtual absl::StatusOr<core::CapacityRequest> GetRequest(int64_t id) = 0;
  // Requests matching `filter`, newest (highest id) first, at most
  // filter.limit, with their placements.
  [[nodiscard]] virtual absl::StatusOr<std::vector<core::CapacityRequest>> ListRequests(
      const RequestFilter& filter) = 0;
  // ListRequests, with the revision the page reflects (one snapshot).
  [[nodiscard]] virtual absl::StatusOr<RequestPage> ListRequestPage(
      const RequestFilter& filter) = 0;
  // Of `keys`, those that a request used which ended (a final state) at or
  // after `since` (its `updated_at`), each with the latest such request; a
  // key no such request used is absent. In no particular order. Live
  // requests are not read: the arbiter knows their keys. The arbiter asks
  // this before deciding a new request, so that its memory need not hold
  // the keys of a whole idempotency window (app/ended_keys.h).
  [[nodiscard]] virtual absl::StatusOr<std::vector<EndedKey>> FindEndedKeys(
      const std::vector<std::string>& keys, absl::Time since) = 0;
};

}  // namespace arbiter::store
