// The ledger entry that records each kind of durable change: its action,
// subject and canonical payload. Internal to store/postgres.
#pragma once

#include <string>

#include "ledger/chain.h"

#include "core/state.h"

namespace arbiter::store {

// Action ("request.admitted", "role.grant", ...), subject ("request/42") and
// payload of `change`; seq, time, actor and hashes are left to the caller.
ledger::Entry LedgerEntryFor(const core::Change& change);

}  // namespace arbiter::store
