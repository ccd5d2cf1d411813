// Reports of a simulate-mode sweep: a table for people, CSV and JSON for
// scripts, and an SVG plot (hit rate against capacity, one line per policy).
#pragma once

#include <string>
#include <vector>

#include "common/result.h"
#include "replay/simulator.h"

namespace kvtier::replay {

// Aligned table, one row per (policy, capacity), with the gap to OPT where
// an OPT run of the same capacity is among `results`.
std::string FormatTable(const std::vector<SimResult>& results);
// One header line, then one line per result.
std::string FormatCsv(const std::vector<SimResult>& results);
// An array of records with at least policy, capacity_blocks,
// block_hit_rate and token_hit_rate.
std::string FormatJson(const std::vector<SimResult>& results);
// Token hit rate (y) against total capacity in blocks (x, log scale).
std::string FormatSvg(const std::vector<SimResult>& results, const std::string& title);

Status WriteFile(const std::string& path, const std::string& text);

}  // namespace kvtier::replay
