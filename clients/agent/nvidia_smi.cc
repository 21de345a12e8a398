#include "clients/agent/nvidia_smi.h"

#include <cctype>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace arbiter::agent {
namespace {

// A recursive-descent reader over `text`, one element at a time.
class XmlReader {
 public:
  explicit XmlReader(absl::string_view text) : text_(text) {}

  absl::StatusOr<XmlElement> Document() {
    SkipMisc();
    if (!At("<")) return Error("no root element");
    absl::StatusOr<XmlElement> root = Element();
    if (!root.ok()) return root.status();
    SkipMisc();
    if (pos_ != text_.size()) return Error("content after the root element");
    return root;
  }

 private:
  bool At(absl::string_view s) const { return text_.substr(pos_, s.size()) == s; }

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("xml: ", what, " at byte ", pos_));
  }

  void SkipSpace() {
    while (pos_ < text_.size() && absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }

  // Skips what may surround or sit between elements: space, <?...?>,
  // <!DOCTYPE ...> and comments.
  void SkipMisc() {
    for (;;) {
      SkipSpace();
      if (At("<?")) {
        SkipPast("?>");
      } else if (At("<!--")) {
        SkipPast("-->");
      } else if (At("<!DOCTYPE") || At("<!doctype")) {
        SkipPast(">");
      } else {
        return;
      }
    }
  }

  void SkipPast(absl::string_view end) {
    const size_t at = text_.find(end, pos_);
    pos_ = at == absl::string_view::npos ? text_.size() : at + end.size();
  }

  std::string Name() {
    const size_t start = pos_;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (absl::ascii_isspace(static_cast<unsigned char>(c)) || c == '>' || c == '/' || c == '=') {
        break;
      }
      ++pos_;
    }
    return std::string(text_.substr(start, pos_ - start));
  }

  static std::string Decode(absl::string_view raw) {
    std::string out;
    out.reserve(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '&') {
        out.push_back(raw[i]);
        continue;
      }
      const size_t semi = raw.find(';', i);
      if (semi == absl::string_view::npos) {
        out.push_back('&');
        continue;
      }
      const absl::string_view entity = raw.substr(i + 1, semi - i - 1);
      if (entity == "amp") {
        out.push_back('&');
      } else if (entity == "lt") {
        out.push_back('<');
      } else if (entity == "gt") {
        out.push_back('>');
      } else if (entity == "quot") {
        out.push_back('"');
      } else if (entity == "apos") {
        out.push_back('\'');
      } else if (!entity.empty() && entity[0] == '#') {
        const bool hex = entity.size() > 1 && (entity[1] == 'x' || entity[1] == 'X');
        const long code =
            std::strtol(std::string(entity.substr(hex ? 2 : 1)).c_str(), nullptr, hex ? 16 : 10);
        if (code > 0 && code < 0x80) out.push_back(static_cast<char>(code));
      } else {
        absl::StrAppend(&out, raw.substr(i, semi - i + 1));
      }
      i = semi;
    }
    return out;
  }

  // REQUIRES: At("<") and not a comment or declaration.
  absl::StatusOr<XmlElement> Element(int depth = 0) {
    if (depth > kMaxDepth) return Error("elements nested too deep");
    ++pos_;  // '<'
    XmlElement e;
    e.name = Name();
    if (e.name.empty()) return Error("an element without a name");
    for (;;) {
      SkipSpace();
      if (At("/>")) {
        pos_ += 2;
        return e;
      }
      if (At(">")) {
        ++pos_;
        break;
      }
      std::string key = Name();
      SkipSpace();
      if (key.empty() || !At("=")) return Error(absl::StrCat("a bad attribute in <", e.name, ">"));
      ++pos_;
      SkipSpace();
      if (pos_ >= text_.size() || (text_[pos_] != '"' && text_[pos_] != '\'')) {
        return Error("an unquoted attribute value");
      }
      const char quote = text_[pos_++];
      const size_t end = text_.find(quote, pos_);
      if (end == absl::string_view::npos) return Error("an unclosed attribute value");
      e.attributes[key] = Decode(text_.substr(pos_, end - pos_));
      pos_ = end + 1;
    }
    std::string text;
    for (;;) {
      if (pos_ >= text_.size()) return Error(absl::StrCat("<", e.name, "> is not closed"));
      if (At("</")) {
        pos_ += 2;
        const std::string closing = Name();
        SkipSpace();
        if (closing != e.name || !At(">")) {
          return Error(absl::StrCat("</", closing, "> closes <", e.name, ">"));
        }
        ++pos_;
        e.text = std::string(absl::StripAsciiWhitespace(text));
        return e;
      }
      if (At("<!--")) {
        SkipPast("-->");
      } else if (At("<![CDATA[")) {
        pos_ += 9;
        const size_t end = text_.find("]]>", pos_);
        if (end == absl::string_view::npos) return Error("an unclosed CDATA section");
        absl::StrAppend(&text, text_.substr(pos_, end - pos_));
        pos_ = end + 3;
      } else if (At("<?")) {
        SkipPast("?>");
      } else if (At("<")) {
        absl::StatusOr<XmlElement> child = Element(depth + 1);
        if (!child.ok()) return child.status();
        e.children.push_back(*std::move(child));
      } else {
        const size_t next = text_.find('<', pos_);
        const size_t end = next == absl::string_view::npos ? text_.size() : next;
        text.append(Decode(text_.substr(pos_, end - pos_)));
        pos_ = end;
      }
    }
  }

  // nvidia-smi nests 6 deep; anything far deeper is not its output.
  static constexpr int kMaxDepth = 64;

  absl::string_view text_;
  size_t pos_ = 0;
};

