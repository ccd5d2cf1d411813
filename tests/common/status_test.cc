#include "common/status.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

TEST(StatusTest, DefaultIsOkAndEmpty) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, ErrorKeepsCodeAndMessage) {
  Status s = IoError("disk gone");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_EQ(s.message(), "disk gone");
  EXPECT_EQ(s.ToString(), "IO_ERROR: disk gone");
}

TEST(StatusTest, OkCodeWithMessageIsOk) {
  Status s(StatusCode::kOk, "ignored");
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.message(), "");
}

TEST(StatusTest, CopyIsDeepAndMoveEmptiesNothingVisible) {
  Status a = CorruptionError("bad checksum");
  Status b = a;
  EXPECT_EQ(a, b);
  Status c = std::move(a);
  EXPECT_EQ(c.code(), StatusCode::kCorruption);
  b = Status::Ok();
  EXPECT_TRUE(b.ok());
  EXPECT_EQ(c.message(), "bad checksum");
}

TEST(StatusTest, WithContextPrefixesTheMessage) {
  Status s = NotFoundError("no such block").WithContext("acquire");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "acquire: no such block");
  EXPECT_TRUE(Status::Ok().WithContext("x").ok());
}

TEST(StatusTest, EveryCodeHasAName) {
  for (int c = 0; c <= static_cast<int>(StatusCode::kPermissionDenied); ++c) {
    EXPECT_NE(StatusCodeName(static_cast<StatusCode>(c)), "UNKNOWN") << c;
  }
}

Status FailsWhen(bool fail) { return fail ? InternalError("boom") : Status::Ok(); }

Status Chain(bool fail, int* reached) {
  KVTIER_RETURN_IF_ERROR(FailsWhen(fail));
  *reached = 1;
  return Status::Ok();
}

TEST(StatusTest, ReturnIfErrorReturnsEarlyOnlyOnError) {
  int reached = 0;
  EXPECT_TRUE(Chain(false, &reached).ok());
  EXPECT_EQ(reached, 1);
  reached = 0;
  Status s = Chain(true, &reached);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ(reached, 0);
}

}  // namespace
}  // namespace kvtier
