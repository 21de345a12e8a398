// arbctl ledger list | verify | checkpoints.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/time_util.h>

#include "clients/arbctl/commands.h"
#include "clients/arbctl/table.h"
#include "ledger/archive.h"
#include "ledger/chain.h"

namespace arbiter::arbctl {
namespace {

// Entries verified at a time: a page of ListLedgerEntries, or of an archive
// file.
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

// A verification under way: the verdict so far, the hashes of the
// checkpointed entries it has passed, and where its entries came from.
struct LedgerWalk {
  ledger::Verdict verdict;
  std::map<int64_t, std::string> hash_at;  // Checkpointed seq -> its entry's hash.
  int archive_files = 0;
  int64_t archived = 0;          // Entries verified from the archive files.
  int64_t first_stored_seq = 0;  // The server's first entry after the start; 0: none.
  std::string where;             // The archive file and line of the break; "" when none.

  // Continues the verdict with `page`. The index in `page` of the entry it
  // stopped at (page.size() when it did not).
  size_t Add(const std::vector<ledger::Entry>& page) {
    for (const ledger::Entry& e : page) {
      auto checkpointed = hash_at.find(e.seq);
      if (checkpointed != hash_at.end()) checkpointed->second = e.hash;
    }
    const int64_t before = verdict.count;
    ledger::Continue(verdict, page);
    return verdict.ok ? page.size() : static_cast<size_t>(verdict.count - before);
  }
};

namespace {

// Reads the --public-key file ("" for none); false (after printing why)
// when it cannot be read.
bool ReadPublicKey(const std::string& file, std::string* key) {
  if (file.empty()) return true;
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  if (!in.good() && text.str().empty()) {
    std::cerr << "arbctl: cannot read --public-key " << file << "\n";
    return false;
  }
  *key = text.str();
  return true;
}

// Where a verification starts: genesis, or a signed checkpoint.
struct ChainStart {
  int64_t seq = 0;
  std::string hash = ledger::kGenesisHash;
};

// The start `from_checkpoint` names (see LedgerVerify): 0, or after
// printing why, 2 (no such checkpoint, or no key to trust it) or 3 (its
// signature does not verify).
int FindStart(const v1::ListCheckpointsResponse& checkpoints, const std::string& public_key,
              int64_t from_checkpoint, ChainStart* start) {
  if (from_checkpoint == kLatestCheckpoint) {
    from_checkpoint = 0;  // None yet: from genesis.
    for (const v1::LedgerCheckpoint& c : checkpoints.checkpoints()) {
      from_checkpoint = std::max(from_checkpoint, c.seq());
    }
  }
  if (from_checkpoint <= 0) return 0;
  const v1::LedgerCheckpoint* found = nullptr;
  for (const v1::LedgerCheckpoint& c : checkpoints.checkpoints()) {
    if (c.seq() == from_checkpoint) found = &c;
  }
  if (found == nullptr) {
    std::cerr << "arbctl: no checkpoint at seq " << from_checkpoint << "\n";
    return 2;
  }
  if (public_key.empty()) {
    std::cerr << "arbctl: starting from a checkpoint needs --public-key to trust it\n";
    return 2;
  }
  absl::Status signed_ok = ledger::VerifySignature(
      public_key, ledger::CheckpointMessage(found->seq(), found->hash()), found->signature());
  if (!signed_ok.ok()) {
    std::cout << "BAD at seq " << found->seq() << ": " << signed_ok.message() << "\n";
    return 3;
  }
  start->seq = found->seq();
  start->hash = found->hash();
  return 0;
}

// Reads an archive file (ledger/archive.h) an entry at a time. Errors are
// INVALID_ARGUMENT naming the file and line.
class ArchiveReader {
 public:
  // Opens `path` and reads its header.
  static absl::StatusOr<std::unique_ptr<ArchiveReader>> Open(const std::string& path) {
    auto reader = std::unique_ptr<ArchiveReader>(new ArchiveReader(path));
    if (!reader->in_.is_open()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": cannot open it: ", strerror(errno)));
    }
    absl::StatusOr<std::string> header = reader->NextLine();
    if (!header.ok()) return header.status();
    if (*header != ledger::kArchiveHeader) {
      return reader->Error(absl::StrCat("not a ledger archive: the first line is not \"",
                                        ledger::kArchiveHeader, "\""));
    }
    return reader;
  }

  // The next entry; nullopt at the end of the file.
  absl::StatusOr<std::optional<ledger::Entry>> Next() {
    absl::StatusOr<std::string> line = NextLine();
    if (!line.ok()) return line.status();
    if (at_end_) return std::nullopt;
    absl::StatusOr<ledger::Entry> entry = ledger::ParseArchiveLine(*line);
    if (!entry.ok()) return Error(entry.status().message());
    return *std::move(entry);
  }

