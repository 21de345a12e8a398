// Admission: Kubernetes' admission webhook for GPU pods
// (admission.k8s.io/v1 AdmissionReview, JSON). Arbiter decides, Kubernetes
// enforces: a pod that requests GPUs (`nvidia.com/gpu` or a MIG resource
// `nvidia.com/mig-<profile>`) must carry the annotation
//
//     arbiter.dev/allocation: "<request id>"      (and arbiter.dev/member: "<n>"
//                                                   for members after the first)
//
// naming an admitted request of the team whose namespace it runs in (the
// team's name with '_' as '-', e.g. team batch_etl -> namespace batch-etl).
// Pods without one are denied with a message that says how to get one.
// Admitted pods are mutated to their placement with one JSON Patch:
//   - node affinity to the placement's node (kubernetes.io/hostname), ANDed
//     into any node affinity the pod already has;
//   - MIG: the pod's GPU resource renamed to the instance's profile
//     (e.g. nvidia.com/gpu: 1 -> nvidia.com/mig-3g.40gb: 1);
//   - annotations arbiter.dev/node, arbiter.dev/gpu-indices, and for shares
//     of a GPU arbiter.dev/gpu-milli and arbiter.dev/gpu-memory-mib (for MIG,
//     arbiter.dev/mig-profile).
// Pods that request no GPU, and operations other than CREATE, are allowed
// unchanged. The validating webhook (/validate) then claims the member for
// the pod, so that one allocation admits one pod per member (ReviewClaim).
//
// Thread-safe (no state of its own; the lookups must be thread-safe).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "core/model.h"

namespace arbiter::server {

inline constexpr absl::string_view kAllocationAnnotation = "arbiter.dev/allocation";
inline constexpr absl::string_view kMemberAnnotation = "arbiter.dev/member";

struct AdmissionLookups {
  // The request with this id: NOT_FOUND when there is none; another error
  // when it cannot be read now (the pod is then denied; retry).
  std::function<absl::StatusOr<core::CapacityRequest>(int64_t id)> request;
  // The Kubernetes node name of a node id ("" when unknown).
  std::function<std::string(int64_t node_id)> node_name;
  // Claims `member` of allocation `id` for `holder` (docs/enforcement.md):
  // the request as decided after COMMIT, or the decision's error
  // (FAILED_PRECONDITION naming the holder when another holds it; ABORTED
  // when this replica does not lead, so cannot decide).
  std::function<absl::StatusOr<core::CapacityRequest>(int64_t id, int32_t member,
                                                      const std::string& holder)>
      claim;
};

// A pod's workload identity in Arbiter's claims: "pod:<namespace>/<name>".
inline constexpr absl::string_view kPodHolderPrefix = "pod:";
std::string PodHolder(absl::string_view ns, absl::string_view name);

// The namespace a team's pods run in: its name with '_' as '-'.
std::string TeamNamespace(absl::string_view team);

// Answers one AdmissionReview `body` with the AdmissionReview response JSON.
// INVALID_ARGUMENT (naming the field) when `body` is not an
// admission.k8s.io/v1 AdmissionReview request; the caller answers HTTP 400.
// The mutating webhook (/admit). A member that another pod already holds
// is denied, naming that pod.
absl::StatusOr<std::string> ReviewAdmission(absl::string_view body,
                                            const AdmissionLookups& lookups);

// The validating webhook (/validate): the same checks, then the pod claims
// its member (lookups.claim, holder PodHolder) and is allowed once the claim
// is committed. A second pod for a claimed member is denied with the
// message naming the first; a dry run claims nothing. On a replica that
// does not lead, the pod is allowed unclaimed with a warning: arbiter-kube
// claims it when it sees it, and deletes it if another pod holds the member. Validating admission
// is where Kubernetes has named the pod (a generateName pod has no name
// before it). Errors as ReviewAdmission's.
absl::StatusOr<std::string> ReviewClaim(absl::string_view body, const AdmissionLookups& lookups);

}  // namespace arbiter::server
