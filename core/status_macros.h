// Status propagation and invariant checks for every layer.
//
// abseil 20220623 has neither `ABSL_RETURN_IF_ERROR` / `ABSL_ASSIGN_OR_RETURN`
// nor `absl/log` with `CHECK`; these look-alikes keep the semantics of the
// newer abseil macros so that moving to it is a rename.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define ARBITER_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::absl::Status arbiter_status_ = (expr);           \
    if (!arbiter_status_.ok()) return arbiter_status_; \
  } while (false)

#define ARBITER_INTERNAL_CONCAT_IMPL(a, b) a##b
#define ARBITER_INTERNAL_CONCAT(a, b) ARBITER_INTERNAL_CONCAT_IMPL(a, b)

// `ARBITER_ASSIGN_OR_RETURN(lhs, expr)`: evaluates `expr` (an absl::StatusOr),
// returns its status if not OK, otherwise assigns the value to `lhs`, which
// may be a declaration (`auto x`).
#define ARBITER_ASSIGN_OR_RETURN(lhs, expr) \
  ARBITER_INTERNAL_ASSIGN_OR_RETURN(ARBITER_INTERNAL_CONCAT(arbiter_statusor_, __LINE__), lhs, expr)
#define ARBITER_INTERNAL_ASSIGN_OR_RETURN(tmp, lhs, expr) \
  auto tmp = (expr);                                      \
  if (!tmp.ok()) return std::move(tmp).status();          \
  lhs = std::move(tmp).value()

// Crashes with a message when a programmer invariant is broken. Never used for
// input errors, which are returned as absl::Status.
#define ARBITER_CHECK(cond)                                                                 \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "%s:%d: ARBITER_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                         \
    }                                                                                       \
  } while (false)