  // The line Next read last (1: the header).
  int64_t line() const { return line_; }

 private:
  explicit ArchiveReader(std::string path) : path_(std::move(path)), in_(path_) {}

  // The next line without its line feed; at_end_ after the last.
  absl::StatusOr<std::string> NextLine() {
    std::string text;
    if (!std::getline(in_, text)) {
      if (in_.bad()) return Error("cannot read it");
      if (line_ == 0) return Error("empty: no header line");
      at_end_ = true;
      return text;
    }
    ++line_;
    if (in_.eof()) return Error("no line feed at its end (a truncated file?)");
    return text;
  }

  absl::Status Error(absl::string_view problem) const {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, " line ", std::max<int64_t>(line_, 1), ": ", problem));
  }

  std::string path_;
  std::ifstream in_;
  int64_t line_ = 0;
  bool at_end_ = false;
};

// An archive file, and the seq of its first entry (0: it has none).
struct ArchiveFile {
  std::string path;
  int64_t first_seq = 0;
};

// The "*.ledger" regular files in `dir`, ordered by the seq of their first
// entry. INVALID_ARGUMENT (naming the file and line) for one that cannot be
// read, has no archive header or a first entry that does not parse. None
// is an empty archive (nothing retired yet): the database's entries are
// then verified from genesis.
absl::StatusOr<std::vector<ArchiveFile>> ListArchive(const std::string& dir) {
  std::vector<ArchiveFile> files;
  std::error_code error;
  std::filesystem::directory_iterator it(dir, error);
  for (; !error && it != std::filesystem::directory_iterator(); it.increment(error)) {
    if (!absl::EndsWith(it->path().filename().string(), ".ledger")) continue;
    if (!it->is_regular_file(error)) continue;
    const std::string path = it->path().string();
    absl::StatusOr<std::unique_ptr<ArchiveReader>> reader = ArchiveReader::Open(path);
    if (!reader.ok()) return reader.status();
    absl::StatusOr<std::optional<ledger::Entry>> first = (*reader)->Next();
    if (!first.ok()) return first.status();
    files.push_back({path, first->has_value() ? (*first)->seq : 0});
  }
  if (error) {
    return absl::InvalidArgumentError(absl::StrCat("--archive ", dir, ": ", error.message()));
  }
  std::sort(files.begin(), files.end(), [](const ArchiveFile& a, const ArchiveFile& b) {
    return std::tie(a.first_seq, a.path) < std::tie(b.first_seq, b.path);
  });
  return files;
}

// Continues `walk` with one archive file, a page at a time. Reading errors
// as ListArchive's; a break is left in the walk, with its file and line.
absl::Status VerifyArchiveFile(const std::string& path, LedgerWalk& walk) {
  absl::StatusOr<std::unique_ptr<ArchiveReader>> reader = ArchiveReader::Open(path);
  if (!reader.ok()) return reader.status();
  std::vector<ledger::Entry> page;
  std::vector<int64_t> lines;  // Where page[i] was read.
  for (;;) {
    absl::StatusOr<std::optional<ledger::Entry>> entry = (*reader)->Next();
    // A full page, the end, or a bad line: verify what was read (a break
    // before a bad line is the first problem).
    if (!entry.ok() || !entry->has_value() || page.size() == static_cast<size_t>(kVerifyPage)) {
      const size_t stopped = walk.Add(page);
      if (stopped < page.size()) {
        walk.where = absl::StrCat(path, " line ", lines[stopped]);
        return absl::OkStatus();
      }
      if (!entry.ok()) return entry.status();
      if (!entry->has_value()) return absl::OkStatus();
      page.clear();
      lines.clear();
    }
    page.push_back(**std::move(entry));
    lines.push_back((*reader)->line());
  }
}

// Continues `walk` through `files` in order, up to a break. Reading errors
// as VerifyArchiveFile's.
absl::Status VerifyArchive(const std::vector<ArchiveFile>& files, LedgerWalk& walk) {
  for (const ArchiveFile& file : files) {
    if (absl::Status read = VerifyArchiveFile(file.path, walk); !read.ok()) return read;
    if (!walk.verdict.ok) break;
    ++walk.archive_files;
  }
  walk.archived = walk.verdict.count;
  return absl::OkStatus();
}

// A walk from `start`, expecting the entries of the checkpoints after it.
LedgerWalk StartWalk(const v1::ListCheckpointsResponse& checkpoints, const ChainStart& start) {
  LedgerWalk walk;
  walk.verdict = ledger::VerifyChain({}, start.seq, start.hash);
  for (const v1::LedgerCheckpoint& c : checkpoints.checkpoints()) {
    if (c.seq() >= start.seq) walk.hash_at[c.seq()] = "";
  }
  if (start.seq > 0) walk.hash_at[start.seq] = start.hash;
  return walk;
}

