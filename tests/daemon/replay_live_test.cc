// kvtier replay --live against the real daemon: the Mooncake trace (tests/data)
// through the real client with real bytes, every byte read back checked.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>

#include "daemon_harness.h"

namespace kvtier::testing {
namespace {

TEST(ReplayLiveTest, MooncakeTraceAgainstTheDaemonReadsBackEveryByte) {
  const std::string trace = KVTIER_TEST_DATA_DIR "/mooncake_synthetic_trace.jsonl";
  ASSERT_TRUE(std::filesystem::exists(trace)) << trace;
  auto d = Daemon::Start({"--host-capacity", "32MiB", "--host-slab", "1MiB"});
  ASSERT_NE(d, nullptr);
  const std::string cmd = std::string(KVTIER_CLI_PATH) + " replay --live --quiet --socket " +
                          d->socket() + " --trace " + trace + " --block-bytes 4096 2>&1";
  FILE* out = ::popen(cmd.c_str(), "r");
  ASSERT_NE(out, nullptr);
  std::string text;
  char buf[512];
  while (std::fgets(buf, sizeof buf, out) != nullptr) text += buf;
  const int status = ::pclose(out);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text;
  EXPECT_NE(text.find("0 wrong bytes, 0 errors"), std::string::npos) << text;
  EXPECT_NE(text.find("requests 3993"), std::string::npos) << text;
  EXPECT_NE(text.find("allocate+fill+commit"), std::string::npos) << text;
  EXPECT_TRUE(d->Alive());
}

}  // namespace
}  // namespace kvtier::testing