// "<n> MiB" -> n; false for anything else ("N/A" included).
bool MiB(absl::string_view text, int64_t* out) {
  return absl::ConsumeSuffix(&text, " MiB") && absl::SimpleAtoi(text, out);
}

// A count that may read "N/A": 0 then.
int64_t Count(absl::string_view text) {
  int64_t n = 0;
  return absl::SimpleAtoi(text, &n) ? n : 0;
}

}  // namespace

const XmlElement* XmlElement::Child(absl::string_view child) const {
  for (const XmlElement& c : children) {
    if (c.name == child) return &c;
  }
  return nullptr;
}

std::string XmlElement::TextAt(absl::string_view path) const {
  const XmlElement* at = this;
  for (absl::string_view step : absl::StrSplit(path, '/')) {
    at = at->Child(step);
    if (at == nullptr) return "";
  }
  return at->text;
}

absl::StatusOr<XmlElement> ParseXml(absl::string_view text) { return XmlReader(text).Document(); }

absl::StatusOr<std::vector<GpuFacts>> ParseNvidiaSmi(absl::string_view xml) {
  absl::StatusOr<XmlElement> root = ParseXml(xml);
  if (!root.ok()) return root.status();
  if (root->name != "nvidia_smi_log") {
    return absl::InvalidArgumentError(
        absl::StrCat("nvidia-smi: the root element is <", root->name, ">, not <nvidia_smi_log>"));
  }
  std::vector<GpuFacts> gpus;
  for (const XmlElement& g : root->children) {
    if (g.name != "gpu") continue;
    GpuFacts f;
    f.index = static_cast<int32_t>(gpus.size());
    if (auto id = g.attributes.find("id"); id != g.attributes.end()) f.pci_bus = id->second;
    f.product = g.TextAt("product_name");
    f.uuid = g.TextAt("uuid");
    const std::string where = absl::StrCat("nvidia-smi: GPU ", f.index);
    if (f.product.empty() || f.uuid.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has no product_name or uuid"));
    }
    if (!MiB(g.TextAt("fb_memory_usage/total"), &f.memory_mib) || f.memory_mib <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": fb_memory_usage/total is '",
                                                     g.TextAt("fb_memory_usage/total"),
                                                     "', not '<n> MiB'"));
    }
    f.mig_enabled = g.TextAt("mig_mode/current_mig") == "Enabled";
    if (const XmlElement* devices = g.Child("mig_devices")) {
      for (const XmlElement& d : devices->children) {
        if (d.name != "mig_device") continue;
        MigDeviceFacts m;
        m.gpu_instance_id = static_cast<int32_t>(Count(d.TextAt("gpu_instance_id")));
        m.compute_instance_id = static_cast<int32_t>(Count(d.TextAt("compute_instance_id")));
        m.sm_count =
            static_cast<int32_t>(Count(d.TextAt("device_attributes/shared/multiprocessor_count")));
        MiB(d.TextAt("fb_memory_usage/total"), &m.memory_mib);
        f.mig_devices.push_back(std::move(m));
      }
    }
    f.ecc_enabled = g.TextAt("ecc_mode/current_ecc") == "Enabled";
    f.retired_pages =
        Count(g.TextAt("retired_pages/multiple_single_bit_retirement/retired_count")) +
        Count(g.TextAt("retired_pages/double_bit_retirement/retired_count"));
    if (g.TextAt("gpu_reset_status/reset_required") == "Yes") {
      f.unhealthy.push_back("a GPU reset is required");
    }
    if (g.TextAt("retired_pages/pending_retirement") == "Yes" ||
        g.TextAt("retired_pages/pending_blacklist") == "Yes") {
      f.unhealthy.push_back("retired pages are pending (reset the GPU)");
    }
    if (g.TextAt("remapped_rows/remapped_row_pending") == "Yes") {
      f.unhealthy.push_back("remapped rows are pending (reset the GPU)");
    }
    if (g.TextAt("remapped_rows/remapped_row_failure") == "Yes") {
      f.unhealthy.push_back("a row remapping failed");
    }
    gpus.push_back(std::move(f));
  }
  if (gpus.empty()) return absl::InvalidArgumentError("nvidia-smi: the document lists no GPU");
  return gpus;
}

