// A plain-text table for arbctl's human output: columns sized to content.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace arbiter::arbctl {

class Table {
 public:
  explicit Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}
  void AddRow(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  void Print(std::ostream& out) const;
  // RFC 4180 CSV: a header row, then one row per line; cells with a comma,
  // quote or line break are quoted.
  void PrintCsv(std::ostream& out) const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace arbiter::arbctl
