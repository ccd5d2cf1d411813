// EngineOptions: how a CacheEngine is set up (its policies and admission
// filters per tier, its clock and executors, the ssd's pause and write
// budget, write-through, events, hints, logging). CacheEngine::Create takes
// one; the daemon fills it from its configuration, replay from SimConfig.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/clock.h"
#include "engine/io_executor.h"
#include "eviction/admission.h"

namespace kvtier::engine {

struct EngineOptions {
  // Eviction policy of each tier, by name (eviction::PolicyNames()).
  std::string device_policy = "lru";
  std::string host_policy = "lru";
  std::string ssd_policy = "lru";
  // Admission filter of the tiers writes go to, by name
  // (eviction::AdmissionNames()): whether a block a write brings into the
  // full tier may take its policy's victim's room, or bypasses the tier
  // (skipped, with the rest of its chain, as a block that finds no room is).
  // "off": every block admitted. (Demotions and promotions are not asked.)
  std::string device_admission = "off";
  std::string host_admission = "off";
  // Admission filter of the ssd: whether a block leaving the host is written
  // to it at all (asked of every demotion, full or not: it guards the
  // disk's writes, its endurance, not its room; no victim is named, so
  // "tinylfu" admits what was looked up at all lately). Refused, the block
  // is dropped, counted in the ssd's TierStats::admission_refused. Blocks
  // written through at commit (ssd_write_through) are not asked.
  std::string ssd_admission = "off";
  // A filter of the caller's for the host tier, used instead of
  // host_admission (replay's oracle, which knows the trace's future). Must
  // outlive the engine.
  eviction::AdmissionFilter* host_admission_filter = nullptr;
  // Source of time for policies and stats. Must outlive the engine.
  const Clock* clock = &SystemClock();
  // Runs the I/O of io_bound tiers (ssd) off the engine's thread. Required
  // when such a tier is given; must outlive the engine, and every
  // completion must have run before the engine is destroyed.
  IoExecutor* io = nullptr;
  // Runs the copies into a tier that copies_async() (a real GPU's arena)
  // off the engine's thread, so an ACQUIRE that promotes host blocks to the
  // device waits for the DMA without stalling everyone else. Separate from
  // `io` so GPU copies (tens of microseconds) never queue behind disk I/O
  // (milliseconds). Null: `io`; both null: the copies run inline. Same
  // lifetime rules as `io`.
  IoExecutor* copy = nullptr;
  // After an SSD write fails (a full disk, an I/O error), demotions to the
  // SSD stop for this long: blocks leaving the host are dropped instead,
  // and the error is logged once for the burst. Default 10 s.
  TimeNs ssd_pause_ns = 10 * kNsPerSec;
  // The SSD's endurance budget: bytes written to it per day (demotions and
  // write-through), 0 = no bound. Spent from a bucket holding an hour's
  // share and refilled at budget / 86,400 s; a block that would overdraw it
  // is not written (a demotion drops it, a write-through skips it), counted
  // in EngineStats::ssd_budget_refused.
  uint64_t ssd_write_budget_per_day = 0;
  // Write-through: every committed block is also written to the ssd tier at
  // once (a shadow copy), so a crash loses nothing committed that fits the
  // disk, and a later demotion costs no write. Default off (write-back: a
  // block reaches the disk when it is evicted from the host).
  bool ssd_write_through = false;
  // Runs the remote tier's calls (network round trips, bounded by its
  // timeouts) off the engine's thread, apart from `io` so that a slow
  // cluster never delays the disk. Required with a remote tier; same
  // lifetime rules as `io`.
  IoExecutor* remote_io = nullptr;
  // Remote write-through: every committed block is also written to the
  // remote tier at once, so other nodes can hit it immediately. Default off
  // (write-back: a block is written out when it leaves this node's memory,
  // from the copy made for the ssd or for nothing).
  bool remote_write_through = false;
  // Record block events (stored, removed per tier) for TakeEvents(): the
  // KV-event stream routers read. Default off (nothing recorded).
  bool record_events = false;
  // Called on the engine's thread when an event is recorded while none is
  // waiting: the daemon schedules a TakeEvents (after a flush window), so
  // the events of the turns in between go out as one batch. May be empty.
  std::function<void()> events_ready;
  // Hints: how many blocks one owner (a session) may protect with hints at
  // once. 0: no bound (the replay simulator's single worker).
  uint64_t max_hinted_blocks_per_owner = 0;
  // Receives one line per event worth an operator's attention (an ssd
  // pause, a checksum failure), at most one per kind every 10 s with a
  // count of what it stands for. Runs on the engine's thread. May be empty.
  std::function<void(const std::string&)> log;
};

}  // namespace kvtier::engine