absl::StatusOr<std::string> CatalogModelOf(absl::string_view product, int64_t memory_mib) {
  const std::string p = absl::AsciiStrToUpper(product);
  auto has = [&](absl::string_view part) { return absl::StrContains(p, part); };
  // Most specific first: "L40S" before "L4", "H200" before "H100".
  if (has("B200")) return std::string("B200");
  if (has("H200")) return std::string("H200-141GB");
  if (has("H100")) return std::string("H100-80GB");
  if (has("A100")) return std::string(memory_mib > 48 * 1024 ? "A100-80GB" : "A100-40GB");
  if (has("L40S")) return std::string("L40S");
  if (absl::EndsWith(p, " L4") || p == "L4") return std::string("L4");
  if (has("A10G") || absl::EndsWith(p, " A10")) return std::string("A10");
  if (has("V100")) return std::string(memory_mib > 24 * 1024 ? "V100M32" : "V100M16");
  if (has("P100")) return std::string("P100");
  if (absl::EndsWith(p, " T4")) return std::string("T4");
  if (has("MI300X")) return std::string("MI300X");
  return absl::NotFoundError(
      absl::StrCat("product '", product, "' maps to no catalog model (docs/catalog.md)"));
}

std::string ProfileOf(const std::map<std::string, std::pair<int32_t, int64_t>>& table,
                      int32_t sm_count, int64_t memory_mib) {
  std::string best;
  int64_t best_gap = 0;
  for (const auto& [name, facts] : table) {
    if (facts.first != sm_count || absl::StrContains(name, "+me")) continue;
    const int64_t gap = std::llabs(facts.second - memory_mib);
    if (gap * 20 > facts.second) continue;  // More than 5% off.
    if (best.empty() || gap < best_gap) {
      best = name;
      best_gap = gap;
    }
  }
  return best;
}

absl::StatusOr<std::vector<MigPlacementFacts>> ParseMigPlacements(absl::string_view text) {
  std::vector<MigPlacementFacts> out;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    auto bad = [&] {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_number,
                       ": not a -lgipp placement (GPU N Profile ID N Placements: "
                       "{S,...}:N): ",
                       line.substr(0, 80)));
    };
    // "GPU  0 Profile ID  9 Placements: {0,4}:4"
    std::vector<absl::string_view> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    const size_t brace = line.find('{');
    const size_t close = line.find("}:");
    if (words.size() < 6 || words[0] != "GPU" || words[2] != "Profile" || words[3] != "ID" ||
        !absl::StartsWith(words[5], "Placement") || brace == absl::string_view::npos ||
        close == absl::string_view::npos || close < brace) {
      return bad();
    }
    MigPlacementFacts p;
    if (!absl::SimpleAtoi(words[1], &p.gpu) || !absl::SimpleAtoi(words[4], &p.profile_id) ||
        !absl::SimpleAtoi(line.substr(close + 2), &p.size) || p.size <= 0) {
      return bad();
    }
    for (absl::string_view start : absl::StrSplit(line.substr(brace + 1, close - brace - 1), ',')) {
      int32_t slot = 0;
      if (!absl::SimpleAtoi(start, &slot) || slot < 0 || slot > 7) return bad();
      p.starts.push_back(slot);
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace arbiter::agent
