// arbctl completion bash | zsh: a shell completion script generated from the
// command tree itself, so it never goes stale.
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include <CLI/CLI.hpp>

#include "clients/arbctl/cli.h"

namespace arbiter::arbctl {
namespace {

// Every command path ("arbctl", "arbctl teams", ...) with the words that
// may follow it: its subcommands and its options.
void CompletionWords(const CLI::App* app, const std::string& path,
                     std::map<std::string, std::vector<std::string>>& out) {
  std::vector<std::string>& words = out[path];
  for (const CLI::App* sub : app->get_subcommands([](const CLI::App*) { return true; })) {
    words.push_back(sub->get_name());
    CompletionWords(sub, path + " " + sub->get_name(), out);
  }
  for (const CLI::Option* opt : app->get_options()) {
    for (const std::string& name : opt->get_lnames()) words.push_back("--" + name);
  }
}

// A bash completion script (zsh: the same through bashcompinit).
std::string CompletionScript(const CLI::App& app, const std::string& shell) {
  std::map<std::string, std::vector<std::string>> words;
  CompletionWords(&app, "arbctl", words);
  std::string out =
      "# arbctl completion for " + shell + ": source <(arbctl completion " + shell + ")\n";
  if (shell == "zsh") out += "autoload -U +X bashcompinit && bashcompinit\n";
  out += "declare -gA _arbctl_words=(\n";
  for (const auto& [path, list] : words) {
    out += absl::StrCat("  [\"", path, "\"]=\"", absl::StrJoin(list, " "), "\"\n");
  }
  out +=
      ")\n"
      "_arbctl() {\n"
      "  local cur=${COMP_WORDS[COMP_CWORD]} path=arbctl next i\n"
      "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
      "    next=\"$path ${COMP_WORDS[i]}\"\n"
      "    [[ -n \"${_arbctl_words[$next]+x}\" ]] && path=$next\n"
      "  done\n"
      "  COMPREPLY=($(compgen -W \"${_arbctl_words[$path]}\" -- \"$cur\"))\n"
      "}\n"
      "complete -F _arbctl arbctl\n";
  return out;
}

}  // namespace

void RegisterCompletionCommand(CLI::App& root, CliContext& /*ctx*/) {
  auto shell = std::make_shared<std::string>();
  CLI::App* completion = root.add_subcommand(
      "completion", "print a shell completion script\n  e.g. source <(arbctl completion bash)");
  completion->add_option("shell", *shell, "bash or zsh")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh"}));
  completion->callback([&root, shell] { std::cout << CompletionScript(root, *shell); });
}

}  // namespace arbiter::arbctl
