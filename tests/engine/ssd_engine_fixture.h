// The fixture of the engine tests over a real SSD tier: a temporary data
// directory on a real disk, a ManualClock, a ManualExecutor (every
// asynchronous move runs when the test says), a FaultInjector for the slot
// file, the engine (BuildEngine), whose invariants are checked at the end of each
// test after every queued move has run.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/cache_engine.h"
#include "support/temp_dir.h"
#include "tiers/internal/ssd_tier.h"

namespace kvtier::engine::testing {

using kvtier::testing::TempDir;

class SsdEngineFixture : public ::testing::Test {
 protected:
  // engine_: a host tier of `host_bytes` (slabs of `slab_bytes`) over an
  // SSD tier of `ssd_bytes` in dir_, its slot file behind faults_ when
  // `faulty`; the engine's log lines land in log_.
  void BuildEngine(uint64_t host_bytes, uint64_t slab_bytes, uint64_t ssd_bytes, bool faulty,
                   bool write_through) {
    auto host = tiers::NewHostTier({host_bytes, slab_bytes, false});
    ASSERT_TRUE(host.ok());
    tiers::internal::SsdOptions so;
    so.dir = dir_;
    so.capacity_bytes = ssd_bytes;
    if (faulty) so.file_factory = tiers::internal::FaultInjectingFactory(faults_);
    auto store = tiers::internal::SsdStore::Open(so);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EngineOptions options;
    options.io = &io_;
    options.clock = &clock_;
    options.ssd_write_through = write_through;
    options.ssd_write_budget_per_day = ssd_write_budget_;
    options.ssd_admission = ssd_admission_;
    options.record_events = record_events_;
    options.log = [this](const std::string& line) { log_.push_back(line); };
    auto e = CacheEngine::Create(options, nullptr, std::move(host).value(),
                                 tiers::internal::NewSsdTierOver(std::move(store).value()));
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(e).value();
  }
  void TearDown() override {
    if (engine_) {
      io_.RunAll();
      const Status s = engine_->CheckInvariants();
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    engine_.reset();
  }

  TempDir dir_{"/var/tmp/kvtier-ssd-engine"};
  ManualClock clock_;
  ManualExecutor io_;
  tiers::internal::FaultInjector faults_;
  std::unique_ptr<CacheEngine> engine_;
  NamespaceId ns_ = 0;
  std::vector<std::string> log_;
  uint64_t ssd_write_budget_ = 0;      // EngineOptions::ssd_write_budget_per_day of the next build
  std::string ssd_admission_ = "off";  // EngineOptions::ssd_admission of the next build
  bool record_events_ = false;         // EngineOptions::record_events of the next build
};

}  // namespace kvtier::engine::testing
