#include "replay/trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>

#include "common/hash.h"

namespace kvtier::replay {
namespace {

using nlohmann::json;

constexpr uint32_t kMooncakeBlockTokens = 512;
// Bounds on what a trace may say (trace.h): deeper sub-agent nesting would
// exhaust the stack of the recursive reader; later times overflow the
// nanosecond clocks a replay schedules them on.
constexpr int kMaxSubAgentDepth = 64;
constexpr double kMaxAbsTimeS = 1e9;

Status Bad(const std::string& path, const std::string& where, const std::string& what) {
  return InvalidArgumentError(path + (where.empty() ? "" : ":" + where) + ": " + what);
}

Status ReadRequest(const json& j, const std::string& path, const std::string& where, bool mooncake,
                   double time_offset_s, uint32_t file, int depth, TraceBuilder* out);

// A field's value as the trace wrote it, cut short if long.
std::string Shown(const json& v) {
  std::string text = v.dump();
  return text.size() <= 40 ? text : text.substr(0, 37) + "...";
}

// What a request's own fields must be, each named when it is wrong: a
// missing one, a negative or fractional length, ids that are not a list.
Status CheckFields(const json& j, const std::string& path, const std::string& where, const char* t,
                   const char* in) {
  const auto missing = [&](const char* field) {
    return Bad(path, where,
               std::string("a request needs ") + t + ", " + in + " and hash_ids; " + field +
                   " is missing");
  };
  if (!j.contains(t)) return missing(t);
  if (!j.contains(in)) return missing(in);
  if (!j.contains("hash_ids")) return missing("hash_ids");
  if (!j[t].is_number()) {
    return Bad(path, where, std::string(t) + " is " + Shown(j[t]) + ", not a number");
  }
  if (!j[in].is_number_unsigned()) {
    return Bad(path, where,
               std::string(in) + " is " + Shown(j[in]) + ", not a non-negative integer");
  }
  if (!j["hash_ids"].is_array()) return Bad(path, where, "hash_ids is not a list");
  return Status::Ok();
}

// A sub-agent's conversation: kv-cache-tester requests sharing the file's id
// space, their times relative to `start_s`.
Status ReadSubAgent(const json& requests, const std::string& path, const std::string& where,
                    double start_s, uint32_t file, int depth, TraceBuilder* out) {
  for (size_t i = 0; i < requests.size(); ++i) {
    KVTIER_RETURN_IF_ERROR(ReadRequest(requests[i], path,
                                       where + "/requests[" + std::to_string(i) + "]", false,
                                       start_s, file, depth + 1, out));
  }
  return Status::Ok();
}

// Reads a request object of either format's field names.
Status ReadRequest(const json& j, const std::string& path, const std::string& where, bool mooncake,
                   double time_offset_s, uint32_t file, int depth, TraceBuilder* out) {
  if (!j.is_object()) return Bad(path, where, "a request is not an object");
  if (depth > kMaxSubAgentDepth) {
    return Bad(path, where,
               "sub-agents nested deeper than " + std::to_string(kMaxSubAgentDepth) + " levels");
  }
  // kv-cache-tester's sub-agent entry: its own start "t" and "requests", and no
  // request of its own (no "in", no "hash_ids").
  if (!mooncake && !j.contains("in") && !j.contains("hash_ids") && j.contains("t") &&
      j["t"].is_number() && j.contains("requests") && j["requests"].is_array()) {
    const double start_s = time_offset_s + j["t"].get<double>();
    if (!(std::abs(start_s) <= kMaxAbsTimeS)) {
      return Bad(path, where, "time is not within 1e9 s of the trace's start");
    }
    return ReadSubAgent(j["requests"], path, where, start_s, file, depth, out);
  }
  TraceRequest r;
  r.file = file;
  const char* t = mooncake ? "timestamp" : "t";
  const char* in = mooncake ? "input_length" : "in";
  const char* outk = mooncake ? "output_length" : "out";
  if (Status s = CheckFields(j, path, where, t, in); !s.ok()) return s;
  // Mooncake timestamps are milliseconds; kv-cache-tester's seconds.
  r.time_s = time_offset_s + j[t].get<double>() / (mooncake ? 1000.0 : 1.0);
  if (!(std::abs(r.time_s) <= kMaxAbsTimeS)) {
    return Bad(path, where, "time is not within 1e9 s of the trace's start");
  }
  r.input_tokens = j[in].get<uint64_t>();
  if (j.contains(outk) && j[outk].is_number_unsigned()) r.output_tokens = j[outk].get<uint64_t>();
  std::vector<uint64_t> ids;
  ids.reserve(j["hash_ids"].size());
  for (const json& id : j["hash_ids"]) {
    if (!id.is_number_unsigned()) return Bad(path, where, "hash_ids must be non-negative integers");
    ids.push_back(id.get<uint64_t>());
  }
  const double time_s = r.time_s;
  if (Status s = out->Add(std::move(r), ids); !s.ok()) {
    return Bad(path, where, std::string(s.message()));
  }
  // A request that spawned a sub-agent carries its conversation, timed from
  // the request.
  if (j.contains("requests") && j["requests"].is_array()) {
    return ReadSubAgent(j["requests"], path, where, time_s, file, depth, out);
  }
  return Status::Ok();
}

// The whole file, read once into one string.
Result<std::string> Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return NotFoundError("cannot open trace " + path);
  const std::streamoff size = in.tellg();
  if (size < 0) return IoError("cannot read trace " + path);
  std::string text(static_cast<size_t>(size), '\0');
  in.seekg(0);
  if (!in.read(text.data(), size)) return IoError("cannot read trace " + path);
  return text;
}

Status ReadFile(const std::string& path, uint32_t file, Trace* trace, TraceBuilder* out) {
  KVTIER_ASSIGN_OR_RETURN(std::string text, Slurp(path));
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return Bad(path, "", "empty trace");

  // kv-cache-tester: one JSON document with "requests".
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_discarded() && doc.is_object() && doc.contains("requests")) {
    if (!doc.contains("block_size") || !doc["block_size"].is_number_unsigned() ||
        doc["block_size"].get<uint64_t>() == 0 ||
        doc["block_size"].get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
      return Bad(path, "", "a kv-cache-tester trace needs block_size, a positive 32-bit integer");
    }
    if (!doc["requests"].is_array()) return Bad(path, "", "requests is not an array");
    const auto block = doc["block_size"].get<uint32_t>();
    if (trace->block_tokens != 0 && trace->block_tokens != block) {
      return Bad(path, "",
                 "block size " + std::to_string(block) + " differs from " +
                     std::to_string(trace->block_tokens) + " of earlier files");
    }
    trace->block_tokens = block;
    for (size_t i = 0; i < doc["requests"].size(); ++i) {
      KVTIER_RETURN_IF_ERROR(ReadRequest(
          doc["requests"][i], path, "requests[" + std::to_string(i) + "]", false, 0, file, 0, out));
    }
    return Status::Ok();
  }

