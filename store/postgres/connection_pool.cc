#include "store/postgres/connection_pool.h"

#include "store/postgres/pg_errors.h"

namespace arbiter::store {

ConnectionPool::ConnectionPool(std::string dsn, int size,
                               std::function<void(pqxx::connection&)> prepare)
    : dsn_(std::move(dsn)), prepare_(std::move(prepare)), available_(size) {}

ConnectionPool::~ConnectionPool() = default;

ConnectionPool::Lease::~Lease() {
  if (pool_ != nullptr) pool_->Return(std::move(conn_));
}

absl::StatusOr<ConnectionPool::Lease> ConnectionPool::Acquire() {
  std::unique_ptr<pqxx::connection> conn;
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* available) { return *available > 0; }, &available_));
    --available_;
    if (!idle_.empty()) {
      conn = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (conn != nullptr && conn->is_open()) return Lease(this, std::move(conn));
  bool broken = false;
  absl::Status status = Guarded("connect", &broken, [&]() -> absl::Status {
    conn = std::make_unique<pqxx::connection>(dsn_);
    prepare_(*conn);
    return absl::OkStatus();
  });
  if (!status.ok()) {
    Return(nullptr);
    if (status.code() == absl::StatusCode::kInternal) {
      return absl::UnavailableError(status.message());
    }
    return status;
  }
  return Lease(this, std::move(conn));
}

void ConnectionPool::Return(std::unique_ptr<pqxx::connection> conn) {
  absl::MutexLock lock(&mu_);
  if (conn != nullptr) idle_.push_back(std::move(conn));
  ++available_;
}

}  // namespace arbiter::store
