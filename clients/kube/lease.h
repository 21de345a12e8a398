// Leader election among arbiter-kube replicas through a coordination.k8s.io/v1
// Lease, as Kubernetes' own controllers do: the holder renews the Lease's
// renewTime; another replica takes it over once it has seen no change of the
// Lease for leaseDurationSeconds (measured on its own clock, so that clock
// skew between replicas does not matter). Writes carry the resourceVersion
// read, so two replicas never both win a takeover (409 Conflict).
//
// Thread-compatible.
#pragma once

#include <string>

#include "absl/time/time.h"

#include "clients/kube/kube_api.h"

namespace arbiter::kube {

class LeaseElector {
 public:
  LeaseElector(const KubeApi& api, std::string ns, std::string name, std::string identity,
               absl::Duration duration = absl::Seconds(15));

  // One round: creates, renews or takes over the Lease. Returns whether this
  // replica holds it now. A failed call returns false (the leader stops
  // acting before its lease could pass to another: callers renew at a third
  // of `duration`).
  bool Try(absl::Time now);

  // The holder as last read ("" before any read).
  const std::string& holder() const { return holder_; }

 private:
  std::string Path() const;

  const KubeApi& api_;
  const std::string ns_, name_, identity_;
  const absl::Duration duration_;
  std::string holder_;
  std::string seen_version_;  // The Lease's resourceVersion when last read.
  absl::Time seen_at_ = absl::InfinitePast();
};

}  // namespace arbiter::kube
