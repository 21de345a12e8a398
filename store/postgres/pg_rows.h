// Conversions between PostgreSQL rows and core types, and the text forms of
// array parameters. Internal to store/postgres.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include <pqxx/pqxx>

#include "core/model.h"

namespace arbiter::store::rows {

// Reads a row selected with ARBITER_REQUEST_COLUMNS (placements left empty).
absl::StatusOr<core::CapacityRequest> RequestFromRow(const pqxx::row& row);
// Reads a row selected with ARBITER_PLACEMENT_COLUMNS; `*request_id` receives
// the owning request.
core::Placement PlacementFromRow(const pqxx::row& row, int64_t* request_id);

// PostgreSQL array literals, e.g. {1,2} and {"a","b"}.
std::string IntArrayLiteral(const std::vector<int32_t>& values);
std::string BigintArrayLiteral(const std::vector<int64_t>& values);
std::string TextArrayLiteral(const std::vector<std::string>& values);

int64_t ToMicros(absl::Time t);

}  // namespace arbiter::store::rows
