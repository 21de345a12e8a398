#include "clients/arbctl/table.h"

#include <algorithm>

namespace arbiter::arbctl {

void Table::Print(std::ostream& out) const {
  std::vector<size_t> widths;
  for (const std::string& h : headers_) widths.push_back(h.size());
  for (const auto& row : rows_) {
    for (size_t i = 0; i < row.size() && i < widths.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  }
  auto print_row = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size() && i < widths.size(); ++i) {
      out << cells[i];
      if (i + 1 < cells.size()) out << std::string(widths[i] - cells[i].size() + 2, ' ');
    }
    out << "\n";
  };
  print_row(headers_);
  for (const auto& row : rows_) print_row(row);
  if (rows_.empty()) out << "(none)\n";
}

void Table::PrintCsv(std::ostream& out) const {
  auto cell = [&](const std::string& c) {
    if (c.find_first_of(",\"\r\n") == std::string::npos) return c;
    std::string quoted = "\"";
    for (char ch : c) quoted += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return quoted + "\"";
  };
  auto print_row = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) out << (i ? "," : "") << cell(cells[i]);
    out << "\r\n";
  };
  print_row(headers_);
  for (const auto& row : rows_) print_row(row);
}

}  // namespace arbiter::arbctl
