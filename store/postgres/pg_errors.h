// Where libpqxx exceptions stop: `Guarded` runs a function and maps anything
// it throws to an absl::Status (see store/store.h for the codes). No pqxx
// exception crosses a store interface.
#pragma once

#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include <pqxx/except>

namespace arbiter::store {

// Maps the exception currently being handled. Call only inside a catch block.
absl::Status StatusFromCurrentException(absl::string_view operation);

// Runs `fn` (returning absl::Status or absl::StatusOr<T>) and maps exceptions.
// `*broken` is set when the connection is unusable afterwards.
template <typename Fn>
auto Guarded(absl::string_view operation, bool* broken, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const pqxx::broken_connection&) {
    *broken = true;
    return StatusFromCurrentException(operation);
  } catch (const pqxx::in_doubt_error&) {
    *broken = true;
    return StatusFromCurrentException(operation);
  } catch (...) {
    return StatusFromCurrentException(operation);
  }
}

}  // namespace arbiter::store