// The problem with `walk`'s chain, and a hint where entries seem to have
// been archived; returns the exit code, 3.
int ReportBreak(const LedgerWalk& walk, const ChainStart& start, bool with_archive) {
  std::cout << "BAD at seq " << walk.verdict.first_bad_seq << ": " << walk.verdict.problem << "\n"
            << "(entries 1.." << walk.verdict.head_seq << " verify)\n";
  if (!walk.where.empty()) std::cout << "(at " << walk.where << ")\n";
  if (!with_archive && start.seq == 0 && walk.first_stored_seq > 1) {
    std::cout << "entries 1.." << walk.first_stored_seq - 1
              << " are not in the database (archived?): pass --archive DIR with the archive "
                 "files\n";
  }
  return 3;
}

// Each checkpoint from `start_seq` on names an entry the walk passed, with
// that hash, and (with a key) is signed by the ledger key. 0, or 3 after
// printing the first that is not.
int CheckCheckpoints(const v1::ListCheckpointsResponse& checkpoints, int64_t start_seq,
                     const std::map<int64_t, std::string>& hash_at, const std::string& public_key) {
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
  return 0;
}

void PrintOk(const LedgerWalk& walk, const ChainStart& start, bool with_archive,
             int checkpoint_count, bool signatures_checked) {
  std::cout << "OK: " << walk.verdict.count << " entries"
            << (with_archive ? absl::StrCat(" (", walk.archived, " from ", walk.archive_files,
                                            " archive file(s))")
                             : std::string())
            << (start.seq > 0 ? absl::StrCat(" after checkpoint ", start.seq) : std::string())
            << ", head seq " << walk.verdict.head_seq << " hash " << walk.verdict.head_hash << "; "
            << checkpoint_count << " checkpoint(s) "
            << (signatures_checked ? "match the chain and are signed by the ledger key"
                                   : "match the chain (signatures not checked: no --public-key)")
            << "\n";
}

}  // namespace

bool Commands::VerifyStoredEntries(LedgerWalk& walk) const {
  int64_t after = walk.verdict.head_seq;
  for (;;) {
    v1::ListLedgerEntriesRequest req;
    req.set_after_seq(after);
    req.set_page_size(kVerifyPage);
    v1::ListLedgerEntriesResponse resp;
    if (!Call(ledger_, &v1::LedgerService::Stub::ListLedgerEntries, req, &resp)) return false;
    std::vector<ledger::Entry> page;
    for (const v1::LedgerEntry& e : resp.entries()) page.push_back(FromProto(e));
    if (walk.first_stored_seq == 0 && !page.empty()) walk.first_stored_seq = page.front().seq;
    walk.Add(page);
    if (!walk.verdict.ok || resp.next_after_seq() == 0) return true;
    after = resp.next_after_seq();
  }
}

int Commands::LedgerVerify(const std::string& public_key_file, int64_t from_checkpoint,
                           const std::string& archive_dir) {
  const bool with_archive = !archive_dir.empty();
  if (with_archive && from_checkpoint != 0) {
    std::cerr << "arbctl: --archive verifies from genesis: it excludes --from-checkpoint and "
                 "--from-latest-checkpoint\n";
    return 2;
  }
  std::string public_key;
  if (!ReadPublicKey(public_key_file, &public_key)) return 2;
  std::vector<ArchiveFile> files;
  if (with_archive) {
    absl::StatusOr<std::vector<ArchiveFile>> listed = ListArchive(archive_dir);
    if (!listed.ok()) {
      std::cerr << "arbctl: " << listed.status().message() << "\n";
      return 2;
    }
    files = *std::move(listed);
  }
  // The checkpoints first: a verification may start from one.
  v1::ListCheckpointsResponse checkpoints;
  if (!AllCheckpoints(&checkpoints)) return 1;
  ChainStart start;
  if (int code = FindStart(checkpoints, public_key, from_checkpoint, &start); code != 0) {
    return code;
  }
  // The chain, page by page, from genesis or the checkpoint, through the
  // archive files and on into the server's entries, in memory that does not
  // grow with it: one page, and the hashes of the checkpoints' entries.
  LedgerWalk walk = StartWalk(checkpoints, start);
  if (absl::Status read = VerifyArchive(files, walk); !read.ok()) {
    std::cerr << "arbctl: " << read.message() << "\n";
    return 2;
  }
  if (walk.verdict.ok && !VerifyStoredEntries(walk)) return 1;
  if (!walk.verdict.ok) return ReportBreak(walk, start, with_archive);
  if (int code = CheckCheckpoints(checkpoints, start.seq, walk.hash_at, public_key); code != 0) {
    return code;
  }
  PrintOk(walk, start, with_archive, checkpoints.checkpoints_size(), !public_key.empty());
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
