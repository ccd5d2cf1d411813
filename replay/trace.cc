#include "replay/trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

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
                   double time_offset_s, uint32_t file, int depth, std::vector<TraceRequest>* out);

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
                    double start_s, uint32_t file, int depth, std::vector<TraceRequest>* out) {
  for (size_t i = 0; i < requests.size(); ++i) {
    KVTIER_RETURN_IF_ERROR(ReadRequest(requests[i], path,
                                       where + "/requests[" + std::to_string(i) + "]", false,
                                       start_s, file, depth + 1, out));
  }
  return Status::Ok();
}

// Reads a request object of either format's field names.
Status ReadRequest(const json& j, const std::string& path, const std::string& where, bool mooncake,
                   double time_offset_s, uint32_t file, int depth, std::vector<TraceRequest>* out) {
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
  r.ids.reserve(j["hash_ids"].size());
  for (const json& id : j["hash_ids"]) {
    if (!id.is_number_unsigned()) return Bad(path, where, "hash_ids must be non-negative integers");
    r.ids.push_back(id.get<uint64_t>());
  }
  out->push_back(std::move(r));
  // A request that spawned a sub-agent carries its conversation, timed from
  // the request.
  if (j.contains("requests") && j["requests"].is_array()) {
    return ReadSubAgent(j["requests"], path, where, out->back().time_s, file, depth, out);
  }
  return Status::Ok();
}

Status ReadFile(const std::string& path, uint32_t file, Trace* trace) {
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot open trace " + path);
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
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
      KVTIER_RETURN_IF_ERROR(ReadRequest(doc["requests"][i], path,
                                         "requests[" + std::to_string(i) + "]", false, 0, file, 0,
                                         &trace->requests));
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
  std::istringstream lines(text);
  std::string line;
  for (size_t n = 1; std::getline(lines, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded()) return Bad(path, std::to_string(n), "not JSON");
    KVTIER_RETURN_IF_ERROR(
        ReadRequest(j, path, std::to_string(n), true, 0, file, 0, &trace->requests));
  }
  return Status::Ok();
}

}  // namespace

Result<Trace> ReadTraces(std::span<const std::string> paths, Combine combine) {
  if (paths.empty()) return InvalidArgumentError("no trace files");
  Trace trace;
  try {
    double end_s = 0;  // kConcat: where the files read so far ended
    for (size_t f = 0; f < paths.size(); ++f) {
      const size_t first = trace.requests.size();
      KVTIER_RETURN_IF_ERROR(ReadFile(paths[f], static_cast<uint32_t>(f), &trace));
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
  for (const TraceRequest& r : trace.requests) trace.block_refs += r.ids.size();
  return trace;
}

}  // namespace kvtier::replay
