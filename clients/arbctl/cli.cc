// The state arbctl's commands share: defaults from the configuration files
// and the environment, the root's global flags, and the connection --as
// selects.
#include "clients/arbctl/cli.h"

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include <CLI/CLI.hpp>

namespace arbiter::arbctl {
namespace {

// Reads an arbctl configuration file into `ctx`: "key = value" or
// "key=value" lines (TOML strings may be quoted; [sections] and comments
// are ignored). Keys: endpoint, tls_ca, tls_cert, tls_key, certs_dir (where
// --as looks), ledger_public_key, team (the default of `request --team`),
// output. A missing file is not an error.
void LoadConfig(const std::string& path, CliContext& ctx) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (line.empty() || line[0] == '#' || line[0] == '[' || eq == std::string::npos) continue;
    const std::string key(absl::StripAsciiWhitespace(line.substr(0, eq)));
    std::string value(absl::StripAsciiWhitespace(line.substr(eq + 1)));
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
        value.back() == value.front()) {
      value = value.substr(1, value.size() - 2);
    }
    if (key == "endpoint") ctx.global.endpoint = value;
    if (key == "tls_ca") ctx.global.ca_file = value;
    if (key == "tls_cert") ctx.global.cert_file = value;
    if (key == "tls_key") ctx.global.key_file = value;
    if (key == "certs_dir") ctx.certs_dir = value;
    if (key == "ledger_public_key") ctx.global.ledger_public_key = value;
    if (key == "team") ctx.default_team = value;
    if (key == "output") ctx.global.output = value;
  }
}

// The user's configuration: $XDG_CONFIG_HOME/arbiter/config.toml, else
// ~/.config/arbiter/config.toml.
std::string UserConfigPath() {
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg != nullptr && *xdg != '\0') {
    return absl::StrCat(xdg, "/arbiter/config.toml");
  }
  const char* home = std::getenv("HOME");
  return home == nullptr ? "" : absl::StrCat(home, "/.config/arbiter/config.toml");
}

// The longest text value arbctl passes on: PATH_MAX, for the file flags.
constexpr size_t kMaxTextBytes = 4096;

// Every integer value: a decimal that fits in int64. CLI11 2.1 converts
// with strtoll in base 0, so "010" was 8 and "0x10" 16, and saturates, so
// 2^63 passed CLI::PositiveNumber and arrived as INT64_MAX. Runs before the
// conversion; the error names the flag ("--gpus: ...").
std::string CheckDecimal(std::string& text) {
  const char* begin = text.data();
  const char* end = begin + text.size();
  const char* digits = begin + (text.size() > 1 && text[0] == '-' ? 1 : 0);
  if (digits == end || (end - digits > 1 && *digits == '0')) {
    return "expects a decimal integer, got '" + text.substr(0, 40) + "'";
  }
  int64_t value = 0;
  auto [ptr, error] = std::from_chars(begin, end, value);
  if (error == std::errc::result_out_of_range) return text.substr(0, 40) + " is out of range";
  if (error != std::errc() || ptr != end) {
    return "expects a decimal integer, got '" + text.substr(0, 40) + "'";
  }
  return "";
}

// Every text value: no control characters, at most kMaxTextBytes.
std::string CheckClearableText(std::string& text) {
  if (text.size() > kMaxTextBytes) {
    return "is " + std::to_string(text.size()) + " bytes; at most " + std::to_string(kMaxTextBytes);
  }
  for (char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return "must not contain control characters";
    }
  }
  return "";
}

// And not empty (leave the flag out for its default): an empty --team or
// --cluster was sent as "no filter", or as the default, instead of refused.
std::string CheckText(std::string& text) {
  if (text.empty()) return "must not be empty (leave the flag out for its default)";
  return CheckClearableText(text);
}

// The flags whose empty value means something, so CheckClearableText: it
// clears a default from the configuration files or the environment
// (`--tls-cert "" --tls-key ""`: no client certificate).
bool Clearable(const CLI::Option& option) {
  const std::string name = option.get_name();
  return name == "--tls-ca" || name == "--tls-cert" || name == "--tls-key";
}

}  // namespace

