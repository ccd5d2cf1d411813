// kvtier: the command-line client of kvtierd (stats, lookup, put, get, bench),
// the replay tool and the capacity planner.
#include <CLI/CLI.hpp>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"kvtier: talk to kvtierd, the KV-cache tiering daemon"};
  app.require_subcommand(1);
  int exit_code = 0;
  kvtier::cli::AddStatsCommand(&app, &exit_code);
  kvtier::cli::AddLookupCommand(&app, &exit_code);
  kvtier::cli::AddPutCommand(&app, &exit_code);
  kvtier::cli::AddGetCommand(&app, &exit_code);
  kvtier::cli::AddBenchCommand(&app, &exit_code);
  kvtier::cli::AddReplayCommand(&app, &exit_code);
  kvtier::cli::AddPlanCommand(&app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
