// The adversarial suite over every RPC of arbiter.v1: for each method, a
// valid base request (the one hand-written part, in api_suite.cc), and every
// case tests/server/api_cases.h generates from it. Each case is sent as
// bytes to a real arbiterd (in process, mutual TLS on loopback, as a
// platform admin) and must be:
//   - refused with a status of its kind (INVALID_ARGUMENT, NOT_FOUND,
//     FAILED_PRECONDITION, OUT_OF_RANGE, ALREADY_EXISTS; INTERNAL for a
//     body that does not parse) whose message names the field, with nothing
//     changed: what the store holds (every row of every table on
//     PostgreSQL) and the engine's in-memory state are equal before and
//     after; or
//   - accepted, only where the value is valid for the field: a read's
//     filter, a bool, or a (method, field, mutation) in the suite's short
//     list of valid values, each with its reason.
// Then the base itself must be accepted, so that each case differs from an
// accepted request in its one field. The callers that must be refused are
// authz_pgtest's matrix (every RPC as every role, over mutual TLS).
#pragma once

#include <functional>
#include <string>

#include "app/application.h"
#include "core/clock.h"
#include "server/server.h"
#include "store/store.h"

namespace arbiter::server {

// A digest of what `store` holds, through its read interface: the
// catalog, inventory, organisation, every request, governance, SLOs, idle
// policies, coexistence rules, the ledger's head and the samples.
std::string StoreReadsDigest(store::Store& store, const app::NodeDirectory& nodes);

// Makes the suite's certificates (deploy/local/make-certs: a CA, the
// server, the platform admin "admin") in a fresh directory; returns it.
std::string MakeSuiteCertificates();

// The server options the suite runs against: mutual TLS with the
// certificates in `certs`, "admin" a platform admin, bookmarks every 20 ms,
// no telemetry timers. The caller sets the store (`dsn` or `store`).
ServerOptions SuiteServerOptions(const std::string& certs);

struct SuiteTarget {
  int port = 0;
  // The directory MakeSuiteCertificates made.
  std::string certs;
  app::Application* app = nullptr;
  Clock* clock = nullptr;
  // A digest of everything the store holds: StoreReadsDigest, or on
  // PostgreSQL every row of every table.
  std::function<std::string()> store_digest;
};

// Runs the suite against `target`, a server on a store that holds nothing
// yet. Reports failures through gtest; prints the cases per RPC.
void RunApiSuite(const SuiteTarget& target);

}  // namespace arbiter::server
