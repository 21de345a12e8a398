// Files the retention commands write (archive-ledger, archive-history): an
// archive is written whole to `<path>.partial`, flushed to disk, then
// renamed into place with its directory flushed, so that a crash leaves
// either the whole file or none under its name.
//
// Thread-compatible: one writer per file.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace arbiter::server {

class AtomicFile {
 public:
  // Creates `<path>.partial`. NOT_FOUND or PERMISSION_DENIED when its
  // directory cannot be written; INTERNAL otherwise.
  static absl::StatusOr<std::unique_ptr<AtomicFile>> Create(std::string path);
  // Removes the partial file unless it was committed.
  ~AtomicFile();

  // Buffers `text`, writing out each MiB.
  absl::Status Append(absl::string_view text);
  // Writes the rest, flushes the file to disk, renames it to its path, and
  // flushes `dir`, the directory it is in.
  absl::Status Commit(const std::string& dir);

 private:
  AtomicFile(std::string path, std::string partial, int fd);
  absl::Status Flush();

  const std::string path_;
  const std::string partial_;
  int fd_;
  bool committed_ = false;
  std::string buffer_;
};

// The first instant of the UTC month `months` before the month of `t`.
absl::Time MonthsBefore(absl::Time t, int months);

}  // namespace arbiter::server
