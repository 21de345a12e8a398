#include "tests/testing/arbiterd_process.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

namespace arbiter::testing {

std::string BinaryPath(const std::string& relative) {
  const char* dir = std::getenv("ARBITER_BINARY_DIR");
  return absl::StrCat(dir == nullptr ? ARBITER_DEFAULT_BINARY_DIR : dir, "/", relative);
}

absl::StatusOr<std::unique_ptr<ArbiterdProcess>> ArbiterdProcess::Start(
    const std::string& dsn, const std::vector<std::string>& extra_args) {
  auto proc = std::unique_ptr<ArbiterdProcess>(new ArbiterdProcess());
  char tmpl[] = "/tmp/arbiterd-test.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  proc->dir_ = tmpl;
  const std::string port_file = proc->dir_ + "/port";
  const std::string log_file = proc->dir_ + "/log";
  std::vector<std::string> args = {
      BinaryPath("server/arbiterd"), "--log-level", "warn",        "serve",       "--dsn",  dsn,
      "--insecure-loopback",         "--listen",    "127.0.0.1:0", "--port-file", port_file};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    std::freopen(log_file.c_str(), "w", stdout);
    std::freopen(log_file.c_str(), "a", stderr);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  proc->pid_ = pid;
  // Polling a file the child writes once it serves; not a timing assertion.
  for (int i = 0; i < 600; ++i) {
    std::ifstream in(port_file);
    if (in >> proc->port_ && proc->port_ > 0) return proc;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      proc->pid_ = -1;
      std::ifstream log(log_file);
      std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
      return absl::InternalError(absl::StrCat("arbiterd exited: ", text));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::DeadlineExceededError("arbiterd did not start within 60 s");
}

ArbiterdProcess::~ArbiterdProcess() {
  if (pid_ > 0) Stop();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

void ArbiterdProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

int ArbiterdProcess::Stop() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int status = 0;
  for (int i = 0; i < 200; ++i) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return status;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  Kill();
  return -1;
}

}  // namespace arbiter::testing
