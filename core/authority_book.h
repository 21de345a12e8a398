// AuthorityBook: who may act, and on whose authority: role bindings,
// authority rules (who approves what in a pool) and delegations of approval
// authority, with the change types that record them. A part of core::State,
// which checks that what a binding or rule names exists before it is kept
// here.
//
// Thread-compatible.
#pragma once

#include <set>

#include "core/model.h"

namespace arbiter::core {

// A role binding granted (`revoke` false) or revoked.
struct RoleBindingWrite {
  RoleBinding binding;
  bool revoke = false;
};

// An authority rule declared (`remove` false) or removed.
struct AuthorityRuleWrite {
  AuthorityRule rule;
  bool remove = false;
};

// A delegation granted (`revoke` false) or revoked.
struct DelegationWrite {
  Delegation delegation;
  bool revoke = false;
};

class AuthorityBook {
 public:
  // Adds a binding; false when it is kept already.
  bool AddRoleBinding(RoleBinding binding) {
    return role_bindings_.insert(std::move(binding)).second;
  }
  // Removes a binding; false when there was none.
  bool RemoveRoleBinding(const RoleBinding& binding) { return role_bindings_.erase(binding) > 0; }
  const std::set<RoleBinding>& role_bindings() const { return role_bindings_; }

  // Adds a rule; false when it is kept already.
  bool AddAuthorityRule(AuthorityRule rule) {
    return authority_rules_.insert(std::move(rule)).second;
  }
  bool RemoveAuthorityRule(const AuthorityRule& rule) { return authority_rules_.erase(rule) > 0; }
  const std::set<AuthorityRule>& authority_rules() const { return authority_rules_; }

  // One delegation per (from, to), replaced when granted again.
  void PutDelegation(const Delegation& d) {
    delegations_.erase(d);
    delegations_.insert(d);
  }
  bool RemoveDelegation(const Delegation& d) { return delegations_.erase(d) > 0; }
  const std::set<Delegation>& delegations() const { return delegations_; }

 private:
  std::set<RoleBinding> role_bindings_;
  std::set<AuthorityRule> authority_rules_;
  std::set<Delegation> delegations_;
};

}  // namespace arbiter::core
