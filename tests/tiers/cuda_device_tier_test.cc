// The CUDA device tier itself: its construction fails cleanly where there is
// no GPU, and on a machine with one it moves bytes both ways (the engine's
// asynchronous copies into it: tests/engine/device_copy_test.cc).
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "common/units.h"
#include "tiers/internal/cuda_runtime.h"
#include "tiers/tier.h"

namespace kvtier::tiers {
namespace {

TEST(CudaDeviceTierTest, NoGpuIsAClearErrorAndAGpuMovesBytes) {
  auto tier = NewCudaDeviceTier({0, 8 * kMiB, kMiB});
  if (!internal::CudaDevices().ok()) {
    ASSERT_FALSE(tier.ok());
    EXPECT_EQ(tier.status().code(), StatusCode::kUnavailable);
    EXPECT_FALSE(tier.status().message().empty());
    EXPECT_FALSE(DescribeGpus().empty());
    GTEST_SKIP() << "no GPU here: " << tier.status().message();
  }
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  Tier& t = **tier;
  EXPECT_TRUE(t.copies_async());
  EXPECT_EQ(t.ipc_handle().size(), internal::kCudaIpcHandleBytes);
  std::vector<std::byte> in(64 * 1024), out(64 * 1024);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::byte>(i * 7 + 3);
  auto slot = t.Allocate(in.size());
  ASSERT_TRUE(slot.ok());
  ASSERT_TRUE(t.Write(*slot, in).ok());
  ASSERT_TRUE(t.Read(*slot, out).ok());
  EXPECT_EQ(in, out);
  EXPECT_TRUE(t.HostView(*slot, in.size()).empty());
}

}  // namespace
}  // namespace kvtier::tiers
