// Test support: child processes (a daemon, a Redis node, a command) started,
// waited for and read, written once for every test binary.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace kvtier::testing {

// Starts `argv` (argv[0] a path, or a name looked up on PATH) with its
// standard output and error appended to `log_path`; returns its pid. A child
// that cannot exec prints why into the log and exits 127.
pid_t SpawnLogged(const std::vector<std::string>& argv, const std::string& log_path);

// Waits for `pid` to exit, at most `timeout`; then SIGKILLs it. Returns its
// wait status, or -1 when it had to be killed.
int WaitForExit(pid_t pid, std::chrono::milliseconds timeout);

// Runs `argv` (argv[0] found on PATH) and returns its standard output
// (standard error is discarded); `status` gets the wait status.
std::string RunCapture(const std::vector<std::string>& argv, int* status = nullptr);

// Runs a shell command; its exit status (-1 when it did not exit) and
// everything it printed, stderr included.
std::pair<int, std::string> Shell(const std::string& cmd);

// The whole file (a child's log); empty if it cannot be read.
std::string ReadFile(const std::string& path);

}  // namespace kvtier::testing
