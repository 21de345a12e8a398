#include "clients/slurm/command.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace arbiter::slurm {
namespace {

// Reads what is ready on `fd` into `out`; false at end of file.
bool Drain(int fd, std::string& out) {
  char buffer[65536];
  const ssize_t n = read(fd, buffer, sizeof(buffer));
  if (n > 0) {
    out.append(buffer, static_cast<size_t>(n));
    return true;
  }
  return n < 0 && (errno == EINTR || errno == EAGAIN);
}

}  // namespace

absl::StatusOr<std::string> RunCommand(const std::vector<std::string>& argv,
                                       absl::Duration timeout) {
  if (argv.empty()) return absl::InvalidArgumentError("argv: empty");
  const std::string command = absl::StrJoin(argv, " ");
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return absl::InternalError("pipe2 failed");
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    const int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, STDIN_FILENO);
    execvp(args[0], args.data());
    dprintf(STDERR_FILENO, "cannot run %s: %s", args[0], strerror(errno));
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  std::string out, err;
  const absl::Time deadline = absl::Now() + timeout;
  bool out_open = true, err_open = true, timed_out = false;
  while (out_open || err_open) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    pollfd fds[2] = {{out_open ? out_pipe[0] : -1, POLLIN, 0},
                     {err_open ? err_pipe[0] : -1, POLLIN, 0}};
    const int ready = poll(fds, 2, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (ready < 0 && errno != EINTR) break;
    if (out_open && (fds[0].revents & (POLLIN | POLLHUP))) out_open = Drain(out_pipe[0], out);
    if (err_open && (fds[1].revents & (POLLIN | POLLHUP))) err_open = Drain(err_pipe[0], err);
  }
  close(out_pipe[0]);
  close(err_pipe[0]);
  // A command may close its output and go on running: it is waited for
  // until the deadline too.
  int status = 0;
  while (true) {
    const pid_t done = waitpid(pid, &status, timed_out ? 0 : WNOHANG);
    if (done == pid || (done < 0 && errno != EINTR)) break;
    if (done == 0 && absl::Now() >= deadline) {
      timed_out = true;
      kill(pid, SIGKILL);
    } else if (done == 0) {
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
  if (timed_out) {
    return absl::DeadlineExceededError(
        absl::StrCat(command, ": no answer in ", absl::FormatDuration(timeout)));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
    return absl::UnavailableError(absl::StrCat(command, ": ",
                                               WIFEXITED(status)
                                                   ? absl::StrCat("exit ", WEXITSTATUS(status))
                                                   : absl::StrCat("signal ", WTERMSIG(status)),
                                               err.empty() ? "" : ": ", err));
  }
  return out;
}

}  // namespace arbiter::slurm
