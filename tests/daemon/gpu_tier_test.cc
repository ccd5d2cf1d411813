// The GPU device tier through the real daemon and client: where there is no
// GPU, `--device cuda` refuses to start with the reason and `auto` runs
// without a device tier, saying so; where there is one, blocks written to
// the host are promoted to the GPU by ACQUIRE and a worker reads the very
// bytes through the arena's IPC handle (client/cuda_ipc.h).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <numeric>

#include "client/client.h"
#include "client/cuda_ipc.h"
#include "support/daemon_client.h"

namespace kvtier::daemon {
namespace {

using client::Client;
using client::ClientOptions;
using kvtier::testing::ConnectClient;
using kvtier::testing::TestClientOptions;
using protocol::WireTier;

bool HaveGpu() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  cudaGetLastError();
  return ok;
}

std::unique_ptr<Client> Connect(const std::string& socket) {
  ClientOptions o = TestClientOptions(socket, "gpu-test");
  o.layout = {4, 8, 128, DType::kFloat16, 16};  // 128 KiB blocks
  return ConnectClient(o);
}

TEST(GpuTierTest, WithoutAGpuCudaModeRefusesToStartAndAutoRunsWithout) {
  if (HaveGpu()) GTEST_SKIP() << "a GPU is present: the refusal cannot be shown here";
  std::string err;
  const int status = testing::RunDaemonToExit(
      {"--socket", ::testing::TempDir() + "kvtier-gpu-refused.sock", "--no-reserve-memory",
       "--ssd-dir", "", "--metrics-address", "", "--device", "cuda"},
      &err);
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_NE(err.find("device tier on GPU 0"), std::string::npos) << err;
  auto d = testing::Daemon::Start({"--device", "auto"});
  ASSERT_NE(d, nullptr);
  auto c = Connect(d->socket());
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->session().device, protocol::DeviceKind::kNone);
  EXPECT_EQ(c->device_ordinal(), -1);
  EXPECT_EQ(client::DeviceArena::Open(*c).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(d->Log().find("device tier off (device.mode auto)"), std::string::npos) << d->Log();
}

TEST(GpuTierTest, AcquireToTheGpuAndReadThroughIpc) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU here";
  auto d = testing::Daemon::Start({"--device", "cuda", "--device-capacity", "64MiB"});
  ASSERT_NE(d, nullptr);
  auto c = Connect(d->socket());
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->session().device, protocol::DeviceKind::kCuda);
  std::vector<prefix_index::TokenId> tokens(16 * 8);
  std::iota(tokens.begin(), tokens.end(), 5);
  const auto keys = c->Keys(tokens);
  auto w = c->Allocate(keys);
  ASSERT_TRUE(w.ok());
  for (size_t i = 0; i < keys.size(); ++i) testing::FillPattern(w->Bytes(i), keys[i]);
  ASSERT_TRUE(w->Commit().ok());

  auto lease = c->Acquire(keys, WireTier::kDevice);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_EQ(lease->size(), keys.size());
  auto arena = client::DeviceArena::Open(*c);
  ASSERT_TRUE(arena.ok()) << arena.status().ToString();
  auto table = lease->BlockTable();
  ASSERT_TRUE(table.ok());
  std::vector<std::byte> out(c->block_bytes());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(uint64_t((*table)[i]) * 4096, lease->offset(i));
    ASSERT_EQ(cudaMemcpy(out.data(), (*arena)->base() + lease->offset(i), out.size(),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_TRUE(testing::MatchesPattern(out, keys[i])) << i;
  }
  ASSERT_TRUE(lease->Release().ok());
}

}  // namespace
}  // namespace kvtier::daemon
