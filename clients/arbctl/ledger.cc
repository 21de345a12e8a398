// arbctl ledger list | verify.
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/time_util.h>

#include "clients/arbctl/commands.h"
#include "clients/arbctl/table.h"
#include "ledger/chain.h"

namespace arbiter::arbctl {
namespace {

constexpr int kVerifyPage = 5000;

ledger::Entry FromProto(const v1::LedgerEntry& e) {
  ledger::Entry out;
  out.seq = e.seq();
  out.at = absl::FromUnixMicros(google::protobuf::util::TimeUtil::TimestampToMicroseconds(e.at()));
  out.actor = e.actor();
  out.action = e.action();
  out.subject = e.subject();
  out.payload = e.payload();
  out.prev_hash = e.prev_hash();
  out.hash = e.hash();
  return out;
}

}  // namespace

int Commands::LedgerList(int64_t after_seq, int limit, const std::string& subject) {
  v1::ListLedgerEntriesRequest req;
  req.set_after_seq(after_seq);
  req.set_page_size(limit);
  req.set_subject(subject);
  v1::ListLedgerEntriesResponse resp;
  if (!Call(ledger_, &v1::LedgerService::Stub::ListLedgerEntries, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  Table t({"SEQ", "AT", "ACTOR", "ACTION", "SUBJECT", "PAYLOAD"});
  for (const v1::LedgerEntry& e : resp.entries()) {
    t.AddRow({absl::StrCat(e.seq()), google::protobuf::util::TimeUtil::ToString(e.at()), e.actor(),
              e.action(), e.subject(), e.payload()});
  }
  PrintTable(t);
  return 0;
}

bool Commands::AllCheckpoints(v1::ListCheckpointsResponse* out) const {
  v1::ListCheckpointsRequest req;
  req.set_page_size(10000);
  for (;;) {
    v1::ListCheckpointsResponse page;
    if (!Call(ledger_, &v1::LedgerService::Stub::ListCheckpoints, req, &page)) return false;
    for (v1::LedgerCheckpoint& c : *page.mutable_checkpoints()) {
      *out->add_checkpoints() = std::move(c);
    }
    if (page.next_after_seq() == 0) return true;
    req.set_after_seq(page.next_after_seq());
  }
}

int Commands::LedgerVerify(const std::string& public_key_file, int64_t from_checkpoint) {
  std::string public_key;
  if (!public_key_file.empty()) {
    std::ifstream in(public_key_file);
    std::stringstream text;
    text << in.rdbuf();
    if (!in.good() && text.str().empty()) {
      std::cerr << "arbctl: cannot read --public-key " << public_key_file << "\n";
      return 2;
    }
    public_key = text.str();
  }
  // The checkpoints first: a verification may start from one.
  v1::ListCheckpointsResponse checkpoints;
  if (!AllCheckpoints(&checkpoints)) return 1;
  int64_t start_seq = 0;
  std::string start_hash = ledger::kGenesisHash;
  if (from_checkpoint == kLatestCheckpoint && checkpoints.checkpoints_size() > 0) {
    for (const v1::LedgerCheckpoint& c : checkpoints.checkpoints()) {
      from_checkpoint = std::max(from_checkpoint, c.seq());
    }
  }
  if (from_checkpoint == kLatestCheckpoint) from_checkpoint = 0;  // None yet: from genesis.
  if (from_checkpoint > 0) {
    const v1::LedgerCheckpoint* start = nullptr;
    for (const v1::LedgerCheckpoint& c : checkpoints.checkpoints()) {
      if (c.seq() == from_checkpoint) start = &c;
    }
    if (start == nullptr) {
      std::cerr << "arbctl: no checkpoint at seq " << from_checkpoint << "\n";
      return 2;
    }
    if (public_key.empty()) {
      std::cerr << "arbctl: starting from a checkpoint needs --public-key to trust it\n";
      return 2;
    }
    absl::Status signed_ok = ledger::VerifySignature(
        public_key, ledger::CheckpointMessage(start->seq(), start->hash()), start->signature());
    if (!signed_ok.ok()) {
      std::cout << "BAD at seq " << start->seq() << ": " << signed_ok.message() << "\n";
      return 3;
    }
    start_seq = start->seq();
    start_hash = start->hash();
  }
  // The chain, page by page, from genesis or the checkpoint, in memory that
  // does not grow with it: one page, and the hashes of the checkpoints'
  // entries.
  ledger::Verdict verdict = ledger::VerifyChain({}, start_seq, start_hash);
  std::map<int64_t, std::string> hash_at;  // Checkpointed seq -> its entry's hash.
  for (const v1::LedgerCheckpoint& c : checkpoints.checkpoints()) {
    if (c.seq() >= start_seq) hash_at[c.seq()] = "";
  }
  if (start_seq > 0) hash_at[start_seq] = start_hash;
  int64_t after = start_seq;
  for (;;) {
    v1::ListLedgerEntriesRequest req;
    req.set_after_seq(after);
    req.set_page_size(kVerifyPage);
    v1::ListLedgerEntriesResponse resp;
    if (!Call(ledger_, &v1::LedgerService::Stub::ListLedgerEntries, req, &resp)) return 1;
    std::vector<ledger::Entry> page;
    for (const v1::LedgerEntry& e : resp.entries()) {
      page.push_back(FromProto(e));
      auto checkpointed = hash_at.find(e.seq());
      if (checkpointed != hash_at.end()) checkpointed->second = e.hash();
    }
    ledger::Continue(verdict, page);
    if (!verdict.ok || resp.next_after_seq() == 0) break;
    after = resp.next_after_seq();
  }
  if (!verdict.ok) {
    std::cout << "BAD at seq " << verdict.first_bad_seq << ": " << verdict.problem << "\n"
              << "(entries 1.." << verdict.head_seq << " verify)\n";
    return 3;
  }
  // Checkpoints: each names an entry that exists with that hash, and is
  // signed by the ledger key.
  for (const v1::LedgerCheckpoint& c : checkpoints.checkpoints()) {
    if (c.seq() < start_seq) continue;
    auto it = hash_at.find(c.seq());
    if (it == hash_at.end() || it->second.empty() || it->second != c.hash()) {
      std::cout << "BAD at seq " << c.seq() << ": the checkpoint of entry " << c.seq()
                << " does not match the chain (entries removed or rewritten)\n";
      return 3;
    }
    if (!public_key.empty()) {
      absl::Status signed_ok = ledger::VerifySignature(
          public_key, ledger::CheckpointMessage(c.seq(), c.hash()), c.signature());
      if (!signed_ok.ok()) {
        std::cout << "BAD at seq " << c.seq() << ": " << signed_ok.message() << "\n";
        return 3;
      }
    }
  }
  std::cout << "OK: " << verdict.count << " entries"
            << (start_seq > 0 ? absl::StrCat(" after checkpoint ", start_seq) : std::string())
            << ", head seq " << verdict.head_seq << " hash " << verdict.head_hash << "; "
            << checkpoints.checkpoints_size() << " checkpoint(s) "
            << (public_key.empty() ? "match the chain (signatures not checked: no --public-key)"
                                   : "match the chain and are signed by the ledger key")
            << "\n";
  return 0;
}

int Commands::LedgerCheckpoints() {
  v1::ListCheckpointsResponse resp;
  if (!AllCheckpoints(&resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  Table t({"SEQ", "AT", "HASH", "SIGNATURE"});
  for (const v1::LedgerCheckpoint& c : resp.checkpoints()) {
    t.AddRow({absl::StrCat(c.seq()), google::protobuf::util::TimeUtil::ToString(c.at()), c.hash(),
              c.signature().substr(0, 16) + "..."});
  }
  PrintTable(t);
  return 0;
}

}  // namespace arbiter::arbctl
