#include "store/postgres/pg_errors.h"

#include <cstring>
#include <exception>
#include <string>

#include "absl/strings/str_cat.h"

namespace arbiter::store {

absl::Status StatusFromCurrentException(absl::string_view operation) {
  try {
    throw;
  } catch (const pqxx::unique_violation& e) {
    return absl::AlreadyExistsError(absl::StrCat(operation, ": ", e.what()));
  } catch (const pqxx::foreign_key_violation& e) {
    return absl::FailedPreconditionError(absl::StrCat(operation, ": ", e.what()));
  } catch (const pqxx::serialization_failure& e) {
    return absl::AbortedError(absl::StrCat(operation, ": ", e.what()));
  } catch (const pqxx::deadlock_detected& e) {
    return absl::AbortedError(absl::StrCat(operation, ": ", e.what()));
  } catch (const pqxx::broken_connection& e) {
    return absl::UnavailableError(absl::StrCat(operation, ": connection lost: ", e.what()));
  } catch (const pqxx::in_doubt_error& e) {
    return absl::UnavailableError(absl::StrCat(operation, ": commit outcome unknown: ", e.what()));
  } catch (const pqxx::statement_completion_unknown& e) {
    return absl::UnavailableError(absl::StrCat(operation, ": outcome unknown: ", e.what()));
  } catch (const pqxx::sql_error& e) {
    // 57P01..57P03: the server is shutting down or restarting.
    const std::string state = e.sqlstate();
    // AR001: arbiter_fence() refused a deposed leader's write (migration
    // 0021).
    if (state == "AR001") {
      return absl::FailedPreconditionError(absl::StrCat(operation, ": ", e.what()));
    }
    if (state.rfind("57P", 0) == 0 || state.rfind("08", 0) == 0) {
      return absl::UnavailableError(absl::StrCat(operation, ": [", state, "] ", e.what()));
    }
    return absl::InternalError(absl::StrCat(operation, ": [", state, "] ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(operation, ": ", e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat(operation, ": unknown exception"));
  }
}

absl::Status RefusalStatus(const pqxx::check_violation& e) {
  std::string message = e.what();
  if (!message.empty() && message.back() == '\n') message.pop_back();
  return absl::FailedPreconditionError(message);
}

bool SyncReplicationWatch::operator()(const char message[]) noexcept {
  if (std::strstr(message, "wait for synchronous replication") != nullptr) unconfirmed_ = true;
  return true;
}

absl::Status SyncReplicationWatch::UnconfirmedError(absl::string_view operation) const {
  return absl::UnavailableError(absl::StrCat(
      operation,
      ": committed on this PostgreSQL but not confirmed by its synchronous standby (the wait "
      "was cancelled)"));
}

}  // namespace arbiter::store
