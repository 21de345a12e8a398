#include "server/atomic_file.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/civil_time.h"
#include <fcntl.h>
#include <unistd.h>

#include "core/status_macros.h"

namespace arbiter::server {
namespace {

absl::Status ErrnoStatus(const std::string& what, int err) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(err));
  if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(message);
  if (err == EACCES || err == EPERM || err == EROFS) return absl::PermissionDeniedError(message);
  return absl::InternalError(message);
}

}  // namespace

absl::StatusOr<std::unique_ptr<AtomicFile>> AtomicFile::Create(std::string path) {
  const std::string partial = path + ".partial";
  const int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(absl::StrCat("cannot create ", partial), errno);
  return std::unique_ptr<AtomicFile>(new AtomicFile(std::move(path), partial, fd));
}

AtomicFile::AtomicFile(std::string path, std::string partial, int fd)
    : path_(std::move(path)), partial_(std::move(partial)), fd_(fd) {}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(partial_.c_str());
}

absl::Status AtomicFile::Append(absl::string_view text) {
  buffer_.append(text.data(), text.size());
  return buffer_.size() >= (1 << 20) ? Flush() : absl::OkStatus();
}

absl::Status AtomicFile::Commit(const std::string& dir) {
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

absl::Status AtomicFile::Flush() {
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

absl::Time MonthsBefore(absl::Time t, int months) {
  const absl::CivilMonth month = absl::ToCivilMonth(t, absl::UTCTimeZone()) - months;
  return absl::FromCivil(month, absl::UTCTimeZone());
}

}  // namespace arbiter::server
