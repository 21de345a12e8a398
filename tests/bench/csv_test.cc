// The tools' CSV reader (bench/csv.h): line ends, quotes, a byte order mark,
// and every way a file is refused rather than misread.
#include "bench/csv.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "tests/testing/status_matchers.h"

namespace arbiter::bench {
namespace {

using ::arbiter::testing::IsOk;
using ::arbiter::testing::StatusIs;
using ::testing::HasSubstr;

constexpr char kLf[] = "name,num_gpu,gpu_spec\npod-1,1,\npod-2,2,V100M16|V100M32\n";
constexpr char kCrLf[] = "name,num_gpu,gpu_spec\r\npod-1,1,\r\npod-2,2,V100M16|V100M32\r\n";

TEST(CsvTest, CrLfReadsAsLf) {
  auto lf = ParseCsv(kLf, {"name", "gpu_spec"});
  auto crlf = ParseCsv(kCrLf, {"name", "gpu_spec"});
  ASSERT_THAT(lf, IsOk());
  ASSERT_THAT(crlf, IsOk());
  EXPECT_EQ(crlf->header, lf->header);
  EXPECT_EQ(crlf->rows, lf->rows);
  ASSERT_EQ(lf->rows.size(), 2u);
  EXPECT_EQ(lf->rows[0].at("gpu_spec"), "");
  EXPECT_EQ(lf->rows[1].at("gpu_spec"), "V100M16|V100M32");
}

TEST(CsvTest, MixedLineEndsAndNoFinalLineEnd) {
  auto t = ParseCsv("a,b\r\n1,2\n3,4\r5,6", {"a", "b"});
  ASSERT_THAT(t, IsOk());
  ASSERT_EQ(t->rows.size(), 3u);
  EXPECT_EQ(t->rows[2].at("b"), "6");
}

TEST(CsvTest, ByteOrderMarkIsSkipped) {
  auto t = ParseCsv("\xEF\xBB\xBFname,x\r\np,1\r\n", {"name"});
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->header[0], "name");
}

TEST(CsvTest, QuotedFieldsHoldCommasQuotesAndLineEnds) {
  auto t = ParseCsv("a,b,c\r\n\"x,y\",\"say \"\"hi\"\"\",\"two\r\nlines\"\r\n", {});
  ASSERT_THAT(t, IsOk());
  ASSERT_EQ(t->rows.size(), 1u);
  EXPECT_EQ(t->rows[0].at("a"), "x,y");
  EXPECT_EQ(t->rows[0].at("b"), "say \"hi\"");
  EXPECT_EQ(t->rows[0].at("c"), "two\r\nlines");
}

TEST(CsvTest, EmptyFieldsAndBlankLines) {
  auto t = ParseCsv("a,b,c\n\n,,\n1,,3\n\n", {});
  ASSERT_THAT(t, IsOk());
  ASSERT_EQ(t->rows.size(), 2u);
  EXPECT_EQ(t->rows[0].at("c"), "");
  EXPECT_EQ(t->rows[1].at("b"), "");
}

TEST(CsvTest, AMissingRequiredColumnIsNamed) {
  EXPECT_THAT(ParseCsv("name,num_gpu\npod,1\n", {"name", "gpu_spec"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'gpu_spec'")));
  // A stray CR is no longer part of the name, so the column is found.
  EXPECT_THAT(ParseCsv("name,gpu_spec\r\npod,\r\n", {"gpu_spec"}), IsOk());
}

TEST(CsvTest, MalformedFilesAreRefusedNamingTheLine) {
  EXPECT_THAT(ParseCsv("a,b\n1,2,3\n", {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("line 2: 3 fields")));
  EXPECT_THAT(ParseCsv("a,b\n1\n", {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("line 2: 1 fields where")));
  EXPECT_THAT(ParseCsv("a,b\n\"1,2\n", {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("line 2: a quoted")));
  EXPECT_THAT(ParseCsv("a,b\n\"1\"x,2\n", {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("line 2: text after")));
  EXPECT_THAT(ParseCsv("a,a\n1,2\n", {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("named twice")));
  EXPECT_THAT(ParseCsv("a,,b\n1,2,3\n", {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty column name")));
  EXPECT_THAT(ParseCsv("", {}), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CsvTest, AFileThatCannotBeReadIsNotFound) {
  EXPECT_THAT(ReadCsvFile("/nonexistent/trace.csv", {}), StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace arbiter::bench
