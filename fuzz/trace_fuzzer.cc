// Fuzzes the trace readers of replay/trace.h: the input is one trace file,
// Mooncake JSONL or kv-cache-tester JSON (ReadTraces tells them apart by
// content, so one target covers both).
//
// Beyond "no crash, no sanitizer report", a trace that reads must keep
// Trace's contract: requests in time order with finite times, block_refs
// the sum of the ids, and the same file given twice reads as twice the
// requests, each copy in its own id namespace.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "replay/trace.h"

namespace kvtier::replay {
namespace {

void CheckTrace(const Trace& t, uint32_t files) {
  KVTIER_FUZZ_CHECK(t.block_tokens != 0);
  uint64_t refs = 0;
  for (size_t i = 0; i < t.requests.size(); ++i) {
    const TraceRequest& r = t.requests[i];
    KVTIER_FUZZ_CHECK(std::isfinite(r.time_s));
    KVTIER_FUZZ_CHECK(i == 0 || t.requests[i - 1].time_s <= r.time_s);
    KVTIER_FUZZ_CHECK(r.file < files);
    refs += r.blocks.size();
    for (uint32_t b : r.blocks) {
      KVTIER_FUZZ_CHECK(b < t.blocks.size());
      KVTIER_FUZZ_CHECK(t.blocks[b].file == r.file);
    }
  }
  KVTIER_FUZZ_CHECK(refs == t.block_refs);
}

void FuzzTrace(const uint8_t* data, size_t size) {
  static fuzz::MemFile* file = new fuzz::MemFile();  // one per process, never freed
  file->Write(data, size);
  const std::vector<std::string> one = {file->path()};
  auto trace = ReadTraces(one);
  if (!trace.ok()) return;
  CheckTrace(*trace, 1);

  const std::vector<std::string> two = {file->path(), file->path()};
  auto twice = ReadTraces(two);
  KVTIER_FUZZ_CHECK(twice.ok());
  CheckTrace(*twice, 2);
  KVTIER_FUZZ_CHECK(twice->requests.size() == 2 * trace->requests.size());
  KVTIER_FUZZ_CHECK(twice->block_refs == 2 * trace->block_refs);
  KVTIER_FUZZ_CHECK(twice->block_tokens == trace->block_tokens);

  // One after another: the same requests, the second file's none before the
  // first's last (or a clear error when the two would run past 1e9 s).
  auto after = ReadTraces(two, Combine::kConcat);
  if (!after.ok()) {
    KVTIER_FUZZ_CHECK(after.status().message().find("run past 1e9 s") != std::string_view::npos);
    return;
  }
  CheckTrace(*after, 2);
  KVTIER_FUZZ_CHECK(after->requests.size() == twice->requests.size());
  KVTIER_FUZZ_CHECK(after->block_refs == twice->block_refs);
  double first_end = -1e300;
  bool second_seen = false;
  for (const TraceRequest& r : after->requests) {
    if (r.file == 0) {
      KVTIER_FUZZ_CHECK(!second_seen);
      first_end = std::max(first_end, r.time_s);
    } else {
      second_seen = true;
      KVTIER_FUZZ_CHECK(r.time_s >= first_end);
    }
  }
}

}  // namespace
}  // namespace kvtier::replay

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvtier::replay::FuzzTrace(data, size);
  return 0;
}
