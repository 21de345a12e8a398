// arbiter-ledger-fill: a long ledger for bench/ledger-verify. Writes
// --entries hash-chained entries (request admissions and releases, spread
// over the year before --until) to standard output as PostgreSQL COPY text
// for the `ledger` table, and a checkpoint signed with --key every
// --checkpoint-every entries as COPY text for `ledger_checkpoints` to
// --checkpoints. The chain continues from --after-seq/--after-hash (the
// ledger's head when it is not empty), so arbiterd and arbctl verify it as
// they verify their own.
//
//   arbiter-ledger-fill --entries 10000000 --key ledger.key
//       --checkpoints checkpoints.copy | psql -c "COPY ledger FROM STDIN"
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

#include "ledger/chain.h"

namespace {

struct Options {
  int64_t entries = 1'000'000;
  int64_t checkpoint_every = 1000;
  std::string key_file;
  std::string checkpoints_file;
  int64_t after_seq = 0;
  std::string after_hash = arbiter::ledger::kGenesisHash;
  int64_t until_unix = 0;  // 0: now.
};

std::string CopyTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%E6S+00", t, absl::UTCTimeZone());
}

// Entry `seq`: request (seq + 1) / 2 admitted, then released.
arbiter::ledger::Entry EntryAt(int64_t seq, absl::Time at) {
  arbiter::ledger::Entry e;
  e.seq = seq;
  e.at = at;
  const int64_t request = (seq + 1) / 2;
  const bool admitted = seq % 2 == 1;
  e.actor = admitted ? "spiffe://arbiter.local/load" : "arbiter";
  e.action = admitted ? "request.admitted" : "request.released";
  e.subject = absl::StrCat("request/", request);
  e.payload = arbiter::ledger::Payload({{"team", absl::StrCat("team-", request % 16)},
                                        {"pool", "pool-0"},
                                        {"gpu_milli", absl::StrCat(1000 * (1 + request % 4))}});
  return e;
}

int Fill(const Options& o) {
  std::ifstream key_in(o.key_file);
  std::stringstream key;
  key << key_in.rdbuf();
  if (key.str().empty()) {
    std::cerr << "arbiter-ledger-fill: cannot read --key " << o.key_file << "\n";
    return 2;
  }
  std::ofstream checkpoints(o.checkpoints_file);
  if (!checkpoints) {
    std::cerr << "arbiter-ledger-fill: cannot write --checkpoints " << o.checkpoints_file << "\n";
    return 2;
  }
  const absl::Time until =
      o.until_unix > 0 ? absl::FromUnixSeconds(o.until_unix) : absl::Now() - absl::Hours(1);
  const absl::Duration step = absl::Hours(24 * 365) / std::max<int64_t>(1, o.entries);
  std::string prev = o.after_hash;
  std::string line;
  for (int64_t i = 1; i <= o.entries; ++i) {
    const int64_t seq = o.after_seq + i;
    arbiter::ledger::Entry e =
        EntryAt(seq, absl::FromUnixMicros(absl::ToUnixMicros(until - step * (o.entries - i))));
    e.prev_hash = prev;
    e.hash = arbiter::ledger::HashOf(prev, e);
    // No field holds a tab, newline or backslash: COPY text as it is.
    line.clear();
    absl::StrAppend(&line, e.seq, "\t", CopyTime(e.at), "\t", e.actor, "\t", e.action, "\t",
                    e.subject, "\t", e.payload, "\t", e.prev_hash, "\t", e.hash, "\n");
    std::fwrite(line.data(), 1, line.size(), stdout);
    if (seq % o.checkpoint_every == 0) {
      absl::StatusOr<std::string> signature =
          arbiter::ledger::Sign(key.str(), arbiter::ledger::CheckpointMessage(seq, e.hash));
      if (!signature.ok()) {
        std::cerr << "arbiter-ledger-fill: " << signature.status().message() << "\n";
        return 2;
      }
      checkpoints << seq << "\t" << e.hash << "\t" << *signature << "\t" << CopyTime(e.at) << "\n";
    }
    prev = std::move(e.hash);
  }
  std::fflush(stdout);
  std::cerr << "arbiter-ledger-fill: " << o.entries << " entries after seq " << o.after_seq
            << ", head hash " << prev << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("arbiter-ledger-fill: a long hash-chained ledger as COPY text");
  app.add_option("--entries", o.entries, "entries to write")->capture_default_str();
  app.add_option("--checkpoint-every", o.checkpoint_every, "a signed checkpoint every N entries")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--key", o.key_file, "the ledger's Ed25519 private key (PEM)")->required();
  app.add_option("--checkpoints", o.checkpoints_file, "where the checkpoints' COPY text goes")
      ->required();
  app.add_option("--after-seq", o.after_seq, "the head the chain continues from");
  app.add_option("--after-hash", o.after_hash, "the head's hash");
  app.add_option("--until", o.until_unix, "the last entry's time, Unix seconds (default: now)");
  CLI11_PARSE(app, argc, argv);
  return Fill(o);
}
