// Reports of a simulate-mode sweep: a table for people, CSV and JSON for
// scripts, and an SVG plot (hit rate against capacity, one line per policy).
#pragma once

#include <string>
#include <vector>

#include "common/result.h"
#include "replay/simulator.h"

namespace kvtier::replay {

// Reports name a run by SimResult::label(): the policy, and its lookahead
// if any ("lru+10req", "lru+60s"). Without lookahead runs among `results`
// every report reads as before lookahead existed.

// Aligned table, one row per (policy, lookahead, capacity), with the gap to
// OPT where an OPT run of the same capacity is among `results`. With
// lookahead runs: the hint counts, and where the same policy without hints
// and OPT of the same capacity ran, the share of that policy's gap to OPT
// each lookahead run closes.
std::string FormatTable(const std::vector<SimResult>& results);
// One header line, then one line per result. `policy` stays the policy
// alone; with lookahead runs, the columns lookahead_requests,
// lookahead_seconds, hinted_blocks, hints_used, hints_yielded and
// gap_closed (empty where not defined) follow.
std::string FormatCsv(const std::vector<SimResult>& results);
// An array of records with at least policy, capacity_blocks,
// block_hit_rate and token_hit_rate; with lookahead runs also label,
// lookahead_requests, lookahead_seconds, the hint counts and gap_closed.
std::string FormatJson(const std::vector<SimResult>& results);
// Token hit rate (y) against total capacity in blocks (x, log scale), one
// line per label.
std::string FormatSvg(const std::vector<SimResult>& results, const std::string& title);

Status WriteFile(const std::string& path, const std::string& text);

// Whether `path` can be written, checked before a replay that may run for
// minutes rather than after it: opens it for writing without truncating it,
// and removes it again if this call created it.
Status CheckWritable(const std::string& path);

}  // namespace kvtier::replay
