#include "server/logging.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace arbiter::server {
namespace {

// %* : the message as the inside of a JSON string.
class JsonEscapedMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    static constexpr char kHex[] = "0123456789abcdef";
    for (const char c : spdlog::string_view_t(msg.payload.data(), msg.payload.size())) {
      switch (c) {
        case '"':
          dest.append(std::string_view("\\\""));
          break;
        case '\\':
          dest.append(std::string_view("\\\\"));
          break;
        case '\n':
          dest.append(std::string_view("\\n"));
          break;
        case '\r':
          dest.append(std::string_view("\\r"));
          break;
        case '\t':
          dest.append(std::string_view("\\t"));
          break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            const char escaped[] = {'\\', 'u', '0', '0', kHex[(c >> 4) & 0xf], kHex[c & 0xf]};
            dest.append(escaped, escaped + sizeof escaped);
          } else {
            dest.push_back(c);
          }
      }
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonEscapedMessage>();
  }
};

}  // namespace

absl::Status ConfigureLogging(const std::string& format) {
  // Logs go to stderr; stdout carries only the "arbiterd ready" line.
  spdlog::set_default_logger(spdlog::stderr_color_mt("arbiterd"));
  if (format == "text") {
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %^%l%$ arbiterd: %v");
    return absl::OkStatus();
  }
  if (format != "json") {
    return absl::InvalidArgumentError(absl::StrCat("log-format: want text or json, got ", format));
  }
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<JsonEscapedMessage>('*').set_pattern(
      R"({"ts":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","logger":"arbiterd","msg":"%*"})");
  spdlog::set_formatter(std::move(formatter));
  return absl::OkStatus();
}

}  // namespace arbiter::server