  // Mooncake JSONL: one request per line.
  if (trace->block_tokens != 0 && trace->block_tokens != kMooncakeBlockTokens) {
    return Bad(path, "",
               "Mooncake traces have 512-token blocks; earlier files had " +
                   std::to_string(trace->block_tokens));
  }
  trace->block_tokens = kMooncakeBlockTokens;
  doc = json();  // (the failed parse's)
  const std::string_view all = text;
  size_t n = 0;
  for (size_t at = 0; at < all.size();) {
    const size_t end = std::min(all.find('\n', at), all.size());
    const std::string_view line = all.substr(at, end - at);
    at = end + 1;
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    json j = json::parse(line.begin(), line.end(), nullptr, false);
    if (j.is_discarded()) return Bad(path, std::to_string(n), "not JSON");
    KVTIER_RETURN_IF_ERROR(ReadRequest(j, path, std::to_string(n), true, 0, file, 0, out));
  }
  return Status::Ok();
}

}  // namespace

Result<Trace> ReadTraces(std::span<const std::string> paths, Combine combine) {
  if (paths.empty()) return InvalidArgumentError("no trace files");
  Trace trace;
  TraceBuilder builder(&trace);
  try {
    double end_s = 0;  // kConcat: where the files read so far ended
    for (size_t f = 0; f < paths.size(); ++f) {
      const size_t first = trace.requests.size();
      KVTIER_RETURN_IF_ERROR(ReadFile(paths[f], static_cast<uint32_t>(f), &trace, &builder));
      if (combine != Combine::kConcat || first == trace.requests.size()) continue;
      auto [lo, hi] = std::minmax_element(
          trace.requests.begin() + static_cast<std::ptrdiff_t>(first), trace.requests.end(),
          [](const TraceRequest& a, const TraceRequest& b) { return a.time_s < b.time_s; });
      // end + (t - first): exact where t is the file's first, never below end.
      const double start = f == 0 ? 0 : end_s;
      const double first_s = lo->time_s;
      const double last = start + (hi->time_s - first_s);
      if (!(std::abs(last) <= kMaxAbsTimeS)) {
        return Bad(paths[f], "", "one after another, the files run past 1e9 s");
      }
      for (size_t i = first; i < trace.requests.size(); ++i) {
        trace.requests[i].time_s = start + (trace.requests[i].time_s - first_s);
      }
      end_s = last;
    }
  } catch (const std::exception& e) {  // nlohmann's type errors, allocation
    return InvalidArgumentError(std::string("reading traces: ") + e.what());
  }
  std::stable_sort(
      trace.requests.begin(), trace.requests.end(),
      [](const TraceRequest& a, const TraceRequest& b) { return a.time_s < b.time_s; });
  return trace;
}

