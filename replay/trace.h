// Recorded request traces with KV-block identity (the formats: tests/data/README.md):
// the Mooncake JSONL format and the kv-cache-tester JSON format.
//
// Block ids are namespaced per file, so mixing files never makes two
// unrelated prompts share a block: a block is (file, id).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"

namespace kvtier::replay {

struct TraceRequest {
  double time_s = 0;  // since the trace's start; finite, within +-1e9 s
  uint64_t input_tokens = 0;
  uint64_t output_tokens = 0;
  uint32_t file = 0;             // which input file (the id namespace)
  std::vector<uint32_t> blocks;  // the request's full blocks, prefix-chained: Trace::blocks numbers
};

// A block as the trace named it: the id, in its file's id space.
struct TraceBlock {
  uint32_t file = 0;
  uint64_t id = 0;
  bool operator==(const TraceBlock&) const = default;
};

// What a trace costs to hold: 4 bytes a block reference (its number) and 16
// a distinct block (its file and id), plus the requests' own few dozen
// bytes; a replay adds its policy's and OPT's per-block state.
struct Trace {
  uint32_t block_tokens = 0;           // > 0 in every trace ReadTraces returns
  std::vector<TraceRequest> requests;  // in time order
  std::vector<TraceBlock> blocks;      // by number, in order of first appearance
  uint64_t block_refs = 0;             // Σ blocks over requests

  // The ids `r` names, as the trace wrote them.
  std::vector<uint64_t> IdsOf(const TraceRequest& r) const;
  // Bytes the trace holds in memory (the vectors' capacity).
  uint64_t MemoryBytes() const;
};

// Numbers the blocks of a trace being built as they first appear, (file,
// id) -> number; at most 2^32 - 1 distinct blocks.
class TraceBuilder {
 public:
  explicit TraceBuilder(Trace* trace);
  ~TraceBuilder();
  TraceBuilder(const TraceBuilder&) = delete;
  TraceBuilder& operator=(const TraceBuilder&) = delete;

  // Appends `r` (its blocks replaced by those of `ids`, in file r.file) to
  // the trace's requests, in the order given (ReadTraces sorts by time).
  Status Add(TraceRequest r, std::span<const uint64_t> ids);

 private:
  struct Numbers;
  Trace* trace_;
  std::unique_ptr<Numbers> numbers_;
};

// How the requests of several files come together. Each file keeps its own
// id space either way.
enum class Combine {
  kInterleave,  // by their own times: every file starts at its t = 0, together
  kConcat,      // one after another: each file starts where the one before ended
};

// Reads one or more trace files; the format is recognised by content (a
// JSON object with "requests": kv-cache-tester; one object per line:
// Mooncake, whose blocks are 512 tokens). Files of different block sizes
// cannot be mixed. Requests of several files are combined as `combine` says
// (sessions recorded days apart, each from t = 0, would all run at once when
// interleaved).
// kv-cache-tester sub-agents, an entry with its own "t" and "requests" and no
// "in"/"hash_ids" (or "requests" nested in a request), are read in their
// file's id space, each request at the sub-agent's start + its own "t".
// InvalidArgument names the file and line of anything malformed, including
// a block size of 0, a time beyond 1e9 s and sub-agents nested more than 64
// deep (any input file gives a clear error; none exhausts the stack).
Result<Trace> ReadTraces(std::span<const std::string> paths,
                         Combine combine = Combine::kInterleave);

}  // namespace kvtier::replay
