#include "bench/csv.h"

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace arbiter::bench {
namespace {

constexpr absl::string_view kByteOrderMark = "\xEF\xBB\xBF";

absl::Status AtLine(int64_t line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", what));
}

// Splits `text` into records of fields, following RFC 4180.
class Parser {
 public:
  explicit Parser(absl::string_view text) : text_(text) {}

  // The next record; false at the end of the text. `line` is the line the
  // record starts on.
  absl::StatusOr<bool> Next(std::vector<std::string>* fields, int64_t* line) {
    fields->clear();
    // Lines with no characters are no records.
    while (pos_ < text_.size() && IsLineEnd(text_[pos_])) SkipLineEnd();
    if (pos_ >= text_.size()) return false;
    *line = line_;
    while (true) {
      std::string field;
      if (text_[pos_] == '"') {
        if (absl::Status s = Quoted(&field); !s.ok()) return s;
      } else {
        while (pos_ < text_.size() && text_[pos_] != ',' && !IsLineEnd(text_[pos_])) {
          field.push_back(text_[pos_++]);
        }
      }
      fields->push_back(std::move(field));
      if (pos_ >= text_.size()) return true;
      if (text_[pos_] == ',') {
        ++pos_;
        if (pos_ >= text_.size() || IsLineEnd(text_[pos_])) {
          fields->emplace_back();  // A trailing comma ends with an empty field.
          if (pos_ < text_.size()) SkipLineEnd();
          return true;
        }
        continue;
      }
      SkipLineEnd();
      return true;
    }
  }

 private:
  static bool IsLineEnd(char c) { return c == '\n' || c == '\r'; }

  // Past one CRLF, LF or CR.
  void SkipLineEnd() {
    if (text_[pos_] == '\r' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '\n') ++pos_;
    ++pos_;
    ++line_;
  }

  // A quoted field, from its opening quote to just past its closing one.
  absl::Status Quoted(std::string* field) {
    const int64_t opened = line_;
    ++pos_;
    while (true) {
      if (pos_ >= text_.size()) return AtLine(opened, "a quoted field is not closed");
      const char c = text_[pos_++];
      if (c == '"') {
        if (pos_ < text_.size() && text_[pos_] == '"') {
          field->push_back('"');
          ++pos_;
          continue;
        }
        if (pos_ < text_.size() && text_[pos_] != ',' && !IsLineEnd(text_[pos_])) {
          return AtLine(line_, "text after a closing quote");
        }
        return absl::OkStatus();
      }
      if (c == '\n' || (c == '\r' && (pos_ >= text_.size() || text_[pos_] != '\n'))) ++line_;
      field->push_back(c);
    }
  }

  absl::string_view text_;
  size_t pos_ = 0;
  int64_t line_ = 1;
};

}  // namespace

absl::StatusOr<CsvTable> ParseCsv(absl::string_view text,
                                  const std::vector<std::string>& required) {
  if (text.substr(0, kByteOrderMark.size()) == kByteOrderMark) {
    text.remove_prefix(kByteOrderMark.size());
  }
  Parser parser(text);
  CsvTable table;
  std::vector<std::string> fields;
  int64_t line = 1;
  absl::StatusOr<bool> more = parser.Next(&table.header, &line);
  if (!more.ok()) return more.status();
  if (!*more) return absl::InvalidArgumentError("no header: the file is empty");
  std::set<std::string> seen;
  for (const std::string& name : table.header) {
    if (name.empty()) return AtLine(line, "the header has an empty column name");
    if (!seen.insert(name).second) {
      return AtLine(line, absl::StrCat("column '", name, "' is named twice"));
    }
  }
  for (const std::string& name : required) {
    if (!seen.contains(name)) {
      return absl::InvalidArgumentError(absl::StrCat("missing required column '", name,
                                                     "' (the header has ",
                                                     absl::StrJoin(table.header, ","), ")"));
    }
  }
  while (true) {
    more = parser.Next(&fields, &line);
    if (!more.ok()) return more.status();
    if (!*more) break;
    if (fields.size() != table.header.size()) {
      return AtLine(
          line, absl::StrCat(fields.size(), " fields where the header has ", table.header.size()));
    }
    CsvRow& row = table.rows.emplace_back();
    for (size_t i = 0; i < fields.size(); ++i) row[table.header[i]] = std::move(fields[i]);
  }
  return table;
}

absl::StatusOr<CsvTable> ReadCsvFile(const std::string& path,
                                     const std::vector<std::string>& required) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<CsvTable> table = ParseCsv(text.str(), required);
  if (!table.ok()) {
    return absl::Status(table.status().code(), absl::StrCat(path, ": ", table.status().message()));
  }
  return table;
}

}  // namespace arbiter::bench