std::vector<uint64_t> Trace::IdsOf(const TraceRequest& r) const {
  std::vector<uint64_t> ids;
  ids.reserve(r.blocks.size());
  for (uint32_t b : r.blocks) ids.push_back(blocks[b].id);
  return ids;
}

uint64_t Trace::MemoryBytes() const {
  uint64_t bytes =
      requests.capacity() * sizeof(TraceRequest) + blocks.capacity() * sizeof(TraceBlock);
  for (const TraceRequest& r : requests) bytes += r.blocks.capacity() * sizeof(uint32_t);
  return bytes;
}

// An open-addressing table of block numbers, hashed by (file, id) and
// compared through the trace's blocks: 4 bytes a slot, at most half full
// (8 to 16 bytes a distinct block while the trace is read).
struct TraceBuilder::Numbers {
  static constexpr uint32_t kEmpty = UINT32_MAX;
  std::vector<uint32_t> slots = std::vector<uint32_t>(1024, kEmpty);

  static uint64_t Hash(uint32_t file, uint64_t id) { return Mix64(id ^ Mix64(uint64_t{file} + 1)); }

  // The slot holding (file, id), or the empty one where it would go.
  size_t Find(const std::vector<TraceBlock>& blocks, uint32_t file, uint64_t id) const {
    const size_t mask = slots.size() - 1;
    for (size_t i = Hash(file, id) & mask;; i = (i + 1) & mask) {
      const uint32_t b = slots[i];
      if (b == kEmpty || (blocks[b].id == id && blocks[b].file == file)) return i;
    }
  }

  void Grow(const std::vector<TraceBlock>& blocks) {
    std::vector<uint32_t> old(slots.size() * 2, kEmpty);
    old.swap(slots);
    for (uint32_t b : old) {
      if (b != kEmpty) slots[Find(blocks, blocks[b].file, blocks[b].id)] = b;
    }
  }
};

TraceBuilder::TraceBuilder(Trace* trace) : trace_(trace), numbers_(std::make_unique<Numbers>()) {
  for (uint32_t b = 0; b < trace_->blocks.size(); ++b) {
    if (2 * (static_cast<size_t>(b) + 1) > numbers_->slots.size()) numbers_->Grow(trace_->blocks);
    const TraceBlock& tb = trace_->blocks[b];
    numbers_->slots[numbers_->Find(trace_->blocks, tb.file, tb.id)] = b;
  }
}

TraceBuilder::~TraceBuilder() = default;

Status TraceBuilder::Add(TraceRequest r, std::span<const uint64_t> ids) {
  std::vector<TraceBlock>& blocks = trace_->blocks;
  r.blocks.clear();
  r.blocks.reserve(ids.size());
  for (uint64_t id : ids) {
    size_t slot = numbers_->Find(blocks, r.file, id);
    uint32_t b = numbers_->slots[slot];
    if (b == Numbers::kEmpty) {
      if (blocks.size() >= Numbers::kEmpty) {
        return InvalidArgumentError("more than 2^32 - 1 distinct blocks");
      }
      b = static_cast<uint32_t>(blocks.size());
      blocks.push_back(TraceBlock{r.file, id});
      numbers_->slots[slot] = b;
      if (2 * blocks.size() > numbers_->slots.size()) numbers_->Grow(blocks);
    }
    r.blocks.push_back(b);
  }
  trace_->block_refs += r.blocks.size();
  trace_->requests.push_back(std::move(r));
  return Status::Ok();
}

}  // namespace kvtier::replay
