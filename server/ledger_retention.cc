#include "server/ledger_retention.h"

#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/civil_time.h"
#include <fcntl.h>
#include <unistd.h>

#include "core/status_macros.h"
#include "ledger/archive.h"
#include "ledger/chain.h"

namespace arbiter::server {
namespace {

constexpr int kPage = 10000;

absl::Status ErrnoStatus(const std::string& what, int err) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(err));
  if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(message);
  if (err == EACCES || err == EPERM || err == EROFS) return absl::PermissionDeniedError(message);
  return absl::InternalError(message);
}

// A file written whole, then flushed and renamed into place; removed if
// not committed.
class AtomicFile {
 public:
  static absl::StatusOr<std::unique_ptr<AtomicFile>> Create(std::string path) {
    const std::string partial = path + ".partial";
    const int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoStatus(absl::StrCat("cannot create ", partial), errno);
    return std::unique_ptr<AtomicFile>(new AtomicFile(std::move(path), partial, fd));
  }
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(partial_.c_str());
  }

  absl::Status Append(absl::string_view text) {
    buffer_.append(text.data(), text.size());
    return buffer_.size() >= (1 << 20) ? Flush() : absl::OkStatus();
  }

  // Flushes to disk, renames into place and flushes the directory.
  absl::Status Commit(const std::string& dir) {
    ARBITER_RETURN_IF_ERROR(Flush());
    if (::fsync(fd_) != 0) return ErrnoStatus(absl::StrCat("cannot flush ", partial_), errno);
    ::close(fd_);
    fd_ = -1;
    if (::rename(partial_.c_str(), path_.c_str()) != 0) {
      return ErrnoStatus(absl::StrCat("cannot rename ", partial_), errno);
    }
    committed_ = true;
    const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) return ErrnoStatus(absl::StrCat("cannot open ", dir), errno);
    const int synced = ::fsync(dir_fd);
    ::close(dir_fd);
    if (synced != 0) return ErrnoStatus(absl::StrCat("cannot flush ", dir), errno);
    return absl::OkStatus();
  }

 private:
  AtomicFile(std::string path, std::string partial, int fd)
      : path_(std::move(path)), partial_(std::move(partial)), fd_(fd) {}

  absl::Status Flush() {
    size_t done = 0;
    while (done < buffer_.size()) {
      const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoStatus(absl::StrCat("cannot write ", partial_), errno);
      done += static_cast<size_t>(n);
    }
    buffer_.clear();
    return absl::OkStatus();
  }

  const std::string path_;
  const std::string partial_;
  int fd_;
  bool committed_ = false;
  std::string buffer_;
};

// The first day of the UTC month `months` before the month of `t`.
absl::Time MonthsBefore(absl::Time t, int months) {
  const absl::CivilMonth month = absl::ToCivilMonth(t, absl::UTCTimeZone()) - months;
  return absl::FromCivil(month, absl::UTCTimeZone());
}

// The chain link the next archive continues: the last archived entry, or
// genesis.
std::pair<int64_t, std::string> ArchivedHead(const std::vector<store::LedgerPartition>& all) {
  std::pair<int64_t, std::string> head{0, ledger::kGenesisHash};
  for (const store::LedgerPartition& p : all) {
    if (p.archived && p.last_seq > head.first) head = {p.last_seq, p.last_hash};
  }
  return head;
}

// Writes the entries of `partition` to `path`, verifying that they chain
// from `head`, which advances to the last one.
absl::StatusOr<store::ExportedPartition> Export(store::LedgerArchiveStore& store,
                                                const store::LedgerPartition& partition,
                                                const std::string& dir, const std::string& path,
                                                std::pair<int64_t, std::string>& head) {
  ARBITER_ASSIGN_OR_RETURN(std::unique_ptr<AtomicFile> file, AtomicFile::Create(path));
  ARBITER_RETURN_IF_ERROR(file->Append(absl::StrCat(ledger::kArchiveHeader, "\n")));
  store::ExportedPartition exported;
  exported.file = path;
  ledger::Verdict verdict = ledger::VerifyChain({}, head.first, head.second);
  int64_t after = 0;
  for (;;) {
    ARBITER_ASSIGN_OR_RETURN(std::vector<ledger::Entry> page,
                             store.ReadPartition(partition, after, kPage));
    if (page.empty()) break;
    ledger::Continue(verdict, page);
    if (!verdict.ok) {
      return absl::DataLossError(absl::StrCat("ledger entry ", verdict.first_bad_seq, " (in ",
                                              partition.name, "): ", verdict.problem,
                                              "; the partition was not archived"));
    }
    for (const ledger::Entry& e : page) {
      ARBITER_RETURN_IF_ERROR(file->Append(absl::StrCat(ledger::FormatArchiveLine(e), "\n")));
    }
    if (exported.entries == 0) exported.first_seq = page.front().seq;
    exported.entries += static_cast<int64_t>(page.size());
    exported.last_seq = page.back().seq;
    exported.last_hash = page.back().hash;
    after = page.back().seq;
  }
  ARBITER_RETURN_IF_ERROR(file->Commit(dir));
  if (exported.entries > 0) head = {exported.last_seq, exported.last_hash};
  return exported;
}

}  // namespace

absl::StatusOr<std::vector<ArchivedPartition>> ArchiveClosedMonths(
    store::LedgerArchiveStore& store, const RetentionOptions& options) {
  if (options.keep_months < 0) {
    return absl::InvalidArgumentError("keep_months: must be >= 0");
  }
  if (options.out_dir.empty()) return absl::InvalidArgumentError("out_dir: empty");
  ARBITER_ASSIGN_OR_RETURN(std::optional<absl::Time> head_time, store.HeadTime());
  std::vector<ArchivedPartition> out;
  if (!head_time.has_value()) return out;  // An empty ledger.
  const absl::Time keep_from = MonthsBefore(*head_time, options.keep_months);
  ARBITER_ASSIGN_OR_RETURN(std::vector<store::LedgerPartition> partitions, store.ListPartitions());
  std::pair<int64_t, std::string> head = ArchivedHead(partitions);
  for (const store::LedgerPartition& p : partitions) {
    if (p.archived) continue;
    if (p.to > keep_from) break;  // Oldest first: the rest are kept too.
    const std::string path = absl::StrCat(options.out_dir, "/", p.name, ".ledger");
    ArchivedPartition done{p.name, {}};
    if (options.dry_run) {
      done.exported.file = path;
      out.push_back(std::move(done));
      continue;
    }
    ARBITER_ASSIGN_OR_RETURN(done.exported, Export(store, p, options.out_dir, path, head));
    ARBITER_RETURN_IF_ERROR(store.Retire(p, done.exported));
    out.push_back(std::move(done));
  }
  return out;
}

}  // namespace arbiter::server
