#include "clients/slurm/command.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace arbiter::slurm {
namespace {

using ::testing::HasSubstr;

TEST(RunCommandTest, ReturnsStandardOutput) {
  absl::StatusOr<std::string> out = RunCommand({"printf", "abc"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "abc");
}

TEST(RunCommandTest, PassesArgumentsWithoutAShell) {
  absl::StatusOr<std::string> out = RunCommand({"printf", "%s|", "a b", "$HOME", "*"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "a b|$HOME|*|");
}

TEST(RunCommandTest, ANonZeroExitIsUnavailableWithStandardError) {
  absl::StatusOr<std::string> out = RunCommand({"sh", "-c", "echo oops >&2; exit 3"});
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::IsUnavailable(out.status())) << out.status();
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("oops"));
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("exit 3"));
}

TEST(RunCommandTest, ACommandPastItsTimeoutIsKilled) {
  absl::StatusOr<std::string> out = RunCommand({"sleep", "5"}, absl::Milliseconds(200));
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(out.status())) << out.status();
}

// The deadline holds for the process, not only for its output: one that
// closed its standard output and error still runs past the timeout.
TEST(RunCommandTest, ACommandPastItsTimeoutIsKilledAfterClosingItsOutput) {
  absl::StatusOr<std::string> out =
      RunCommand({"sh", "-c", "exec >&- 2>&-; sleep 2"}, absl::Milliseconds(200));
  ASSERT_FALSE(out.ok()) << "ran past its timeout but answered '" << *out << "'";
  EXPECT_TRUE(absl::IsDeadlineExceeded(out.status())) << out.status();
}

TEST(RunCommandTest, ACommandThatDoesNotExistIsUnavailable) {
  absl::StatusOr<std::string> out = RunCommand({"arbiter-no-such-command-here", "x"});
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::IsUnavailable(out.status())) << out.status();
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("arbiter-no-such-command-here"));
}

}  // namespace
}  // namespace arbiter::slurm
