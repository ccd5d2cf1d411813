// The kvtier CLI's subcommands. Each Add*Command registers one on `app`;
// when it runs, its exit code is stored in *exit_code.
#pragma once

#include <CLI/CLI.hpp>

namespace kvtier::cli {

void AddStatsCommand(CLI::App* app, int* exit_code);
void AddLookupCommand(CLI::App* app, int* exit_code);
void AddPutCommand(CLI::App* app, int* exit_code);
void AddGetCommand(CLI::App* app, int* exit_code);
void AddBenchCommand(CLI::App* app, int* exit_code);
void AddReplayCommand(CLI::App* app, int* exit_code);
void AddPlanCommand(CLI::App* app, int* exit_code);

}  // namespace kvtier::cli
