// Authorization: who is calling, and whether they may call a method on what
// it touches. One declarative table (authz.cc) lists every RPC with the roles
// that may call it and how a role binding's scope must cover the call; a
// method not in the table is refused. Platform admins (by binding at org
// scope, or by --admin) may call everything.
//
// Thread-safe.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

#include "core/model.h"
#include "core/state.h"

namespace arbiter::app {

// Who is calling, as the edge that took the call (server/caller.h) found it.
struct Caller {
  // As the verified client certificate names it; empty without one.
  std::string principal;
  // The certificate's OU values; bindings to "group:NAME" apply.
  std::vector<std::string> groups;
  // A plaintext loopback server (--insecure-loopback, development only):
  // every caller may do everything.
  bool insecure = false;

  // The actor the ledger records for the caller's commands: the principal,
  // or kUnidentifiedActor without one (a plaintext development server).
  std::string actor() const;
};
inline constexpr char kUnidentifiedActor[] = "unidentified";

// arbiterd's own Kubernetes admission webhook, as the caller of the claims
// it makes for pods. The webhook authorizes each pod itself (the pod's
// namespace must be its allocation's team's; Kubernetes authorized the pod's
// creator), so the caller passes every check; the ledger records this name.
inline constexpr char kWebhookActor[] = "arbiterd:kubernetes-webhook";
inline Caller WebhookCaller() { return Caller{kWebhookActor, {}, /*insecure=*/true}; }

// A Resource::team that any team matches: "has a team role somewhere".
inline constexpr char kAnyTeam[] = "*";

// What a call touches, for scope checks. Empty fields: not applicable.
struct Resource {
  std::string team;
  std::string pool;
};

class Authorizer {
 public:
  // `admins`: principals that are platform admins by configuration.
  explicit Authorizer(std::vector<std::string> admins);

  // Takes the bindings and the team tree from `state` (start-up, reload).
  void Reset(const core::State& state) ABSL_LOCKS_EXCLUDED(mu_);
  // Follows a committed change (role bindings, teams); ignores the rest.
  void Apply(const core::Change& change) ABSL_LOCKS_EXCLUDED(mu_);

  // OK; UNAUTHENTICATED when the caller has no verified identity;
  // PERMISSION_DENIED when no binding of the caller covers `method` on
  // `resource`, or `method` is not in the table. `method` is
  // "Service.Method", e.g. "AllocationService.RequestCapacity".
  [[nodiscard]] absl::Status Check(const Caller& caller, absl::string_view method,
                                   const Resource& resource) const ABSL_LOCKS_EXCLUDED(mu_);

  // OK when the caller is an enforcer: it holds the agent role at some
  // scope, or is a platform admin (the server's --admin, or by binding), or
  // the server is a plaintext development one. What only enforcers report,
  // a workload's run (docs/enforcement.md), is checked with it:
  // PERMISSION_DENIED naming `field` otherwise, UNAUTHENTICATED without an
  // identity.
  [[nodiscard]] absl::Status CheckEnforcer(const Caller& caller, absl::string_view field) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Every method in the table.
  static std::vector<std::string> Methods();

  // The bindings whose subject is the caller's principal or one of its
  // groups, in binding order; whether the caller is a platform admin (by
  // configuration or by an org-wide binding).
  std::vector<core::RoleBinding> BindingsOf(const Caller& caller) const ABSL_LOCKS_EXCLUDED(mu_);
  bool IsPlatformAdmin(const Caller& caller) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Whether `team` is `scope` or under it.
  bool Within(const std::string& team, const std::string& scope) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const std::set<std::string> admins_;
  mutable absl::Mutex mu_;
  std::set<core::RoleBinding> bindings_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> parents_ ABSL_GUARDED_BY(mu_);
};

}  // namespace arbiter::app
