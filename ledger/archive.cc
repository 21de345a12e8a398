#include "ledger/archive.h"

#include <charconv>
#include <cstdint>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"

namespace arbiter::ledger {
namespace {

// The columns of an archive line, in order.
constexpr const char* kColumns[] = {"seq",     "at_unix_micros", "actor",     "action",
                                    "subject", "payload",        "prev_hash", "hash"};
constexpr size_t kColumnCount = sizeof(kColumns) / sizeof(kColumns[0]);

void AppendEscaped(std::string& out, absl::string_view text) {
  for (char c : text) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        out += c;
    }
  }
}

absl::Status ColumnError(absl::string_view column, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(column, ": ", problem));
}

// AppendEscaped's inverse. A line feed or carriage return must be escaped
// (a tab cannot occur: it separates the columns).
absl::StatusOr<std::string> Unescape(absl::string_view column, absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') return ColumnError(column, "unescaped line feed");
    if (c == '\r') return ColumnError(column, "unescaped carriage return");
    if (c != '\\') {
      out += c;
      continue;
    }
    if (++i == text.size()) return ColumnError(column, "ends in a backslash");
    switch (text[i]) {
      case '\\':
        out += '\\';
        break;
      case 't':
        out += '\t';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      default:
        return ColumnError(column,
                           absl::StrCat("bad escape \\", absl::CHexEscape(text.substr(i, 1))));
    }
  }
  return out;
}

// A decimal int64 as absl::StrCat writes it: an optional '-', digits, no
// leading zero (so that a parsed line formats back to the same text).
absl::StatusOr<int64_t> ParseDecimal(absl::string_view column, absl::string_view text) {
  const absl::string_view digits = absl::StripPrefix(text, "-");
  const bool leading_zero = digits.size() > 1 && digits[0] == '0';
  const bool negative_zero = digits.size() < text.size() && digits == "0";
  const bool canonical = !digits.empty() && !leading_zero && !negative_zero;
  int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (canonical && error == std::errc::result_out_of_range) {
    return ColumnError(column, absl::StrCat("out of range: '", absl::CHexEscape(text), "'"));
  }
  if (!canonical || error != std::errc() || end != text.data() + text.size()) {
    return ColumnError(column,
                       absl::StrCat("not a decimal integer: '", absl::CHexEscape(text), "'"));
  }
  return value;
}

absl::Status CheckHash(absl::string_view column, absl::string_view hash) {
  bool hex = hash.size() == 64;
  for (char c : hash) hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  if (!hex) return ColumnError(column, "not 64 hex characters");
  return absl::OkStatus();
}

}  // namespace

std::string FormatArchiveLine(const Entry& entry) {
  std::string line = absl::StrCat(entry.seq, "\t", absl::ToUnixMicros(entry.at), "\t");
  for (const std::string* text : {&entry.actor, &entry.action, &entry.subject, &entry.payload}) {
    AppendEscaped(line, *text);
    line += '\t';
  }
  absl::StrAppend(&line, entry.prev_hash, "\t", entry.hash);
  return line;
}

absl::StatusOr<Entry> ParseArchiveLine(absl::string_view line) {
  if (!line.empty() && line.back() == '\r') {
    return ColumnError(kColumns[kColumnCount - 1], "line ends in a carriage return (CRLF?)");
  }
  const std::vector<absl::string_view> fields = absl::StrSplit(line, '\t');
  if (fields.size() < kColumnCount) {
    return ColumnError(kColumns[fields.size()],
                       absl::StrCat("missing: the line has ", fields.size(), " of ", kColumnCount,
                                    " tab-separated fields"));
  }
  if (fields.size() > kColumnCount) {
    return ColumnError(kColumns[kColumnCount - 1],
                       absl::StrCat("followed by more fields: the line has ", fields.size(),
                                    " tab-separated fields, not ", kColumnCount));
  }
  Entry entry;
  absl::StatusOr<int64_t> seq = ParseDecimal(kColumns[0], fields[0]);
  if (!seq.ok()) return seq.status();
  if (*seq <= 0) return ColumnError(kColumns[0], absl::StrCat("must be positive, got ", *seq));
  entry.seq = *seq;
  absl::StatusOr<int64_t> micros = ParseDecimal(kColumns[1], fields[1]);
  if (!micros.ok()) return micros.status();
  entry.at = absl::FromUnixMicros(*micros);
  std::string* texts[] = {&entry.actor, &entry.action, &entry.subject, &entry.payload};
  for (size_t i = 0; i < 4; ++i) {
    absl::StatusOr<std::string> text = Unescape(kColumns[2 + i], fields[2 + i]);
    if (!text.ok()) return text.status();
    *texts[i] = *std::move(text);
  }
  for (size_t i = 6; i < kColumnCount; ++i) {
    if (absl::Status s = CheckHash(kColumns[i], fields[i]); !s.ok()) return s;
  }
  entry.prev_hash = std::string(fields[6]);
  entry.hash = std::string(fields[7]);
  return entry;
}

}  // namespace arbiter::ledger
