// arbctl ledger list | verify | checkpoints: reading the append-only,
// hash-chained ledger and checking that nobody rewrote it. The calls are in
// ledger.cc.
#include <cstdint>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "clients/arbctl/cli.h"

namespace arbiter::arbctl {
namespace {

struct ListFlags {
  int64_t after_seq = 0;
  int limit = 100;
  std::string subject;
};

struct VerifyFlags {
  std::string public_key;  // Empty: the configured ledger_public_key.
  int64_t from_checkpoint = 0;
  bool from_latest = false;
  std::string archive;  // Empty: the database's entries only.
};

}  // namespace

void RegisterLedgerCommands(CLI::App& root, CliContext& ctx) {
  CLI::App* ledger = root.add_subcommand("ledger", "the append-only, hash-chained ledger");
  auto list_flags = std::make_shared<ListFlags>();
  CLI::App* list = ledger->add_subcommand("list", "list entries in sequence order");
  list->add_option("--after", list_flags->after_seq, "entries after this sequence number")
      ->check(CLI::NonNegativeNumber);
  list->add_option("--limit", list_flags->limit, "at most this many")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  list->add_option("--subject", list_flags->subject, "only this subject, e.g. request/42");
  list->callback([&ctx, list_flags] {
    ctx.exit_code =
        ctx.Connect().LedgerList(list_flags->after_seq, list_flags->limit, list_flags->subject);
  });
  CLI::App* verify =
      ledger->add_subcommand("verify", "recompute the chain from genesis and check checkpoints");
  ledger->add_subcommand("checkpoints", "list the signed checkpoints")->callback([&ctx] {
    ctx.exit_code = ctx.Connect().LedgerCheckpoints();
  });
  auto verify_flags = std::make_shared<VerifyFlags>();
  verify->add_option("--public-key", verify_flags->public_key,
                     "Ed25519 public key of the ledger (PEM) to check checkpoint signatures");
  CLI::Option* from_checkpoint =
      verify
          ->add_option("--from-checkpoint", verify_flags->from_checkpoint,
                       "start at the checkpoint of this seq (its signature must verify)")
          ->check(CLI::PositiveNumber);
  CLI::Option* from_latest =
      verify->add_flag("--from-latest-checkpoint", verify_flags->from_latest,
                       "start at the newest checkpoint (its signature must verify): what was "
                       "appended since it was signed");
  verify
      ->add_option("--archive", verify_flags->archive,
                   "directory of the ledger's archive files (*.ledger, from arbiterd "
                   "archive-ledger): verify from genesis through them into the entries the "
                   "database still holds")
      ->check(CLI::ExistingDirectory)
      ->excludes(from_checkpoint)
      ->excludes(from_latest);
  verify->callback([&ctx, verify_flags] {
    const std::string& key =
        verify_flags->public_key.empty() ? ctx.global.ledger_public_key : verify_flags->public_key;
    ctx.exit_code = ctx.Connect().LedgerVerify(
        key, verify_flags->from_latest ? kLatestCheckpoint : verify_flags->from_checkpoint,
        verify_flags->archive);
  });
}

}  // namespace arbiter::arbctl
