// The one CSV reader of the tools that read traces and lists (openb-replay's
// node lists, arrivals and demand profiles): RFC 4180, so that a file is
// read as written or refused, never misread.
//
// - Line ends: CRLF (RFC 4180's) and LF, mixed freely; a CR alone too.
// - A UTF-8 byte order mark before the header is skipped.
// - Quoted fields may hold commas, line ends and doubled quotes ("").
// - Lines with no characters at all are skipped.
// - The header names the columns, each once and none empty; every row has
//   as many fields as the header.
// - Columns the caller requires must be in the header: a missing one is an
//   error naming it (a header read with a stray CR as "gpu_spec\r" once
//   made a constrained trace replay as unconstrained, without a word).
//
// Debian's libcsv (3.0.3) was considered: its last upstream release is from
// 2013, and a reader this size is simpler to keep and test here.
//
// Thread-compatible; no state.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace arbiter::bench {

// One row: column name -> field.
using CsvRow = std::map<std::string, std::string>;

struct CsvTable {
  std::vector<std::string> header;
  std::vector<CsvRow> rows;
};

// Parses `text`. INVALID_ARGUMENT naming the line for an unterminated
// quote, text after a closing quote, a row of the wrong length, an empty or
// repeated column name; naming the column for a missing required one.
absl::StatusOr<CsvTable> ParseCsv(absl::string_view text, const std::vector<std::string>& required);

// Reads and parses the file at `path`; errors start with the path.
// NOT_FOUND when it cannot be read.
absl::StatusOr<CsvTable> ReadCsvFile(const std::string& path,
                                     const std::vector<std::string>& required);

}  // namespace arbiter::bench
