// The fixture of the engine tests over a real SSD tier: a temporary data
// directory on a real disk, a ManualClock, a ManualExecutor (every
// asynchronous move runs when the test says), a FaultInjector for the slot
// file, and the engine, whose invariants are checked at the end of each
// test after every queued move has run.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "engine/cache_engine.h"
#include "tiers/internal/ssd_tier.h"

namespace kvtier::engine::testing {

class SsdEngineFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/var/tmp/kvtier-ssd-engine-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override {
    if (engine_) {
      io_.RunAll();
      const Status s = engine_->CheckInvariants();
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    engine_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::string dir_;
  ManualClock clock_;
  ManualExecutor io_;
  tiers::internal::FaultInjector faults_;
  std::unique_ptr<CacheEngine> engine_;
  NamespaceId ns_ = 0;
};

}  // namespace kvtier::engine::testing
