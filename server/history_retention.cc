#include "server/history_retention.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include <openssl/evp.h>

#include "core/status_macros.h"
#include "server/atomic_file.h"

namespace arbiter::server {
namespace {

// SHA-256 over what is appended, in lower-case hex.
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr);
  }
  void Update(absl::string_view text) { EVP_DigestUpdate(ctx_.get(), text.data(), text.size()); }
  std::string HexDigest() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    EVP_DigestFinal_ex(ctx_.get(), digest, &size);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < size; ++i) {
      out.push_back(kHex[digest[i] >> 4]);
      out.push_back(kHex[digest[i] & 0xf]);
    }
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
};

// Writes the rows of `partition` to `path`, after the header line.
absl::StatusOr<store::ExportedHistory> Export(store::HistoryArchiveStore& store,
                                              const store::HistoryPartition& partition,
                                              const std::string& dir, const std::string& path) {
  ARBITER_ASSIGN_OR_RETURN(const std::vector<std::string> columns, store.Columns(partition));
  ARBITER_ASSIGN_OR_RETURN(std::unique_ptr<AtomicFile> file, AtomicFile::Create(path));
  Sha256 sha;
  auto write = [&](absl::string_view text) {
    sha.Update(text);
    return file->Append(text);
  };
  ARBITER_RETURN_IF_ERROR(
      write(absl::StrCat(kHistoryArchiveHeader, " ", partition.name, " of ", partition.parent, ": ",
                         absl::StrJoin(columns, ","), "\n")));
  store::ExportedHistory exported;
  exported.file = path;
  ARBITER_ASSIGN_OR_RETURN(exported.rows,
                           store.Export(partition, [&](absl::string_view line) -> absl::Status {
                             ARBITER_RETURN_IF_ERROR(write(line));
                             return write("\n");
                           }));
  ARBITER_RETURN_IF_ERROR(file->Commit(dir));
  exported.sha256 = sha.HexDigest();
  return exported;
}

}  // namespace

absl::StatusOr<std::vector<ArchivedHistory>> ArchiveClosedHistory(
    store::HistoryArchiveStore& store, const HistoryRetentionOptions& options) {
  if (options.keep_months < 0) {
    return absl::InvalidArgumentError("keep_months: must be >= 0");
  }
  if (options.out_dir.empty()) return absl::InvalidArgumentError("out_dir: empty");
  if (options.now == absl::InfinitePast()) return absl::InvalidArgumentError("now: not set");
  const absl::Time keep_from = MonthsBefore(options.now, options.keep_months);
  ARBITER_ASSIGN_OR_RETURN(std::vector<store::HistoryPartition> partitions, store.ListPartitions());
  std::vector<ArchivedHistory> out;
  for (const store::HistoryPartition& p : partitions) {
    if (p.to > keep_from) break;  // By end of month: the rest are kept too.
    if (p.parent == "placements") {
      ARBITER_ASSIGN_OR_RETURN(const int64_t live, store.LivePlacementsIn(p));
      if (live > 0) continue;  // Still held: kept until its requests end.
    }
    ArchivedHistory done{p.name, {}};
    const std::string path = absl::StrCat(options.out_dir, "/", p.name, ".copy");
    if (options.dry_run) {
      done.exported.file = path;
      out.push_back(std::move(done));
      continue;
    }
    ARBITER_ASSIGN_OR_RETURN(done.exported, Export(store, p, options.out_dir, path));
    ARBITER_RETURN_IF_ERROR(store.Retire(p, done.exported));
    out.push_back(std::move(done));
  }
  return out;
}

}  // namespace arbiter::server
