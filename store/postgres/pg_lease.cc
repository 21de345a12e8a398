#include "store/postgres/pg_lease.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include <pqxx/pqxx>

#include "store/postgres/pg_errors.h"

namespace arbiter::store {
namespace {

// The advisory lock's two keys: "ARBI" and the lease's number.
constexpr int32_t kLockClass = 0x41524249;
constexpr int32_t kLockObject = 1;

const absl::Status& StatusOf(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& result) {
  return result.status();
}

std::string Micros(absl::Duration d) { return std::to_string(absl::ToInt64Microseconds(d)); }

}  // namespace

std::string ApplicationName(const std::string& holder) { return absl::StrCat("arbiterd/", holder); }

std::string AppendDsnOptions(const std::string& dsn, const std::string& options) {
  if (options.empty()) return dsn;
  if (absl::StartsWith(dsn, "postgresql://") || absl::StartsWith(dsn, "postgres://")) {
    const std::string query = absl::StrReplaceAll(options, {{" ", "&"}});
    return absl::StrCat(dsn, absl::StrContains(dsn, "?") ? "&" : "?", query);
  }
  return dsn.empty() ? options : absl::StrCat(dsn, " ", options);
}

PgLease::PgLease(LeaseOptions options) : options_(std::move(options)) {}

PgLease::~PgLease() = default;

pqxx::connection& PgLease::Session() {
  if (session_ != nullptr && session_->is_open()) return *session_;
  session_.reset();
  // The client gives up on a silent server within about the ttl, and the
  // server drops this session (freeing the lock) when the client goes
  // silent: keepalives and a user timeout on both ends (TCP only).
  const int64_t ttl_ms = absl::ToInt64Milliseconds(options_.ttl);
  const std::string dsn = AppendDsnOptions(
      options_.dsn,
      absl::StrCat("application_name=", ApplicationName(options_.holder),
                   " connect_timeout=2 keepalives=1 keepalives_idle=1 keepalives_interval=1 "
                   "keepalives_count=2 tcp_user_timeout=",
                   ttl_ms));
  auto session = std::make_unique<pqxx::connection>(dsn);
  pqxx::nontransaction tx(*session);
  tx.exec("SET tcp_keepalives_idle = 1");
  tx.exec("SET tcp_keepalives_interval = 1");
  tx.exec("SET tcp_keepalives_count = 2");
  tx.exec(absl::StrCat("SET tcp_user_timeout = ", ttl_ms));
  tx.exec(absl::StrCat("SET statement_timeout = ", ttl_ms));
  tx.exec(absl::StrCat("SET lock_timeout = ", ttl_ms / 2));
  session_ = std::move(session);
  return *session_;
}

template <typename Fn>
auto PgLease::OnSession(const char* operation, Fn&& fn)
    -> decltype(fn(std::declval<pqxx::connection&>())) {
  bool broken = false;
  auto result = Guarded(operation, &broken, [&] {
    pqxx::connection& session = Session();
    // A renewal or takeover that the synchronous standby did not confirm
    // may be lost in a failover: treated as failed (the session is reset).
    SyncReplicationWatch sync(session);
    auto r = fn(session);
    if (StatusOf(r).ok() && sync.unconfirmed()) {
      return decltype(r)(sync.UnconfirmedError(operation));
    }
    return r;
  });
  const absl::Status status = StatusOf(result);
  if (status.ok() || status.code() == absl::StatusCode::kFailedPrecondition) return result;
  // Whatever went wrong, the lock may have gone with the session: start over
  // from a fresh one (which holds no lock).
  session_.reset();
  return absl::UnavailableError(status.message());
}

absl::StatusOr<int64_t> PgLease::TryAcquire() {
  return OnSession("acquire lease", [this](pqxx::connection& c) -> absl::StatusOr<int64_t> {
    pqxx::nontransaction tx(c);
    const pqxx::row lease =
        tx.exec1("SELECT holder, lease_until < now() FROM leader_lease WHERE id = 1");
    const std::string holder = lease[0].as<std::string>();
    if (lease[1].as<bool>() && !holder.empty() && holder != options_.holder) {
      // The holder stopped renewing. If it is stalled with its sessions
      // open, end them: that frees the lock and aborts its open
      // transactions (which would hold up the epoch's UPDATE).
      tx.exec_params(
          "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
          " WHERE application_name = $1 AND datname = current_database()"
          " AND pid <> pg_backend_pid()",
          ApplicationName(holder));
    }
    const bool locked =
        tx.exec_params1("SELECT pg_try_advisory_lock($1, $2)", kLockClass, kLockObject)[0]
            .as<bool>();
    if (!locked) return int64_t{0};
    // Waits (up to lock_timeout) for writes still in progress under the old
    // epoch; they are then committed, and the new leader loads them.
    const pqxx::row row = tx.exec_params1(
        "UPDATE leader_lease SET epoch = epoch + 1, holder = $1, address = $2,"
        " lease_until = now() + $3::bigint * interval '1 microsecond', acquired_at = now()"
        " WHERE id = 1 RETURNING epoch",
        options_.holder, options_.address, Micros(options_.ttl));
    return row[0].as<int64_t>();
  });
}

absl::Status PgLease::Renew(int64_t epoch) {
  return OnSession("renew lease", [&](pqxx::connection& c) -> absl::Status {
    pqxx::nontransaction tx(c);
    // The lock must still be ours: a new session (after a reconnect) does
    // not hold it, even when the epoch is still ours.
    const pqxx::result held = tx.exec_params(
        "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND classid = $1::int::oid AND objid = $2::int::oid AND objsubid = 2"
        " AND pid = pg_backend_pid()",
        kLockClass, kLockObject);
    if (held.empty()) {
      return absl::FailedPreconditionError("renew lease: this session no longer holds the lock");
    }
    const pqxx::result renewed = tx.exec_params(
        "UPDATE leader_lease SET lease_until = now() + $2::bigint * interval '1 microsecond'"
        " WHERE id = 1 AND epoch = $1",
        epoch, Micros(options_.ttl));
    if (renewed.affected_rows() != 1) {
      return absl::FailedPreconditionError(
          absl::StrCat("renew lease: epoch ", epoch, " is no longer current"));
    }
    return absl::OkStatus();
  });
}

void PgLease::Release(int64_t epoch) {
  absl::Status status = OnSession("release lease", [&](pqxx::connection& c) -> absl::Status {
    pqxx::nontransaction tx(c);
    // No holder: followers take the freed lock without ending any session
    // (this replica's last commits may still be finishing).
    tx.exec_params(
        "UPDATE leader_lease SET lease_until = now(), holder = '' WHERE id = 1 AND epoch = $1",
        epoch);
    tx.exec_params("SELECT pg_advisory_unlock($1, $2)", kLockClass, kLockObject);
    return absl::OkStatus();
  });
  (void)status;  // Best effort: the session closes with this replica anyway.
  session_.reset();
}

absl::StatusOr<LeaseInfo> PgLease::Read() {
  return OnSession("read lease", [](pqxx::connection& c) -> absl::StatusOr<LeaseInfo> {
    pqxx::nontransaction tx(c);
    const pqxx::row row = tx.exec1(
        "SELECT epoch, holder, address, (extract(epoch FROM lease_until) * 1000000)::bigint,"
        " lease_until < now() FROM leader_lease WHERE id = 1");
    LeaseInfo info;
    info.epoch = row[0].as<int64_t>();
    info.holder = row[1].as<std::string>();
    info.address = row[2].as<std::string>();
    info.lease_until = absl::FromUnixMicros(row[3].as<int64_t>());
    info.expired = row[4].as<bool>();
    return info;
  });
}

}  // namespace arbiter::store
