// Conversions between PostgreSQL rows and core types, and the text forms of
// array parameters. Internal to store/postgres.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include <pqxx/pqxx>

#include "core/model.h"
#include "ledger/chain.h"

namespace arbiter::store::rows {

// Reads a row selected with ARBITER_REQUEST_COLUMNS (placements left empty).
absl::StatusOr<core::CapacityRequest> RequestFromRow(const pqxx::row& row);
// Reads a row selected with ARBITER_PLACEMENT_COLUMNS; `*request_id` receives
// the owning request.
core::Placement PlacementFromRow(const pqxx::row& row, int64_t* request_id);
// A ledger entry from the columns seq, at (unix microseconds), actor,
// action, subject, payload, prev_hash, hash.
ledger::Entry LedgerEntryFromRow(const pqxx::row& row);

// Reads a row's fields in order. Cheaper than row[i] for rows read by the
// million: each pqxx::field made by row[i] copies the result's shared
// handle; a field iterator moves along one. Not thread-safe.
class FieldCursor {
 public:
  explicit FieldCursor(const pqxx::row& row) : it_(row.begin()) {}
  // The next field as T. REQUIRES: a field is left; T as pqxx::field::as.
  template <typename T>
  T Next() {
    T value = it_->as<T>();
    ++it_;
    return value;
  }

 private:
  pqxx::row::const_iterator it_;
};

// A PostgreSQL array literal built one element at a time, e.g. {1,2} or
// {"a","b"}.
class ArrayLiteral {
 public:
  void Add(int64_t v);
  void AddBool(bool v);
  void Add(absl::string_view v);  // Quoted and escaped.
  std::string Done() const { return text_ + "}"; }

 private:
  void Separate();
  std::string text_ = "{";
};

// Rows in COPY's text format (fields separated by tabs, a row per line),
// built a field at a time. Not thread-safe.
class CopyText {
 public:
  void Add(int64_t v);
  // Backslash, tab, newline and carriage return escaped.
  void Add(absl::string_view v);
  // A timestamptz in UTC, to the microsecond.
  // REQUIRES: t in years 1..9999.
  void Add(absl::Time t);
  void EndRow();
  size_t size() const { return text_.size(); }
  // The rows so far, without the last row's line end (pqxx's write_raw_line
  // adds one), and starts again empty.
  std::string Take();

 private:
  void Separate();
  std::string text_;
  bool row_started_ = false;
};

// PostgreSQL array literals of whole vectors.
std::string IntArrayLiteral(const std::vector<int32_t>& values);
// The elements of an integer[] field.
std::vector<int32_t> IntArray(const pqxx::field& field);
std::vector<int64_t> BigintArray(const pqxx::field& field);
std::string BigintArrayLiteral(const std::vector<int64_t>& values);
std::string TextArrayLiteral(const std::vector<std::string>& values);

int64_t ToMicros(absl::Time t);
// An optional time as microseconds: INT64_MIN for InfinitePast (unset), and
// back.
int64_t ToMicrosOrMin(absl::Time t);
absl::Time FromMicrosOrMin(int64_t micros);

// Held GPUs as "node:gpu,node:gpu", and back (malformed entries fail).
std::string FormatHolds(const std::vector<core::GpuHold>& holds);
absl::StatusOr<std::vector<core::GpuHold>> ParseHolds(const std::string& text);
// Claims as stored in requests.claims: "member:claimed_at_micros:holder",
// comma-separated (holders hold no comma: core::ValidateHolder). Read back
// with renewed_at = claimed_at.
std::string FormatClaims(const std::vector<core::Claim>& claims);
absl::StatusOr<std::vector<core::Claim>> ParseClaims(const std::string& text);

// A pool's lending classes as a text array literal, and back.
std::string ClassesLiteral(const std::vector<core::WorkloadClass>& classes);
// A pool's class rules as a text[] literal of "class=admission", and back.
std::string ClassRulesLiteral(const std::vector<core::PoolClassRule>& rules);
// INTERNAL when a stored window no longer parses.
absl::StatusOr<std::vector<core::PoolClassRule>> ClassRulesFromField(const pqxx::field& field);
// A pool's headroom as a text[] literal of "model=milli".
std::string HeadroomLiteral(const std::vector<core::Headroom>& headroom);
std::vector<core::WorkloadClass> ClassesFromField(const pqxx::field& field);
// Reads a row of sql::kSelectPools.
absl::StatusOr<core::Pool> PoolFromRow(const pqxx::row& row);
// Reads the first six columns of sql::kSelectQuotas / kSelectQuotaUsage.
core::Quota QuotaFromRow(const pqxx::row& row);

}  // namespace arbiter::store::rows
