// arbctl: the command-line client of Arbiter. Run `arbctl --help`.
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include <CLI/CLI.hpp>

#include "clients/arbctl/commands.h"

namespace {

// Reads an arbctl configuration file into `global`: "key = value" or
// "key=value" lines (TOML strings may be quoted; [sections] and comments
// are ignored). Keys: endpoint, tls_ca, tls_cert, tls_key, certs_dir (where
// --as looks), ledger_public_key, team (the default of `request --team`),
// output. A missing file is not an error.
void LoadConfig(const std::string& path, arbiter::arbctl::GlobalOptions& global,
                std::string& certs_dir, std::string& team) {
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
    if (key == "endpoint") global.endpoint = value;
    if (key == "tls_ca") global.ca_file = value;
    if (key == "tls_cert") global.cert_file = value;
    if (key == "tls_key") global.key_file = value;
    if (key == "certs_dir") certs_dir = value;
    if (key == "ledger_public_key") global.ledger_public_key = value;
    if (key == "team") team = value;
    if (key == "output") global.output = value;
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

int main(int argc, char** argv) {
  using arbiter::arbctl::Commands;
  arbiter::arbctl::GlobalOptions global;
  // Precedence: flags, then environment, then ARBITER_CONFIG (or the
  // checkout's .arbiter/arbctl.conf), then the user's config.toml.
  std::string certs_dir, default_team;
  LoadConfig(UserConfigPath(), global, certs_dir, default_team);
  const char* config = std::getenv("ARBITER_CONFIG");
  LoadConfig(config != nullptr ? config : ".arbiter/arbctl.conf", global, certs_dir, default_team);
  if (const char* env = std::getenv("ARBITER_ENDPOINT")) global.endpoint = env;
  if (const char* env = std::getenv("ARBITER_CA_FILE")) global.ca_file = env;
  if (const char* env = std::getenv("ARBITER_CERT_FILE")) global.cert_file = env;
  if (const char* env = std::getenv("ARBITER_KEY_FILE")) global.key_file = env;

  CLI::App app{"arbctl: ask Arbiter for GPU capacity, see why a request waits, release it.",
               "arbctl"};
  app.footer(
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
  app.require_subcommand(1);
  app.add_option("--endpoint", global.endpoint, "arbiterd address host:port")
      ->capture_default_str();
  std::string as;
  app.add_option("--as", as,
                 "act as this principal: use NAME.pem and NAME.key from the configured "
                 "certificate directory (deploy/local/up makes admin, alice, bob, carol, dave, "
                 "erin)");
  app.add_option("--tls-ca", global.ca_file, "CA certificate that signed arbiterd's (PEM)");
  app.add_option("--tls-cert", global.cert_file, "your client certificate (PEM)");
  app.add_option("--tls-key", global.key_file, "your client certificate's key (PEM)");
  if (const char* env = std::getenv("ARBITER_OUTPUT")) global.output = env;
  app.add_option("-o,--output", global.output,
                 "table, json (proto3 JSON mapping), yaml or csv (env ARBITER_OUTPUT)")
      ->check(CLI::IsMember({"table", "json", "yaml", "csv"}))
      ->capture_default_str();
  app.add_flag("--json", global.json, "same as --output json");
  app.add_option("--timeout", global.timeout_seconds, "seconds to wait for each call")
      ->capture_default_str();

  int rc = 0;
  auto commands = [&] {
    if (!as.empty()) {
      global.cert_file = absl::StrCat(certs_dir.empty() ? "." : certs_dir, "/", as, ".pem");
      global.key_file = absl::StrCat(certs_dir.empty() ? "." : certs_dir, "/", as, ".key");
    }
    return Commands(global);
  };

  CLI::App* models = app.add_subcommand("models", "the GPU catalog");
  models->add_subcommand("list", "list GPU models")->callback([&] {
    rc = commands().ListModels();
  });
  CLI::App* clusters = app.add_subcommand("clusters", "clusters");
  clusters->add_subcommand("list", "list clusters")->callback([&] {
    rc = commands().ListClusters();
  });
  std::string create_name, create_description, latency_class;
  CLI::App* cluster_create = clusters->add_subcommand("create", "create a cluster");
  cluster_create->add_option("name", create_name, "cluster name")->required();
  cluster_create->add_option("--description", create_description, "free-form description");
  cluster_create->callback([&] { rc = commands().CreateCluster(create_name, create_description); });
  CLI::App* pools = app.add_subcommand("pools", "pools by latency class");
  pools->add_subcommand("list", "list pools")->callback([&] { rc = commands().ListPools(); });
  std::vector<std::string> lends_to;
  CLI::App* pool_create = pools->add_subcommand("create",
                                                "create a pool\n  e.g. arbctl pools create serving "
                                                "--class serving --lends-to batch_analytics");
  pool_create->add_option("name", create_name, "pool name")->required();
  pool_create->add_option("--class", latency_class, "serving, batch, spot or dev")->required();
  pool_create->add_option("--lends-to", lends_to,
                          "serving pools: workload classes it lends to, preemptibly (repeatable)");
  pool_create->add_option("--description", create_description, "free-form description");
  pool_create->callback([&] {
    rc = commands().CreatePool(create_name, latency_class, lends_to, create_description);
  });

  CLI::App* roles = app.add_subcommand("roles", "who may do what: role bindings");
  roles->add_subcommand("list", "list role bindings")->callback([&] {
    rc = commands().ListRoles();
  });
  std::string role_subject, role, scope = "org";
  for (const char* verb : {"grant", "revoke"}) {
    const bool revoke = std::string(verb) == "revoke";
    CLI::App* cmd = roles->add_subcommand(
        verb, revoke ? "revoke a role\n  e.g. arbctl roles revoke spiffe://arbiter.local/bob "
                       "--role team_member --scope team:inference"
                     : "grant a role\n  e.g. arbctl roles grant spiffe://arbiter.local/bob "
                       "--role team_member --scope team:inference");
    cmd->add_option("subject", role_subject, "principal (SPIFFE ID, URI SAN or CN) or group:NAME")
        ->required();
    cmd->add_option("--role", role,
                    "platform_admin, pool_authority, team_admin, team_member, finance, auditor "
                    "or agent")
        ->required();
    cmd->add_option("--scope", scope, "org, team:NAME or pool:NAME")->capture_default_str();
    cmd->callback([&, revoke] { rc = commands().GrantRole(role_subject, role, scope, revoke); });
  }

  std::string cluster, pool, team, parent, state;
  CLI::App* inventory = app.add_subcommand("inventory", "nodes and their GPUs");
  CLI::App* inventory_list = inventory->add_subcommand("list", "list nodes with allocations");
  inventory_list->add_option("--cluster", cluster, "only this cluster");
  inventory_list->add_option("--pool", pool, "only this pool");
  inventory_list->callback([&] { rc = commands().ListInventory(cluster, pool); });
  arbiter::arbctl::Commands::NodeOptions node;
  CLI::App* register_node = inventory->add_subcommand(
      "register",
      "register a node and its GPUs\n  e.g. arbctl inventory register h100-7 --cluster east "
      "--pool serving --model H100-80GB --gpus 8");
  register_node->add_option("name", node.name, "node name (its Kubernetes node name)")->required();
  register_node->add_option("--cluster", node.cluster, "cluster")->required();
  register_node->add_option("--pool", node.pool, "pool")->required();
  register_node->add_option("--model", node.model, "GPU model (arbctl models list)")->required();
  register_node->add_option("--gpus", node.gpus, "GPUs on the node")->capture_default_str();
  register_node->add_option("--cpu-milli", node.cpu_milli, "host CPU, milli-cores")
      ->capture_default_str();
  register_node->add_option("--memory-mib", node.memory_mib, "host memory, MiB")
      ->capture_default_str();
  register_node->add_option("--topology-domain", node.topology_domain,
                            "NVLink domain or rack (gangs may ask for one)");
  register_node->add_option("--uuid", node.uuids, "GPU UUIDs in index order (repeatable)");
  register_node->callback([&] { rc = commands().RegisterNode(node); });

  CLI::App* teams = app.add_subcommand("teams", "teams and cohorts");
  teams->add_subcommand("list", "list teams")->callback([&] { rc = commands().ListTeams(); });
  int64_t weight_milli = 1000;
  std::string name;
  CLI::App* team_create = teams->add_subcommand("create", "create a team");
  team_create->add_option("name", name, "team name")->required();
  team_create->add_option("--parent", parent, "parent team (cohort)");
  team_create->add_option("--weight-milli", weight_milli, "fair-share weight, 1000 = 1")
      ->capture_default_str();
  team_create->callback([&] { rc = commands().CreateTeam(name, parent, weight_milli); });

  CLI::App* quotas = app.add_subcommand("quotas", "quotas per team per pool");
  CLI::App* quotas_list = quotas->add_subcommand("list", "list quotas with use");
  quotas_list->add_option("--team", team, "only this team");
  quotas_list->callback([&] { rc = commands().ListQuotas(team); });
  int64_t nominal_milli = 0;
  CLI::App* quota_set = quotas->add_subcommand("set", "set a team's nominal quota in a pool");
  quota_set->add_option("team", team, "team")->required();
  quota_set->add_option("pool", pool, "pool")->required();
  quota_set->add_option("nominal_milli", nominal_milli, "milli-GPU (1000 = one GPU)")->required();
  std::string quota_model;
  int64_t borrow_milli = -2;
  int64_t lend_milli = -1;
  quota_set->add_option("--gpu-model", quota_model, "only for this GPU model (default: all)");
  quota_set->add_option("--borrow-milli", borrow_milli,
                        "may borrow this much beyond nominal from the cohort; -1: no limit");
  quota_set->add_option("--lend-milli", lend_milli,
                        "lends at most this much of nominal to the cohort (default: all)");
  quota_set->callback([&] {
    rc = commands().SetQuota(team, pool, nominal_milli, quota_model, borrow_milli, lend_milli);
  });

  arbiter::arbctl::RequestOptions req;
  CLI::App* coexistence =
      app.add_subcommand("coexistence", "which workload classes may share a GPU or a node");
  coexistence->add_subcommand("list", "list the rules in force")->callback([&] {
    rc = commands().ListCoexistence();
  });
  CLI::App* coexistence_set = coexistence->add_subcommand("set", "set the rule of a pair");
  std::string class_a, class_b, isolation;
  bool separate_nodes = false;
  coexistence_set->add_option("class_a", class_a, "training, inference, ...")->required();
  coexistence_set->add_option("class_b", class_b, "training, inference, ...")->required();
  coexistence_set->add_option("--gpu", isolation, "forbidden, mig_only or soft_sharing")
      ->required();
  coexistence_set->add_flag("--separate-nodes", separate_nodes, "never on the same node");
  coexistence_set->callback(
      [&] { rc = commands().SetCoexistence(class_a, class_b, isolation, !separate_nodes); });

  CLI::App* request = app.add_subcommand("request", "ask for capacity (answered after commit)");
  req.team = default_team;
  CLI::Option* team_option =
      request->add_option("--team", req.team, "requesting team (default: team in config.toml)");
  if (default_team.empty()) team_option->required();
  request->add_option("--pool", req.pool, "pool to draw from")->required();
  request
      ->add_option("--class", req.workload_class,
                   "training, inference, batch_analytics or experimentation")
      ->capture_default_str();
  request->add_option("--members", req.members, "gang size (all or nothing)")
      ->capture_default_str();
  request->add_option("--gpus", req.gpus, "whole GPUs per member");
  request->add_option("--milli", req.milli, "fraction of one shared GPU per member, milli-GPU");
  request->add_option("--gpu-memory-mib", req.gpu_memory_mib, "GPU memory per member (fraction)");
  request->add_option("--mig", req.mig_profile, "one MIG instance per member, e.g. 3g.40gb");
  request->add_option("--topology", req.topology,
                      "same-node or same-domain: keep the gang's members together");
  request->add_option("--cpu-milli", req.cpu_milli, "host CPU per member, milli-cores");
  request->add_option("--memory-mib", req.memory_mib, "host memory per member, MiB");
  request->add_option("--model", req.models, "allowed GPU model (repeatable)");
  request->add_option("--key", req.key, "idempotency key; reuse it to retry safely");
  request->add_option("--description", req.description, "job name, pod or ticket");
  request->add_option("--priority", req.priority, "-1000..1000; higher may preempt lower");
  request->add_flag(
      "--preemptible", req.preemptible,
      "may be preempted (needed to borrow, or to use a serving pool as non-inference)");
  request->add_flag("--guaranteed", req.guaranteed, "executive-sponsored: never preempted");
  request->add_option("--checkpoint-seconds", req.checkpoint_seconds,
                      "seconds to checkpoint and restore");
  request->add_option("--checkpoint-every", req.checkpoint_every_seconds,
                      "seconds between checkpoints (0: none)");
  request->add_option("--start", req.start,
                      "advance reservation: RFC 3339 time or +<duration> from now, e.g. +2h");
  request->add_option("--duration", req.duration,
                      "declared run time, e.g. 90m (lets the work backfill reservations)");
  request->callback([&] {
    if (req.milli == 0 && req.gpus == 0 && req.mig_profile.empty()) req.gpus = 1;
    rc = commands().Request(req);
  });

  int limit = 50;
  int64_t id = 0;
  CLI::App* requests = app.add_subcommand("requests", "capacity requests");
  CLI::App* requests_list = requests->add_subcommand("list", "list requests, newest first");
  requests_list->add_option("--team", team, "only this team");
  requests_list->add_option("--state", state, "admitted, queued, denied, released, cancelled");
  requests_list->add_option("--limit", limit, "at most this many")->capture_default_str();
  requests_list->callback([&] { rc = commands().ListRequests(team, state, limit); });
  CLI::App* requests_get = requests->add_subcommand("get", "show one request and why it waits");
  requests_get->add_option("id", id, "request id")->required();
  requests_get->callback([&] { rc = commands().GetRequest(id); });

  CLI::App* release =
      app.add_subcommand("release", "release an allocation (or cancel a queued request)");
  release->add_option("id", id, "request id")->required();
  release->callback([&] { rc = commands().Release(id); });

  CLI::App* watch = app.add_subcommand("watch", "stream allocation events as they commit");
  watch->add_option("--team", team, "only this team");
  watch->add_option("--pool", pool, "only this pool");
  watch->callback([&] { rc = commands().Watch(team, pool); });

  CLI::App* approve = app.add_subcommand("approve", "approve a request that waits for you");
  approve->add_option("id", id, "request id")->required();
  approve->callback([&] { rc = commands().Approve(id); });
  CLI::App* deny = app.add_subcommand("deny", "refuse a request that waits for your approval");
  std::string deny_reason;
  deny->add_option("id", id, "request id")->required();
  deny->add_option("--reason", deny_reason, "why (recorded in the ledger)")->required();
  deny->callback([&] { rc = commands().Deny(id, deny_reason); });
  CLI::App* delegate = app.add_subcommand("delegate", "let someone approve in your stead");
  std::string delegate_from, delegate_to, delegate_until;
  delegate->add_option("to", delegate_to, "principal who may approve for you")->required();
  delegate->add_option("--from", delegate_from, "your principal")->required();
  delegate->add_option("--until", delegate_until, "RFC 3339 time or +<duration>")->required();
  delegate->callback([&] { rc = commands().Delegate(delegate_from, delegate_to, delegate_until); });
  CLI::App* delegations = app.add_subcommand("delegations", "delegated approval authority");
  CLI::App* delegation_revoke =
      delegations->add_subcommand("revoke",
                                  "take back a delegation\n  e.g. arbctl delegations "
                                  "revoke spiffe://arbiter.local/erin --from "
                                  "spiffe://arbiter.local/carol");
  delegation_revoke->add_option("to", delegate_to, "principal who may approve for you")->required();
  delegation_revoke->add_option("--from", delegate_from, "your principal")->required();
  delegation_revoke->callback(
      [&] { rc = commands().RevokeDelegation(delegate_from, delegate_to); });
  delegations->add_subcommand("list", "list delegations")->callback([&] {
    rc = commands().ListDelegations();
  });
  CLI::App* authority = app.add_subcommand("authority", "who must approve what");
  authority->add_subcommand("list", "list authority rules")->callback([&] {
    rc = commands().ListAuthority();
  });
  std::string rule_pool, rule_action, rule_approver;
  Commands::AuthorityLimits rule_limits;
  for (const char* verb : {"set", "remove"}) {
    CLI::App* cmd = authority->add_subcommand(verb, std::string(verb) == "set"
                                                        ? "declare that an action needs an approver"
                                                        : "remove an authority rule");
    cmd->add_option("--pool", rule_pool, "pool (default: every pool)");
    cmd->add_option("--action", rule_action, "borrow, guaranteed, large, over_budget or long")
        ->required();
    cmd->add_option("--approver", rule_approver, "principal or group:NAME")->required();
    cmd->add_option("--limit-milli", rule_limits.limit_milli,
                    "largest request it may approve; -1: any");
    cmd->add_option("--limit-seconds", rule_limits.limit_seconds,
                    "longest request it may approve; -1: any");
    cmd->add_option("--limit-micros", rule_limits.limit_micros,
                    "dearest request (projected) it may approve; -1: any");
    cmd->add_option("--threshold-milli", rule_limits.threshold_milli, "large: requests above this");
    cmd->add_option("--threshold-seconds", rule_limits.threshold_seconds,
                    "long: requests running longer than this");
    const bool remove = std::string(verb) == "remove";
    cmd->callback([&, remove] {
      rc = commands().SetAuthority(rule_pool, rule_action, rule_approver, rule_limits, remove);
    });
  }

  CLI::App* prices = app.add_subcommand("prices", "the price book (micros per GPU-hour)");
  std::string price_at, price_from, price_model, price_class;
  int64_t price_micros = 0;
  CLI::App* prices_list = prices->add_subcommand("list", "every price, or those in force --at");
  prices_list->add_option("--at", price_at, "RFC 3339 time or +<duration>");
  prices_list->callback([&] { rc = commands().ListPrices(price_at); });
  CLI::App* prices_set = prices->add_subcommand("set", "add a price (from now, or --from)");
  prices_set->add_option("model", price_model, "GPU model")->required();
  prices_set->add_option("class", price_class, "serving, batch, spot or dev")->required();
  prices_set->add_option("micros_per_gpu_hour", price_micros, "1000000 = one unit")->required();
  prices_set->add_option("--from", price_from, "RFC 3339 time or +<duration>");
  prices_set->callback(
      [&] { rc = commands().SetPrice(price_model, price_class, price_micros, price_from); });
  CLI::App* budgets = app.add_subcommand("budgets", "monthly team budgets (micros)");
  budgets->add_subcommand("list", "budgets with this month's spend")->callback([&] {
    rc = commands().ListBudgets();
  });
  CLI::App* budgets_set = budgets->add_subcommand("set", "set a team's monthly budget");
  std::string budget_team, budget_over = "deny";
  int64_t budget_soft = 0, budget_hard = 0;
  budgets_set->add_option("team", budget_team, "team")->required();
  budgets_set->add_option("--soft-micros", budget_soft, "warn beyond this")->required();
  budgets_set->add_option("--hard-micros", budget_hard, "deny or ask beyond this")->required();
  budgets_set->add_option("--over", budget_over, "deny or approval")->capture_default_str();
  budgets_set->callback(
      [&] { rc = commands().SetBudget(budget_team, budget_soft, budget_hard, budget_over); });

  CLI::App* ledger = app.add_subcommand("ledger", "the append-only, hash-chained ledger");
  CLI::App* ledger_list = ledger->add_subcommand("list", "list entries in sequence order");
  int64_t after_seq = 0;
  int ledger_limit = 100;
  std::string subject;
  ledger_list->add_option("--after", after_seq, "entries after this sequence number");
  ledger_list->add_option("--limit", ledger_limit, "at most this many")->capture_default_str();
  ledger_list->add_option("--subject", subject, "only this subject, e.g. request/42");
  ledger_list->callback([&] { rc = commands().LedgerList(after_seq, ledger_limit, subject); });
  CLI::App* ledger_verify =
      ledger->add_subcommand("verify", "recompute the chain from genesis and check checkpoints");
  ledger->add_subcommand("checkpoints", "list the signed checkpoints")->callback([&] {
    rc = commands().LedgerCheckpoints();
  });
  std::string public_key;
  ledger_verify->add_option(
      "--public-key", public_key,
      "Ed25519 public key of the ledger (PEM) to check checkpoint signatures");
  int64_t from_checkpoint = 0;
  ledger_verify->add_option("--from-checkpoint", from_checkpoint,
                            "start at the checkpoint of this seq (its signature must verify)");
  ledger_verify->callback([&] {
    rc = commands().LedgerVerify(public_key.empty() ? global.ledger_public_key : public_key,
                                 from_checkpoint);
  });

  CLI::App* slo = app.add_subcommand("slo", "serving teams' latency objectives");
  CLI::App* slo_set = slo->add_subcommand("set", "declare or replace a service's SLO");
  std::string slo_team, slo_service, slo_pool;
  int64_t slo_target_ms = 0, slo_window = 300, slo_penalty = 0;
  slo_set->add_option("team", slo_team, "the serving team")->required();
  slo_set->add_option("service", slo_service, "the service, e.g. chat-api")->required();
  slo_set->add_option("--pool", slo_pool, "the pool it runs in")->required();
  slo_set->add_option("--p99-ms", slo_target_ms, "p99 latency target, ms")->required();
  slo_set->add_option("--window-seconds", slo_window, "evaluation window")->capture_default_str();
  slo_set
      ->add_option("--penalty-micros-per-minute", slo_penalty,
                   "cost of a minute of breach; 0: the team's reserved cost")
      ->capture_default_str();
  slo_set->callback([&] {
    rc = commands().SetSlo(slo_team, slo_service, slo_pool, slo_target_ms * 1000, slo_window,
                           slo_penalty);
  });
  std::string slo_list_team;
  CLI::App* slo_list = slo->add_subcommand("list", "SLOs");
  slo_list->add_option("--team", slo_list_team, "one team's");
  slo_list->callback([&] { rc = commands().ListSlos(slo_list_team); });

  CLI::App* latency = app.add_subcommand("latency", "latency windows from a serving platform");
  CLI::App* latency_report =
      latency->add_subcommand("report", "report one window; a breach becomes an incident");
  std::string lat_team, lat_service, lat_start;
  int64_t lat_window = 0, lat_p50_ms = 0, lat_p99_ms = 0, lat_rps = 0;
  latency_report->add_option("team", lat_team, "the serving team")->required();
  latency_report->add_option("service", lat_service, "the service")->required();
  latency_report->add_option("--start", lat_start, "window start: RFC 3339 or -<duration>")
      ->required();
  latency_report->add_option("--window-seconds", lat_window,
                             "the window's length; default: the SLO's window");
  latency_report->add_option("--p50-ms", lat_p50_ms, "p50, ms")->required();
  latency_report->add_option("--p99-ms", lat_p99_ms, "p99, ms")->required();
  latency_report->add_option("--rps", lat_rps, "requests per second");
  latency_report->callback([&] {
    rc = commands().ReportLatency(lat_team, lat_service, lat_start, lat_window, lat_p50_ms * 1000,
                                  lat_p99_ms * 1000, lat_rps * 1000);
  });

  std::string period_from = "-24h", period_to = "+0s", period_team, cb_format = "table", cb_out;
  CLI::App* incidents = app.add_subcommand("incidents", "SLO breaches and who was charged");
  CLI::App* incidents_list = incidents->add_subcommand("list", "incidents recorded in a period");
  incidents_list->add_option("--from", period_from, "RFC 3339 or -<duration>")
      ->capture_default_str();
  incidents_list->add_option("--to", period_to, "RFC 3339 or +/-<duration>")->capture_default_str();
  incidents_list->add_option("--team", period_team, "suffered or caused by this team");
  incidents_list->callback(
      [&] { rc = commands().ListIncidents(period_from, period_to, period_team); });

  CLI::App* chargeback = app.add_subcommand("chargeback", "per-team statements for finance");
  CLI::App* cb_show = chargeback->add_subcommand("show", "statements for a period (whole hours)");
  cb_show->add_option("--from", period_from, "RFC 3339 or -<duration>")->capture_default_str();
  cb_show->add_option("--to", period_to, "RFC 3339 or +/-<duration>")->capture_default_str();
  cb_show->add_option("--team", period_team, "one team's statement");
  cb_show->add_option("--format", cb_format, "table, json, csv, csv-lines or html")
      ->capture_default_str();
  cb_show->add_option("-o,--output", cb_out, "write to this file instead of stdout");
  cb_show->callback(
      [&] { rc = commands().Chargeback(period_from, period_to, period_team, cb_format, cb_out); });
  CLI::App* cb_close =
      chargeback->add_subcommand("close", "freeze an ended period; its hash goes into the ledger");
  cb_close->add_option("--from", period_from, "RFC 3339")->required();
  cb_close->add_option("--to", period_to, "RFC 3339")->required();
  cb_close->callback([&] { rc = commands().ClosePeriod(period_from, period_to); });

  CLI::App* usage = app.add_subcommand("usage", "allocated vs used GPU-hours (telemetry)");
  usage->add_option("--from", period_from, "RFC 3339 or -<duration>")->capture_default_str();
  usage->add_option("--to", period_to, "RFC 3339 or +/-<duration>")->capture_default_str();
  usage->add_option("--team", period_team, "one team's");
  usage->callback([&] { rc = commands().Usage(period_from, period_to, period_team); });
  CLI::App* rightsize =
      app.add_subcommand("rightsize", "smaller forms that would carry the observed peaks");
  rightsize->add_option("--from", period_from, "RFC 3339 or -<duration>")->capture_default_str();
  rightsize->add_option("--to", period_to, "RFC 3339 or +/-<duration>")->capture_default_str();
  rightsize->add_option("--team", period_team, "one team's");
  rightsize->callback([&] { rc = commands().RightSize(period_from, period_to, period_team); });
  CLI::App* idle = app.add_subcommand("idle", "idle allocations and the policies per class");
  idle->add_subcommand("list", "live allocations idle now")->callback([&] {
    rc = commands().ListIdle();
  });
  idle->add_subcommand("policies", "the idle policy of every class")->callback([&] {
    rc = commands().ListIdlePolicies();
  });
  CLI::App* idle_set = idle->add_subcommand("set-policy", "replace a class's idle policy");
  std::string idle_class, idle_action;
  int32_t idle_threshold = 50;
  int64_t idle_window = 3600, idle_notice = 900;
  idle_set->add_option("class", idle_class, "training, inference, batch_analytics, ...")
      ->required();
  idle_set->add_option("--under-milli", idle_threshold, "idle: busy under this (1000 = 100%)")
      ->capture_default_str();
  idle_set->add_option("--for-seconds", idle_window, "for this long")->capture_default_str();
  idle_set->add_option("--action", idle_action, "report, notify or release")->required();
  idle_set->add_option("--notice-seconds", idle_notice, "before a release")->capture_default_str();
  idle_set->callback([&] {
    rc =
        commands().SetIdlePolicy(idle_class, idle_threshold, idle_window, idle_action, idle_notice);
  });

  CLI::App* export_cmd = app.add_subcommand("export", "governance for other systems");
  std::string queue_name = "gpu";
  CLI::App* export_kueue = export_cmd->add_subcommand(
      "kueue",
      "Kueue objects (YAML) enforcing Arbiter's teams, cohorts and quotas\n  e.g. arbctl "
      "export kueue | kubectl apply -f -");
  export_kueue->add_option("--queue-name", queue_name, "name of each team's LocalQueue")
      ->capture_default_str();
  export_kueue->callback([&] { rc = commands().ExportKueue(queue_name); });

  CLI::App* telemetry = app.add_subcommand("telemetry", "GPU readings (the agent sends these)");
  arbiter::arbctl::Commands::SampleOptions sample;
  CLI::App* send = telemetry->add_subcommand(
      "send",
      "send one GPU reading by hand\n  e.g. arbctl telemetry send --cluster east --node "
      "h100-0 --gpu 0 --util-milli 730");
  send->add_option("--cluster", sample.cluster, "cluster")->required();
  send->add_option("--node", sample.node, "node name")->required();
  send->add_option("--gpu", sample.gpu_index, "GPU index")->capture_default_str();
  send->add_option("--uuid", sample.uuid, "GPU UUID (instead of the index)");
  send->add_option("--util-milli", sample.util_milli, "busy, 0..1000");
  send->add_option("--memory-used-mib", sample.fb_used_mib, "framebuffer used, MiB");
  send->add_option("--power-mw", sample.power_mw, "power, milliwatts");
  send->add_option("--interval-seconds", sample.interval_seconds, "the reading's interval")
      ->capture_default_str();
  send->add_option("--pod", sample.pod, "pod using the GPU");
  send->add_option("--namespace", sample.pod_namespace, "its namespace");
  send->callback([&] { rc = commands().SendSample(sample); });

  CLI::App* demo = app.add_subcommand("demo", "demo data");
  demo->add_subcommand("load", "load the demo organisation (idempotent)")->callback([&] {
    rc = commands().LoadDemo();
  });
  for (CLI::App* group : {models, clusters, pools, inventory, teams, quotas, requests, demo, slo,
                          latency, incidents, chargeback, idle}) {
    group->require_subcommand(1);
  }

  std::string shell;
  CLI::App* completion = app.add_subcommand(
      "completion", "print a shell completion script\n  e.g. source <(arbctl completion bash)");
  completion->add_option("shell", shell, "bash or zsh")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh"}));
  completion->callback([&] { std::cout << CompletionScript(app, shell); });

  CLI11_PARSE(app, argc, argv);
  return rc;
}