Commands CliContext::Connect() {
  if (!as.empty()) {
    global.cert_file = absl::StrCat(certs_dir.empty() ? "." : certs_dir, "/", as, ".pem");
    global.key_file = absl::StrCat(certs_dir.empty() ? "." : certs_dir, "/", as, ".key");
  }
  return Commands(global);
}

CliContext LoadDefaults() {
  CliContext ctx;
  LoadConfig(UserConfigPath(), ctx);
  const char* config = std::getenv("ARBITER_CONFIG");
  LoadConfig(config != nullptr ? config : ".arbiter/arbctl.conf", ctx);
  if (const char* env = std::getenv("ARBITER_ENDPOINT")) ctx.global.endpoint = env;
  if (const char* env = std::getenv("ARBITER_CA_FILE")) ctx.global.ca_file = env;
  if (const char* env = std::getenv("ARBITER_CERT_FILE")) ctx.global.cert_file = env;
  if (const char* env = std::getenv("ARBITER_KEY_FILE")) ctx.global.key_file = env;
  if (const char* env = std::getenv("ARBITER_OUTPUT")) ctx.global.output = env;
  return ctx;
}

void ConfigureRoot(CLI::App& root, CliContext& ctx) {
  root.footer(
      "Examples:\n"
      "  arbctl teams list\n"
      "  arbctl inventory list --pool serving\n"
      "  arbctl request --team inference --pool serving --class inference --gpus 2\n"
      "  arbctl request --team research --pool dev --class experimentation --milli 250 "
      "--gpu-memory-mib 8192\n"
      "  arbctl request --team inference --pool serving --class inference --mig 3g.40gb\n"
      "  arbctl requests list --team training --state queued\n"
      "  arbctl release 42\n"
      "  arbctl watch --team inference\n"
      "Environment: ARBITER_ENDPOINT (default 127.0.0.1:50051); for TLS, ARBITER_CA_FILE,\n"
      "ARBITER_CERT_FILE and ARBITER_KEY_FILE; ARBITER_OUTPUT. Defaults come from\n"
      "ARBITER_CONFIG or .arbiter/arbctl.conf (which deploy/local/up writes), then\n"
      "~/.config/arbiter/config.toml (endpoint, tls_ca, tls_cert, tls_key, team, output).\n"
      "Completion: source <(arbctl completion bash)");
  root.require_subcommand(1);
  root.add_option("--endpoint", ctx.global.endpoint, "arbiterd address host:port")
      ->capture_default_str();
  root.add_option("--as", ctx.as,
                  "act as this principal: use NAME.pem and NAME.key from the configured "
                  "certificate directory (deploy/local/up makes admin, alice, bob, carol, dave, "
                  "erin)");
  root.add_option("--tls-ca", ctx.global.ca_file, "CA certificate that signed arbiterd's (PEM)");
  root.add_option("--tls-cert", ctx.global.cert_file, "your client certificate (PEM)");
  root.add_option("--tls-key", ctx.global.key_file, "your client certificate's key (PEM)");
  root.add_option("-o,--output", ctx.global.output,
                  "table, json (proto3 JSON mapping), yaml or csv (env ARBITER_OUTPUT)")
      ->check(CLI::IsMember({"table", "json", "yaml", "csv"}))
      ->capture_default_str();
  root.add_flag("--json", ctx.global.json, "same as --output json");
  root.add_option("--timeout", ctx.global.timeout_seconds, "seconds to wait for each call")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
}

void CheckEveryValue(CLI::App& app) {
  // No description: the checks do not change the types `--help` shows.
  const CLI::Validator decimal(CheckDecimal, "");
  const CLI::Validator text(CheckText, "");
  const CLI::Validator clearable_text(CheckClearableText, "");
  for (CLI::Option* option : app.get_options()) {
    if (option->get_type_size() == 0) continue;  // A switch, such as --help.
    const std::string type = option->get_type_name();
    if (type.rfind("INT", 0) == 0) option->check(decimal);
    if (type.rfind("TEXT", 0) == 0) option->check(Clearable(*option) ? clearable_text : text);
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    CheckEveryValue(*sub);
  }
}

}  // namespace arbiter::arbctl
