// Fuzzes kvtierd's configuration reader (daemon/config.h): the input is a
// TOML file given to LoadConfigFile, whose result is then validated as the
// daemon does at start-up. LoadConfigFile takes a path, so the input goes
// through an in-memory file (fuzz::MemFile).
//
// Beyond "no crash, no sanitizer report": every error names the file, as
// LoadConfigFile promises.
#include <string>

#include "daemon/config.h"
#include "fuzz_util.h"

namespace kvtier::daemon {
namespace {

void FuzzConfig(const uint8_t* data, size_t size) {
  static fuzz::MemFile* file = new fuzz::MemFile();  // one per process, never freed
  file->Write(data, size);
  auto config = LoadConfigFile(file->path());
  if (!config.ok()) {
    KVTIER_FUZZ_CHECK(config.status().message().find(file->path()) != std::string::npos);
    return;
  }
  // What kvtierd does next with a configuration that reads.
  config->Validate().IgnoreError();
}

}  // namespace
}  // namespace kvtier::daemon

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvtier::daemon::FuzzConfig(data, size);
  return 0;
}
