// The ledger archive line (ledger/archive.h): the exact text of a line,
// round trips of every text field with the characters that need escaping
// (and of those that look like escapes), every malformed line refused
// naming its column, and a chain that still verifies after a trip through
// archive lines.
#include "ledger/archive.h"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ledger/chain.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::ledger {
namespace {

using ::arbiter::testing::IsOk;
using ::arbiter::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kHashA(64, 'a');
const std::string kHashB = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

Entry Plain() {
  Entry e;
  e.seq = 7;
  e.at = absl::FromUnixMicros(1700000000123456);
  e.actor = "alice";
  e.action = "request.admitted";
  e.subject = "request/42";
  e.payload = "gpus=2;team=inference";
  e.prev_hash = kHashA;
  e.hash = kHashB;
  return e;
}

void ExpectSameEntry(const Entry& got, const Entry& want) {
  EXPECT_EQ(got.seq, want.seq);
  EXPECT_EQ(got.at, want.at);
  EXPECT_EQ(got.actor, want.actor);
  EXPECT_EQ(got.action, want.action);
  EXPECT_EQ(got.subject, want.subject);
  EXPECT_EQ(got.payload, want.payload);
  EXPECT_EQ(got.prev_hash, want.prev_hash);
  EXPECT_EQ(got.hash, want.hash);
}

// Text that needs every escape, and text that already looks like one.
const char* const kNastyTexts[] = {
    "tab\there",
    "line\nfeed",
    "carriage\rreturn",
    "back\\slash",
    "\\t is not a tab",
    "ends in a backslash \\",
    "\\\\n",
    "crlf\r\n",
    "\t\n\r\\",
    "",
    "Zoë → 東京 🚀",
    "k=v;x=y\\;z",
};

TEST(ArchiveLineTest, FormatIsTheSpecifiedText) {
  Entry e = Plain();
  e.actor = "al\tice";
  e.subject = "a\\b\nc\rd";
  EXPECT_EQ(FormatArchiveLine(e),
            absl::StrCat("7\t1700000000123456\tal\\tice\trequest.admitted\ta\\\\b\\nc\\rd\t",
                         "gpus=2;team=inference\t", kHashA, "\t", kHashB));
}

TEST(ArchiveLineTest, HeaderIsNotAnEntry) {
  EXPECT_THAT(ParseArchiveLine(kArchiveHeader), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ArchiveLineTest, EveryTextFieldRoundTrips) {
  for (int field = 0; field < 4; ++field) {
    for (const char* text : kNastyTexts) {
      SCOPED_TRACE(absl::StrCat("field ", field, " text '", text, "'"));
      Entry e = Plain();
      std::string* fields[] = {&e.actor, &e.action, &e.subject, &e.payload};
      *fields[field] = text;
      const std::string line = FormatArchiveLine(e);
      EXPECT_EQ(line.find('\n'), std::string::npos);
      EXPECT_EQ(line.find('\r'), std::string::npos);
      EXPECT_EQ(std::vector<std::string>(absl::StrSplit(line, '\t')).size(), 8u);
      absl::StatusOr<Entry> parsed = ParseArchiveLine(line);
      ASSERT_THAT(parsed, IsOk());
      ExpectSameEntry(*parsed, e);
      EXPECT_EQ(FormatArchiveLine(*parsed), line);
    }
  }
}

TEST(ArchiveLineTest, AllTextFieldsAtOnceRoundTrip) {
  Entry e = Plain();
  e.actor = "spiffe://arbiter.local/Zoë\t\\";
  e.action = "role.grant\r\n";
  e.subject = "team/東京\\n";
  e.payload = Payload({{"note", "two\nlines\tand a tab"}, {"who", "\\r"}});
  absl::StatusOr<Entry> parsed = ParseArchiveLine(FormatArchiveLine(e));
  ASSERT_THAT(parsed, IsOk());
  ExpectSameEntry(*parsed, e);
}

TEST(ArchiveLineTest, TimesAndSeqsRoundTrip) {
  for (int64_t micros :
       {int64_t{0}, int64_t{-1}, int64_t{-1700000000123456}, int64_t{253402300799999999},
        std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()}) {
    for (int64_t seq : {int64_t{1}, std::numeric_limits<int64_t>::max()}) {
      SCOPED_TRACE(absl::StrCat(seq, " at ", micros));
      Entry e = Plain();
      e.seq = seq;
      e.at = absl::FromUnixMicros(micros);
      absl::StatusOr<Entry> parsed = ParseArchiveLine(FormatArchiveLine(e));
      ASSERT_THAT(parsed, IsOk());
      EXPECT_EQ(parsed->seq, seq);
      EXPECT_EQ(absl::ToUnixMicros(parsed->at), micros);
    }
  }
}

TEST(ArchiveLineTest, SubMicrosecondTimeIsTruncatedAsTheHashSeesIt) {
  Entry e = Plain();
  e.at = absl::FromUnixMicros(1700000000123456) + absl::Nanoseconds(789);
  absl::StatusOr<Entry> parsed = ParseArchiveLine(FormatArchiveLine(e));
  ASSERT_THAT(parsed, IsOk());
  EXPECT_EQ(parsed->at, absl::FromUnixMicros(1700000000123456));
  EXPECT_EQ(HashOf(kHashA, *parsed), HashOf(kHashA, e));
}

// The columns of Plain()'s line with column `index` replaced by `value`.
std::string WithColumn(size_t index, absl::string_view value) {
  std::vector<std::string> columns = absl::StrSplit(FormatArchiveLine(Plain()), '\t');
  columns.at(index) = std::string(value);
  return absl::StrJoin(columns, "\t");
}

struct Malformed {
  std::string line;
  std::string column;  // The message starts with "<column>: ".
};

std::vector<Malformed> MalformedLines() {
  std::vector<Malformed> cases;
  for (const char* seq :
       {"0", "-1", "-0", "", "x", "1x", "01", "+1", " 1", "1 ", "1.0", "9223372036854775808"}) {
    cases.push_back({WithColumn(0, seq), "seq"});
  }
  for (const char* at : {"", "x", "01", "-0", "+5", "1.5", "1e6", "-", "99999999999999999999",
                         "-9223372036854775809"}) {
    cases.push_back({WithColumn(1, at), "at_unix_micros"});
  }
  const char* names[] = {"actor", "action", "subject", "payload"};
  for (size_t i = 0; i < 4; ++i) {
    for (const char* text : {"a\\q", "a\\", "\\", "a\\x41", "a\\N", "a\rb", "a\nb", "a\\\\\\"}) {
      cases.push_back({WithColumn(2 + i, text), names[i]});
    }
  }
  const char* hashes[] = {"prev_hash", "hash"};
  for (size_t i = 0; i < 2; ++i) {
    for (const std::string& hash :
         {std::string(63, 'a'), std::string(65, 'a'), std::string(), std::string(64, 'A'),
          std::string(63, 'a') + "g", std::string(63, 'a') + " ", kHashA.substr(0, 32)}) {
      cases.push_back({WithColumn(6 + i, hash), hashes[i]});
    }
  }
  const std::string good = FormatArchiveLine(Plain());
  cases.push_back({good + "\r", "hash"});
  cases.push_back({good + "\t", "hash"});
  cases.push_back({good + "\textra", "hash"});
  cases.push_back({good.substr(0, good.rfind('\t')), "hash"});
  cases.push_back({"", "at_unix_micros"});
  cases.push_back({"7", "at_unix_micros"});
  cases.push_back({absl::StrCat("7\t1\talice\tx\ty\tz\t", kHashA), "hash"});
  cases.push_back({absl::StrCat("7\t1\talice\tx\ty\t", kHashA, "\t", kHashB), "hash"});
  return cases;
}

TEST(ArchiveLineTest, MalformedLinesAreRefusedNamingTheColumn) {
  const std::vector<Malformed> cases = MalformedLines();
  ASSERT_GT(cases.size(), 60u);
  for (const Malformed& c : cases) {
    SCOPED_TRACE(absl::StrCat("line '", absl::CHexEscape(c.line), "'"));
    EXPECT_THAT(ParseArchiveLine(c.line),
                StatusIs(absl::StatusCode::kInvalidArgument, StartsWith(c.column + ": ")));
  }
}

TEST(ArchiveLineTest, TheBaseOfTheMalformedLinesParses) {
  // So that each malformed case fails for its one change.
  EXPECT_THAT(ParseArchiveLine(WithColumn(0, "7")), IsOk());
  EXPECT_THAT(ParseArchiveLine(WithColumn(1, "-5")), IsOk());
  EXPECT_THAT(ParseArchiveLine(WithColumn(5, "a\\\\\\t\\n\\r")), IsOk());
  EXPECT_THAT(ParseArchiveLine(WithColumn(7, kHashA)), IsOk());
}

TEST(ArchiveLineTest, MessagesSayWhatIsWrong) {
  EXPECT_THAT(ParseArchiveLine(WithColumn(5, "a\\qb")),
              StatusIs(absl::StatusCode::kInvalidArgument, "payload: bad escape \\q"));
  EXPECT_THAT(ParseArchiveLine(WithColumn(7, "abc")),
              StatusIs(absl::StatusCode::kInvalidArgument, "hash: not 64 hex characters"));
  EXPECT_THAT(ParseArchiveLine(WithColumn(6, std::string(64, 'F'))),
              StatusIs(absl::StatusCode::kInvalidArgument, "prev_hash: not 64 hex characters"));
  EXPECT_THAT(ParseArchiveLine(WithColumn(0, "0")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("positive")));
  EXPECT_THAT(ParseArchiveLine(WithColumn(2, "a\\")),
              StatusIs(absl::StatusCode::kInvalidArgument, "actor: ends in a backslash"));
  EXPECT_THAT(ParseArchiveLine(FormatArchiveLine(Plain()) + "\r"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("carriage return")));
}

// A chain of `n` entries from genesis, linked with HashOf, with text that
// needs escaping in every field.
std::vector<Entry> Chain(int n) {
  std::vector<Entry> chain;
  std::string prev = kGenesisHash;
  for (int i = 1; i <= n; ++i) {
    const char* nasty = kNastyTexts[i % (sizeof(kNastyTexts) / sizeof(kNastyTexts[0]))];
    Entry e;
    e.seq = i;
    e.at = absl::FromUnixMicros(1700000000000000 + 1000 * i);
    e.actor = absl::StrCat("spiffe://arbiter.local/", nasty);
    e.action = absl::StrCat("request.admitted", nasty);
    e.subject = absl::StrCat("request/", i, nasty);
    e.payload = Payload({{"gpus", absl::StrCat(i)}, {"note", nasty}});
    e.prev_hash = prev;
    e.hash = HashOf(prev, e);
    prev = e.hash;
    chain.push_back(std::move(e));
  }
  return chain;
}

TEST(ArchiveChainTest, ChainVerifiesAfterATripThroughArchiveLines) {
  const std::vector<Entry> chain = Chain(50);
  ASSERT_TRUE(VerifyChain(chain, 0, kGenesisHash).ok);
  std::vector<Entry> read;
  for (const Entry& e : chain) {
    absl::StatusOr<Entry> parsed = ParseArchiveLine(FormatArchiveLine(e));
    ASSERT_THAT(parsed, IsOk());
    read.push_back(*std::move(parsed));
  }
  const Verdict v = VerifyChain(read, 0, kGenesisHash);
  EXPECT_TRUE(v.ok) << v.problem;
  EXPECT_EQ(v.count, 50);
  EXPECT_EQ(v.head_seq, 50);
  EXPECT_EQ(v.head_hash, chain.back().hash);
}

TEST(ArchiveChainTest, ChainVerifiesAcrossArchivePagesAndTheDatabase) {
  // Two "files" of archive lines, then the entries left in the database,
  // continued as arbctl pages them.
  const std::vector<Entry> chain = Chain(30);
  Verdict v = VerifyChain({}, 0, kGenesisHash);
  for (auto [begin, end] : {std::pair{0, 10}, std::pair{10, 20}}) {
    std::vector<Entry> page;
    for (int i = begin; i < end; ++i) {
      absl::StatusOr<Entry> parsed = ParseArchiveLine(FormatArchiveLine(chain[i]));
      ASSERT_THAT(parsed, IsOk());
      page.push_back(*std::move(parsed));
    }
    Continue(v, page);
  }
  Continue(v, std::vector<Entry>(chain.begin() + 20, chain.end()));
  EXPECT_TRUE(v.ok) << v.problem;
  EXPECT_EQ(v.count, 30);
  EXPECT_EQ(v.head_hash, chain.back().hash);
}

TEST(ArchiveChainTest, AnEditedArchiveLineBreaksTheChainAtItsEntry) {
  const std::vector<Entry> chain = Chain(20);
  std::vector<Entry> read;
  for (const Entry& e : chain) {
    std::string line = FormatArchiveLine(e);
    if (e.seq == 13) {
      // One character of the payload changed: still a good line.
      const size_t gpus = line.find("gpus=13");
      ASSERT_NE(gpus, std::string::npos);
      line[gpus + 5] = '4';
    }
    absl::StatusOr<Entry> parsed = ParseArchiveLine(line);
    ASSERT_THAT(parsed, IsOk());
    read.push_back(*std::move(parsed));
  }
  const Verdict v = VerifyChain(read, 0, kGenesisHash);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.first_bad_seq, 13);
  EXPECT_EQ(v.head_seq, 12);
}

}  // namespace
}  // namespace arbiter::ledger
