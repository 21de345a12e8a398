// Informer: keeps a picture of one Kubernetes collection by the API's
// list-then-watch protocol. It lists (in pages), hands the whole set to
// `reset`, then watches from the list's resourceVersion and hands each
// event to `event`, resuming from the last resourceVersion seen (events and
// bookmarks) when a watch ends. When the API server says the version is too
// old (410 Gone: an ERROR event with code 410, or an HTTP 410), it lists
// again: `reset` then receives the whole set, so nothing missed is lost.
//
// Thread-compatible: Run is called on one thread; the callbacks run on it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include <nlohmann/json.hpp>

#include "clients/kube/kube_api.h"

namespace arbiter::kube {

struct InformerCallbacks {
  // The whole collection, after each (re)list.
  std::function<void(const std::vector<nlohmann::json>& items)> reset;
  // "ADDED", "MODIFIED" or "DELETED", and the object.
  std::function<void(const std::string& type, const nlohmann::json& object)> event;
  // A failure (logged by the caller); the informer retries after `backoff`.
  std::function<void(const std::string& message)> error;
};

class Informer {
 public:
  // `collection`: e.g. "/api/v1/pods" (no query).
  Informer(const KubeApi& api, std::string collection, InformerCallbacks callbacks,
           absl::Duration backoff = absl::Seconds(1));

  // Lists and watches until `stop` is set.
  void Run(const std::atomic<bool>& stop);

  // How many lists were made (the first, and one per 410 or failed list).
  int64_t lists() const { return lists_.load(); }

 private:
  // Lists every page; false on failure.
  bool List();
  // Watches from resource_version_ until the stream ends. Returns false
  // when the version expired (list again).
  bool WatchOnce(const std::atomic<bool>& stop);

  const KubeApi& api_;
  const std::string collection_;
  const InformerCallbacks callbacks_;
  const absl::Duration backoff_;
  std::string resource_version_;
  std::atomic<int64_t> lists_{0};
};

}  // namespace arbiter::kube
