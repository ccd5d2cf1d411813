#include "common/result.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "common/layout.h"

namespace kvtier {
namespace {

TEST(ResultTest, HoldsAValue) {
  Result<int> r = 42;
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(*r, 42);
  EXPECT_EQ(r.value(), 42);
  EXPECT_TRUE(r.status().ok());
  EXPECT_EQ(r.value_or(7), 42);
}

TEST(ResultTest, HoldsAnError) {
  Result<std::string> r = NotFoundError("nope");
  ASSERT_FALSE(r.has_value());
  EXPECT_FALSE(static_cast<bool>(r));
  EXPECT_EQ(r.error().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "nope");
  EXPECT_EQ(r.value_or("fallback"), "fallback");
}

TEST(ResultTest, MoveOnlyValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(5);
  ASSERT_TRUE(r);
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 5);
}

TEST(ResultTest, ArrowReachesMembers) {
  Result<std::string> r = std::string("abc");
  EXPECT_EQ(r->size(), 3u);
}

Result<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError("odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  KVTIER_ASSIGN_OR_RETURN(const int h, Half(x));
  KVTIER_ASSIGN_OR_RETURN(const int q, Half(h));
  return q;
}

TEST(ResultTest, AssignOrReturnPropagates) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Quarter(3).status().message(), "odd");
}

Status UsesResultInReturnIfError(int x) {
  KVTIER_RETURN_IF_ERROR(Half(x));
  return Status::Ok();
}

TEST(ResultTest, ReturnIfErrorAcceptsAResult) {
  EXPECT_TRUE(UsesResultInReturnIfError(2).ok());
  EXPECT_FALSE(UsesResultInReturnIfError(1).ok());
}

TEST(LayoutTest, BlockBytesFollowTheFormula) {
  Layout l{32, 8, 128, DType::kFloat16, 16};
  EXPECT_TRUE(l.Validate().ok());
  EXPECT_EQ(l.BytesPerToken(), 2u * 32 * 8 * 128 * 2);
  EXPECT_EQ(l.BlockBytes(), 2u * 32 * 8 * 128 * 2 * 16);  // 2 MiB
}

TEST(LayoutTest, RejectsZerosAndOversizedBlocks) {
  const Layout zero_layers{0, 8, 128, DType::kFloat16, 16};
  EXPECT_EQ(zero_layers.Validate().code(), StatusCode::kInvalidArgument);
  const Layout huge{4000000000u, 4000000000u, 4000000000u, DType::kFloat32, 4000000000u};
  EXPECT_EQ(huge.Validate().code(), StatusCode::kInvalidArgument);
  const Layout just_over{1024, 1024, 256, DType::kFloat16, 2};  // 2 GiB
  EXPECT_EQ(just_over.Validate().code(), StatusCode::kInvalidArgument);
}

TEST(LayoutTest, DTypeNamesRoundTrip) {
  for (DType d :
       {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFp8E4M3, DType::kFp8E5M2}) {
    DType parsed{};
    ASSERT_TRUE(ParseDType(DTypeName(d), &parsed));
    EXPECT_EQ(parsed, d);
  }
  DType parsed{};
  EXPECT_FALSE(ParseDType("int4", &parsed));
}

}  // namespace
}  // namespace kvtier
