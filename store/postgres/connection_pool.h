// A fixed-size pool of PostgreSQL connections, opened lazily and reopened
// after a failure. Size it for the machine: on 2 cores, 2-8 connections per
// core are enough (more only adds contention).
//
// Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include <pqxx/connection>

namespace arbiter::store {

class ConnectionPool {
 public:
  // `prepare` runs on each newly opened connection (to prepare statements).
  ConnectionPool(std::string dsn, int size, std::function<void(pqxx::connection&)> prepare);
  ~ConnectionPool();

  // A borrowed connection; returned to the pool on destruction. Call
  // `Discard()` after a broken-connection error so that it is reopened.
  class Lease {
   public:
    Lease(ConnectionPool* pool, std::unique_ptr<pqxx::connection> conn)
        : pool_(pool), conn_(std::move(conn)) {}
    Lease(Lease&& other) noexcept
        : pool_(std::exchange(other.pool_, nullptr)), conn_(std::move(other.conn_)) {}
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    pqxx::connection& operator*() { return *conn_; }
    pqxx::connection* operator->() { return conn_.get(); }
    void Discard() { conn_.reset(); }

   private:
    ConnectionPool* pool_;
    std::unique_ptr<pqxx::connection> conn_;
  };

  // Borrows a connection, waiting while all are in use. UNAVAILABLE if a new
  // connection cannot be opened.
  absl::StatusOr<Lease> Acquire();

 private:
  void Return(std::unique_ptr<pqxx::connection> conn);

  const std::string dsn_;
  const std::function<void(pqxx::connection&)> prepare_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<pqxx::connection>> idle_ ABSL_GUARDED_BY(mu_);
  int available_ ABSL_GUARDED_BY(mu_);  // Idle plus not yet opened.
};

}  // namespace arbiter::store
