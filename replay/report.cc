#include "replay/report.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "common/units.h"

namespace kvtier::replay {
namespace {

// The OPT result of the same capacity, if the sweep has one.
const SimResult* OptAt(const std::vector<SimResult>& all, uint64_t capacity) {
  for (const SimResult& r : all) {
    if (r.policy == "opt" && r.capacity_blocks == capacity) return &r;
  }
  return nullptr;
}

// A run with lookahead hints or an admission filter: one measured against
// its policy's plain run.
bool Variant(const SimResult& r) { return r.lookahead() || !r.admits_all(); }

// The plain run (no lookahead, every block admitted) of `policy` at
// `capacity`, if any.
const SimResult* PlainAt(const std::vector<SimResult>& all, const std::string& policy,
                         uint64_t capacity) {
  for (const SimResult& r : all) {
    if (r.policy == policy && !Variant(r) && r.capacity_blocks == capacity) return &r;
  }
  return nullptr;
}

// The share of its own gap to OPT that a lookahead run's hints (or a run's
// admission filter) close, in block hit rate: (hit(r) - hit(plain)) /
// (hit(opt) - hit(plain)), plain being the same policy without hints and
// admitting every block, at the same capacity. Against plain
// LRU instead, a row of another policy would show mostly that policy's own
// distance from LRU (lfu+1req read -0.99). None for a plain run, without
// both, or where the plain run already scores OPT (no gap to close).
std::optional<double> GapClosed(const std::vector<SimResult>& all, const SimResult& r) {
  if (!Variant(r)) return std::nullopt;
  const SimResult* plain = PlainAt(all, r.policy, r.capacity_blocks);
  const SimResult* opt = OptAt(all, r.capacity_blocks);
  if (plain == nullptr || opt == nullptr) return std::nullopt;
  const double gap = opt->block_hit_rate() - plain->block_hit_rate();
  if (gap <= 1e-12) return std::nullopt;
  return (r.block_hit_rate() - plain->block_hit_rate()) / gap;
}

bool AnyLookahead(const std::vector<SimResult>& all) {
  return std::any_of(all.begin(), all.end(), [](const SimResult& r) { return r.lookahead(); });
}

bool AnyAdmission(const std::vector<SimResult>& all) {
  return std::any_of(all.begin(), all.end(), [](const SimResult& r) { return !r.admits_all(); });
}

// Whether a run kept blocks out: a filter named, or one the adaptive policy
// followed of its own.
bool AnyRefused(const std::vector<SimResult>& all) {
  return AnyAdmission(all) || std::any_of(all.begin(), all.end(), [](const SimResult& r) {
           return r.admission_refused > 0;
         });
}

bool AnyBudgetRefused(const std::vector<SimResult>& all) {
  return std::any_of(all.begin(), all.end(),
                     [](const SimResult& r) { return r.ssd_budget_refused > 0; });
}

std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// Whether the sweep counted the textbook per-block hits (--per-block).
bool AnyPerBlock(const std::vector<SimResult>& all) {
  return std::any_of(all.begin(), all.end(), [](const SimResult& r) { return r.per_block; });
}

// Share of the gap to OPT that hints close, one row per lookahead run's
// label and one column per capacity; empty without a lookahead run beside
// its policy's plain run and OPT.
std::string FormatGapClosed(const std::vector<SimResult>& results) {
  std::set<uint64_t> capacities;
  std::vector<std::string> labels;
  for (const SimResult& r : results) {
    if (!Variant(r) || !PlainAt(results, r.policy, r.capacity_blocks) ||
        !OptAt(results, r.capacity_blocks)) {
      continue;
    }
    capacities.insert(r.capacity_blocks);
    if (std::find(labels.begin(), labels.end(), r.label()) == labels.end()) {
      labels.push_back(r.label());
    }
  }
  if (labels.empty()) return "";
  int width = 14;
  for (const std::string& l : labels) width = std::max(width, static_cast<int>(l.size()));
  char cell[64];
  std::snprintf(cell, sizeof cell, "%-*s", width, "capacity");
  const bool admission = AnyAdmission(results);
  std::string out =
      std::string(admission ? "share of the gap to OPT closed by admission and lookahead hints, "
                              "each run against its policy admitting every block without hints"
                            : "share of the gap to OPT closed by lookahead hints, each run "
                              "against its policy without hints") +
      ", in block hit rate: (hit - hit plain) / (hit opt - hit plain); - where the plain run "
      "already scores OPT\n" +
      std::string(cell);
  for (uint64_t c : capacities) {
    std::snprintf(cell, sizeof cell, " %10llu", static_cast<unsigned long long>(c));
    out += cell;
  }
  out += "\n";
  for (const std::string& l : labels) {
    std::snprintf(cell, sizeof cell, "%-*s", width, l.c_str());
    out += cell;
    for (uint64_t c : capacities) {
      std::string v = "-";
      for (const SimResult& r : results) {
        if (r.label() != l || r.capacity_blocks != c) continue;
        if (const std::optional<double> g = GapClosed(results, r)) v = Fmt("%.3f", *g);
      }
      std::snprintf(cell, sizeof cell, " %10s", v.c_str());
      out += cell;
    }
    out += "\n";
  }
  return out;
}

}  // namespace

std::string FormatTable(const std::vector<SimResult>& results) {
  std::string out;
  char line[512];
  const bool per_block = AnyPerBlock(results);
  const bool lookahead = AnyLookahead(results);
  const bool refusals = AnyRefused(results);
  const bool budget = AnyBudgetRefused(results);
  int width = 14;  // the policy column; wider for long lookahead labels
  for (const SimResult& r : results) width = std::max(width, static_cast<int>(r.label().size()));
  std::snprintf(line, sizeof line, "%-*s %12s %10s %10s %10s%s %10s %12s %12s %12s%s%s%s\n", width,
                "policy", "capacity", "block hit", "token hit", "gap OPT",
                per_block ? "  per-block" : "", "hits ssd", "demotions", "moved", "refs/s",
                lookahead ? "       hinted    hint used  hint yield" : "",
                refusals ? "  not admitted" : "", budget ? "  over budget" : "");
  out += line;
  for (const SimResult& r : results) {
    const SimResult* opt = OptAt(results, r.capacity_blocks);
    const std::string gap =
        opt ? Fmt("%+.4f", r.block_hit_rate() - opt->block_hit_rate()) : std::string("-");
    std::string textbook;
    if (per_block) {
      textbook = r.per_block ? Fmt(" %10.4f", r.per_block_hit_rate()) : "          -";
    }
    std::string hints;
    if (lookahead) {
      char h[64];
      std::snprintf(h, sizeof h, " %12llu %12llu %12llu",
                    static_cast<unsigned long long>(r.hinted_blocks),
                    static_cast<unsigned long long>(r.hints_used),
                    static_cast<unsigned long long>(r.hints_yielded));
      hints = h;
    }
    const std::string refused =
        refusals ? Fmt(" %13.0f", static_cast<double>(r.admission_refused)) : std::string();
    const std::string over =
        budget ? Fmt(" %12.0f", static_cast<double>(r.ssd_budget_refused)) : std::string();
    std::snprintf(line, sizeof line,
                  "%-*s %12llu %10.4f %10.4f %10s%s %10llu %12llu %12s %12.3g%s%s%s\n", width,
                  r.label().c_str(), static_cast<unsigned long long>(r.capacity_blocks),
                  r.block_hit_rate(), r.token_hit_rate(), gap.c_str(), textbook.c_str(),
                  static_cast<unsigned long long>(r.hits_per_tier[2]),
                  static_cast<unsigned long long>(r.demotions), FormatBytes(r.bytes_moved).c_str(),
                  r.refs_per_second(), hints.c_str(), refused.c_str(), over.c_str());
    out += line;
  }
  for (const SimResult& r : results) {
    if (!r.adaptive) continue;
    out += Fmt("%.0f blocks: ", static_cast<double>(r.capacity_blocks)) + r.label() +
           " ended following ";
    std::string rates;
    for (const eviction::CandidateReport& c : r.adaptive->candidates) {
      if (c.followed) out += c.name;
      rates += (rates.empty() ? "" : ", ") + c.name + Fmt(" %.3f", c.overall_sampled_hit_rate) +
               Fmt(" (recent %.3f)", c.sampled_hit_rate);
    }
    out += " after " + std::to_string(r.adaptive->switches) +
           " switches; sampled hit rates over the replay " + rates + " (1 key in " +
           std::to_string(r.adaptive->sample_stride) + ")\n";
  }
  out += FormatGapClosed(results);
  return out;
}

std::string FormatCsv(const std::vector<SimResult>& results) {
  std::string out =
      "policy,capacity_blocks,device_blocks,host_blocks,ssd_blocks,requests,block_refs,"
      "block_hits,block_hit_rate,token_hit_rate,gap_to_opt,hits_device,hits_host,hits_ssd,"
      "demotions,promotions,blocks_moved,bytes_moved,refs_per_second";
  const bool per_block = AnyPerBlock(results);
  const bool lookahead = AnyLookahead(results);
  const bool admission = AnyAdmission(results);
  const bool refusals = AnyRefused(results);
  const bool budget = AnyBudgetRefused(results);
  if (per_block) out += ",per_block_hit_rate";
  if (lookahead)
    out += ",lookahead_requests,lookahead_seconds,hinted_blocks,hints_used,hints_yielded";
  if (refusals) out += ",admission,admission_refused";
  if (lookahead || admission) out += ",gap_closed";
  if (budget) out += ",ssd_budget_refused";
  out += "\n";
  for (const SimResult& r : results) {
    const SimResult* opt = OptAt(results, r.capacity_blocks);
    char line[512];
    std::snprintf(
        line, sizeof line,
        "%s,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%.6f,%.6f,%s,%llu,%llu,%llu,%llu,%llu,"
        "%llu,%llu,%.0f",
        r.policy.c_str(), static_cast<unsigned long long>(r.capacity_blocks),
        static_cast<unsigned long long>(r.device_blocks),
        static_cast<unsigned long long>(r.host_blocks),
        static_cast<unsigned long long>(r.ssd_blocks), static_cast<unsigned long long>(r.requests),
        static_cast<unsigned long long>(r.block_refs),
        static_cast<unsigned long long>(r.block_hits), r.block_hit_rate(), r.token_hit_rate(),
        opt ? Fmt("%.6f", r.block_hit_rate() - opt->block_hit_rate()).c_str() : "",
        static_cast<unsigned long long>(r.hits_per_tier[0]),
        static_cast<unsigned long long>(r.hits_per_tier[1]),
        static_cast<unsigned long long>(r.hits_per_tier[2]),
        static_cast<unsigned long long>(r.demotions), static_cast<unsigned long long>(r.promotions),
        static_cast<unsigned long long>(r.blocks_moved),
        static_cast<unsigned long long>(r.bytes_moved), r.refs_per_second());
    out += line;
    if (per_block) out += r.per_block ? Fmt(",%.6f", r.per_block_hit_rate()) : std::string(",");
    if (lookahead) {
      std::snprintf(line, sizeof line, ",%llu,%g,%llu,%llu,%llu",
                    static_cast<unsigned long long>(r.lookahead_requests), r.lookahead_seconds,
                    static_cast<unsigned long long>(r.hinted_blocks),
                    static_cast<unsigned long long>(r.hints_used),
                    static_cast<unsigned long long>(r.hints_yielded));
      out += line;
    }
    if (refusals) out += "," + r.admission + "," + std::to_string(r.admission_refused);
    if (lookahead || admission) {
      const std::optional<double> closed = GapClosed(results, r);
      out += closed ? Fmt(",%.6f", *closed) : std::string(",");
    }
    if (budget) out += "," + std::to_string(r.ssd_budget_refused);
    out += "\n";
  }
  return out;
}

std::string FormatJson(const std::vector<SimResult>& results) {
  nlohmann::json out = nlohmann::json::array();
  const bool lookahead = AnyLookahead(results);
  const bool admission = AnyAdmission(results);
  for (const SimResult& r : results) {
    nlohmann::json j = {{"policy", r.policy},
                        {"capacity_blocks", r.capacity_blocks},
                        {"device_blocks", r.device_blocks},
                        {"host_blocks", r.host_blocks},
                        {"ssd_blocks", r.ssd_blocks},
                        {"requests", r.requests},
                        {"block_refs", r.block_refs},
                        {"block_hits", r.block_hits},
                        {"block_hit_rate", r.block_hit_rate()},
                        {"token_hit_rate", r.token_hit_rate()},
                        {"hits_per_tier",
                         {{"device", r.hits_per_tier[0]},
                          {"host", r.hits_per_tier[1]},
                          {"ssd", r.hits_per_tier[2]}}},
                        {"demotions", r.demotions},
                        {"promotions", r.promotions},
                        {"blocks_moved", r.blocks_moved},
                        {"bytes_moved", r.bytes_moved},
                        {"quantize_lower", std::string(QuantizeName(r.quantize_lower))},
                        {"refs_per_second", r.refs_per_second()}};
    if (r.adaptive) {
      nlohmann::json candidates = nlohmann::json::object();
      nlohmann::json recent = nlohmann::json::object();
      for (const eviction::CandidateReport& c : r.adaptive->candidates) {
        candidates[c.name] = c.overall_sampled_hit_rate;
        recent[c.name] = c.sampled_hit_rate;
        if (c.followed) j["adaptive_follows"] = c.name;
      }
      j["adaptive_sampled_hit_rates"] = std::move(candidates);
      j["adaptive_recent_sampled_hit_rates"] = std::move(recent);
      j["adaptive_switches"] = r.adaptive->switches;
    }
    if (lookahead || admission) j["label"] = r.label();
    if (lookahead) {
      j["lookahead_requests"] = r.lookahead_requests;
      j["lookahead_seconds"] = r.lookahead_seconds;
      j["hinted_blocks"] = r.hinted_blocks;
      j["hints_used"] = r.hints_used;
      j["hints_yielded"] = r.hints_yielded;
    }
    if (admission || r.admission_refused > 0) {
      j["admission"] = r.admission;
      j["admission_refused"] = r.admission_refused;
    }
    if (r.ssd_budget_refused > 0) j["ssd_budget_refused"] = r.ssd_budget_refused;
    if (const std::optional<double> closed = GapClosed(results, r)) j["gap_closed"] = *closed;
    if (r.per_block) {
      j["per_block_hits"] = r.per_block_hits;
      j["per_block_hit_rate"] = r.per_block_hit_rate();
    }
    if (const SimResult* opt = OptAt(results, r.capacity_blocks)) {
      j["gap_to_opt"] = r.block_hit_rate() - opt->block_hit_rate();
    }
    out.push_back(std::move(j));
  }
  return out.dump(2) + "\n";
}

std::string FormatSvg(const std::vector<SimResult>& results, const std::string& title) {
  constexpr double kW = 720, kH = 440, kLeft = 70, kRight = 170, kTop = 40, kBottom = 60;
  uint64_t lo = UINT64_MAX, hi = 0;
  std::map<std::string, std::vector<const SimResult*>> lines;
  for (const SimResult& r : results) {
    lo = std::min(lo, r.capacity_blocks);
    hi = std::max(hi, r.capacity_blocks);
    lines[r.label()].push_back(&r);
  }
  if (results.empty()) return "<svg xmlns=\"http://www.w3.org/2000/svg\"/>\n";
  const double llo = std::log10(static_cast<double>(std::max<uint64_t>(lo, 1)));
  const double lhi =
      std::max(llo + 1e-9, std::log10(static_cast<double>(std::max<uint64_t>(hi, 1))));
  auto x = [&](uint64_t c) {
    const double v = std::log10(static_cast<double>(std::max<uint64_t>(c, 1)));
    return kLeft + (v - llo) / (lhi - llo) * (kW - kLeft - kRight);
  };
  auto y = [&](double rate) { return kH - kBottom - rate * (kH - kTop - kBottom); };
  // Each line its own colour and dash: 8 colours, then the same colours with
  // the next dash pattern (32 distinct lines); opt keeps a dash of its own.
  static constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                            "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
  static constexpr const char* kDashes[] = {"", "2,3", "9,3,2,3", "1,5"};
  auto dash_attr = [](const char* dash) {
    return *dash == '\0' ? std::string() : std::string(" stroke-dasharray=\"") + dash + "\"";
  };
  std::string s =
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"720\" height=\"440\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"360\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">" + title + "</text>\n";
  // Axes and grid.
  for (int i = 0; i <= 10; i += 2) {
    const double rate = i / 10.0;
    s += "<line x1=\"" + Fmt("%.1f", kLeft) + "\" x2=\"" + Fmt("%.1f", kW - kRight) + "\" y1=\"" +
         Fmt("%.1f", y(rate)) + "\" y2=\"" + Fmt("%.1f", y(rate)) +
         "\" stroke=\"#ddd\"/>\n<text x=\"" + Fmt("%.1f", kLeft - 8) + "\" y=\"" +
         Fmt("%.1f", y(rate) + 4) + "\" text-anchor=\"end\">" + Fmt("%.1f", rate) + "</text>\n";
  }
  std::set<uint64_t> capacities;
  for (const SimResult& r : results) capacities.insert(r.capacity_blocks);
  double last_label = -1e9;
  for (uint64_t c : capacities) {
    if (x(c) - last_label < 48) continue;  // labels that would overlap: keep the first
    last_label = x(c);
    s += "<text x=\"" + Fmt("%.1f", x(c)) + "\" y=\"" + Fmt("%.1f", kH - kBottom + 18) +
         "\" text-anchor=\"middle\">" + std::to_string(c) + "</text>\n";
  }
  s += "<text x=\"" + Fmt("%.1f", (kLeft + kW - kRight) / 2) + "\" y=\"" + Fmt("%.1f", kH - 18) +
       "\" text-anchor=\"middle\">capacity (blocks, log scale)</text>\n";
  s += "<text transform=\"translate(18," + Fmt("%.1f", (kTop + kH - kBottom) / 2) +
       ") rotate(-90)\" text-anchor=\"middle\">token hit rate</text>\n";
  size_t color = 0;
  size_t style = 0;  // lines other than opt
  for (auto& [policy, pts] : lines) {
    std::sort(pts.begin(), pts.end(), [](const SimResult* a, const SimResult* b) {
      return a->capacity_blocks < b->capacity_blocks;
    });
    const size_t i = policy == "opt" ? 0 : style++;
    const char* c = policy == "opt" ? "#000000" : kColors[i % std::size(kColors)];
    const std::string dash =
        dash_attr(policy == "opt" ? "6,4" : kDashes[(i / std::size(kColors)) % std::size(kDashes)]);
    ++color;
    std::string path;
    for (const SimResult* p : pts) {
      path += Fmt("%.1f", x(p->capacity_blocks)) + "," + Fmt("%.1f", y(p->token_hit_rate())) + " ";
      s += "<circle cx=\"" + Fmt("%.1f", x(p->capacity_blocks)) + "\" cy=\"" +
           Fmt("%.1f", y(p->token_hit_rate())) + "\" r=\"3\" fill=\"" + c + "\"/>\n";
    }
    s += std::string("<polyline fill=\"none\" stroke=\"") + c + "\" stroke-width=\"2\"" + dash +
         " points=\"" + path + "\"/>\n";
    const double ly = kTop + 20.0 * static_cast<double>(color);
    s += "<line x1=\"" + Fmt("%.1f", kW - kRight + 15) + "\" x2=\"" +
         Fmt("%.1f", kW - kRight + 40) + "\" y1=\"" + Fmt("%.1f", ly) + "\" y2=\"" +
         Fmt("%.1f", ly) + "\" stroke=\"" + c + "\" stroke-width=\"2\"" + dash + "/>\n<text x=\"" +
         Fmt("%.1f", kW - kRight + 46) + "\" y=\"" + Fmt("%.1f", ly + 4) + "\">" + policy +
         "</text>\n";
  }
  s += "</svg>\n";
  return s;
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) return IoError("cannot write " + path);
  return Status::Ok();
}

Status CheckWritable(const std::string& path) {
  const bool existed = ::access(path.c_str(), F_OK) == 0;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return IoError("cannot write " + path + ": " + std::strerror(errno));
  ::close(fd);
  if (!existed) ::unlink(path.c_str());
  return Status::Ok();
}

}  // namespace kvtier::replay
