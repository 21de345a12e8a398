#include "clients/kube/lease.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include <nlohmann/json.hpp>

namespace arbiter::kube {
namespace {

using json = nlohmann::json;

// A MicroTime: RFC 3339 with microseconds, UTC.
std::string MicroTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t, absl::UTCTimeZone());
}

}  // namespace

LeaseElector::LeaseElector(const KubeApi& api, std::string ns, std::string name,
                           std::string identity, absl::Duration duration)
    : api_(api),
      ns_(std::move(ns)),
      name_(std::move(name)),
      identity_(std::move(identity)),
      duration_(duration) {}

std::string LeaseElector::Path() const {
  return absl::StrCat("/apis/coordination.k8s.io/v1/namespaces/", ns_, "/leases");
}

bool LeaseElector::Try(absl::Time now) {
  absl::StatusOr<KubeReply> got = api_.Call("GET", absl::StrCat(Path(), "/", name_));
  if (!got.ok()) return false;
  json spec = {{"holderIdentity", identity_},
               {"leaseDurationSeconds", absl::ToInt64Seconds(duration_)},
               {"renewTime", MicroTime(now)}};
  if (got->code == 404) {
    spec["acquireTime"] = MicroTime(now);
    spec["leaseTransitions"] = 0;
    const json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                        {"kind", "Lease"},
                        {"metadata", {{"name", name_}, {"namespace", ns_}}},
                        {"spec", spec}};
    absl::StatusOr<KubeReply> made = api_.Call("POST", Path(), lease.dump());
    const bool won = made.ok() && made->code == 201;
    if (won) holder_ = identity_;
    return won;
  }
  if (got->code != 200) return false;
  json lease = json::parse(got->body, nullptr, /*allow_exceptions=*/false);
  if (!lease.is_object() || !lease.contains("metadata") || !lease["metadata"].is_object()) {
    return false;
  }
  const json current =
      lease.contains("spec") && lease["spec"].is_object() ? lease["spec"] : json::object();
  holder_ = current.value("holderIdentity", "");
  const std::string version = lease["metadata"].value("resourceVersion", "");
  if (version != seen_version_) {
    seen_version_ = version;
    seen_at_ = now;
  }
  const int64_t transitions = current.value("leaseTransitions", 0);
  if (holder_ != identity_) {
    const absl::Duration theirs = absl::Seconds(current.value("leaseDurationSeconds", 15));
    if (!holder_.empty() && now - seen_at_ < theirs) return false;  // Still theirs.
    spec["acquireTime"] = MicroTime(now);
    spec["leaseTransitions"] = transitions + 1;
  } else {
    spec["acquireTime"] = current.value("acquireTime", MicroTime(now));
    spec["leaseTransitions"] = transitions;
  }
  lease["spec"] = spec;
  absl::StatusOr<KubeReply> put = api_.Call("PUT", absl::StrCat(Path(), "/", name_), lease.dump());
  if (!put.ok() || put->code != 200) return false;  // 409: another replica wrote first.
  json written = json::parse(put->body, nullptr, /*allow_exceptions=*/false);
  if (written.is_object() && written.contains("metadata") && written["metadata"].is_object()) {
    seen_version_ = written["metadata"].value("resourceVersion", "");
    seen_at_ = now;
  }
  holder_ = identity_;
  return true;
}

}  // namespace arbiter::kube
