// The ledger archive file: the entries of closed months that retention took
// out of PostgreSQL (arbiterd archive-ledger), one text file per month,
// that a verifier (arbctl ledger verify --archive DIR) chains from genesis
// into the entries the database still holds.
//
// The file is UTF-8 text, one entry per line, in seq order, after one
// header line (kArchiveHeader):
//
//   seq TAB at_unix_micros TAB actor TAB action TAB subject TAB payload
//       TAB prev_hash TAB hash LF
//
// In the text fields a backslash is written "\\", a tab "\t", a line feed
// "\n" and a carriage return "\r"; nothing else is escaped. The file holds
// no digest of its own: the chain is its integrity (each entry's hash
// covers the one before, and the first entry left in the database names the
// last archived hash as its prev_hash), and signed checkpoints may fall in
// it.
//
// Thread-safe (pure functions); no I/O.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "ledger/chain.h"

namespace arbiter::ledger {

// The first line of every archive file (without its line feed).
inline constexpr char kArchiveHeader[] =
    "# arbiter ledger archive v1: seq at_unix_micros actor action subject payload prev_hash hash";

// One entry as an archive line, without the line feed; ParseArchiveLine
// reads it back. `at` is written in whole microseconds (absl::ToUnixMicros,
// as the chain's hash covers it). Nothing is checked: a hash that is not 64
// lower-case hex characters is written as it is, and refused when read.
std::string FormatArchiveLine(const Entry& entry);

// FormatArchiveLine's inverse. INVALID_ARGUMENT, its message starting with
// the column ("payload: bad escape \q"), for a line without exactly eight
// tab-separated fields, a seq or time that is not a decimal int64 as
// FormatArchiveLine writes it (no sign but '-', no leading zero), a seq that
// is not positive, a bad escape or an unescaped line feed or carriage return
// in a text field, or a hash that is not 64 lower-case hex characters.
// `line` has no line feed (a trailing carriage return is an error too).
absl::StatusOr<Entry> ParseArchiveLine(absl::string_view line);

}  // namespace arbiter::ledger
