// The store: Arbiter's system of record, expressed in core types. One
// interface per aggregate (state, catalog, governance, requests, ledger,
// access log, telemetry, chargeback, metrics); `Store` is all of them. The
// implementations are PostgreSQL (store/postgres/, where all SQL lives) and
// the in-memory store (store/memory/), which pass one contract suite
// (tests/store/store_contract.h).
//
// Status codes, for every method: UNAVAILABLE when the database cannot be
// reached (retry the call); ABORTED on a serialization failure or deadlock
// (retry the whole operation); INTERNAL for anything else. Further codes are
// stated per method, in the headers below.
//
// Implementations are thread-safe.
#pragma once

#include "store/access_store.h"
#include "store/catalog_store.h"
#include "store/chargeback_store.h"
#include "store/governance_store.h"
#include "store/ledger_store.h"
#include "store/metrics_store.h"
#include "store/request_store.h"
#include "store/state_store.h"
#include "store/telemetry_store.h"

namespace arbiter::store {

class Store : public StateStore,
              public CatalogReads,
              public GovernanceReads,
              public RequestReads,
              public LedgerReads,
              public AccessLog,
              public TelemetryStore,
              public ChargebackStore,
              public MetricsReads {
 public:
  ~Store() override = default;
};

}  // namespace arbiter::store
