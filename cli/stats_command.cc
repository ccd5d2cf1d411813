// kvtier stats: the daemon's figures (the same ones /metrics serves, from
// the same snapshot) as tables for a person, as JSON for scripts, or
// refreshed in place with --watch.
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "client/internal/json.h"

namespace kvtier::cli {
namespace {

using Entries = std::vector<std::pair<std::string, std::string>>;

struct StatsOptions {
  ConnectFlags conn;
  bool json = false;
  bool raw = false;
  bool watch = false;
  double interval_s = 2.0;
  uint64_t count = 0;  // refreshes with --watch; 0 = until interrupted
};

constexpr const char* kTiers[] = {"device", "host", "ssd"};
constexpr const char* kOps[] = {"hello",   "lookup",        "allocate", "commit", "abort",
                                "acquire", "release",       "put",      "get",    "remove",
                                "stats",   "set_retention", "hint"};

// One STATS reply, looked up by name.
class Figures {
 public:
  explicit Figures(const Entries& entries) : map_(entries.begin(), entries.end()) {}

  std::string Text(const std::string& name) const {
    auto it = map_.find(name);
    return it == map_.end() ? "" : it->second;
  }
  uint64_t Num(const std::string& name) const {
    const std::string v = Text(name);
    uint64_t n = 0;
    std::from_chars(v.data(), v.data() + v.size(), n);
    return n;
  }
  // The entries whose names start with `prefix`, that prefix cut off.
  std::vector<std::pair<std::string, std::string>> WithPrefix(const std::string& prefix) const {
    std::vector<std::pair<std::string, std::string>> out;
    for (auto it = map_.lower_bound(prefix); it != map_.end() && it->first.starts_with(prefix);
         ++it) {
      out.emplace_back(it->first.substr(prefix.size()), it->second);
    }
    return out;
  }
  // A comma-separated list of numbers ("latency_bounds_us", buckets).
  std::vector<uint64_t> List(const std::string& name) const {
    std::vector<uint64_t> out;
    const std::string v = Text(name);
    for (size_t at = 0; at < v.size();) {
      size_t end = v.find(',', at);
      if (end == std::string::npos) end = v.size();
      uint64_t n = 0;
      std::from_chars(v.data() + at, v.data() + end, n);
      out.push_back(n);
      at = end + 1;
    }
    return out;
  }

 private:
  std::map<std::string, std::string> map_;
};

std::string Percent(uint64_t part, uint64_t whole) {
  if (whole == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%",
                100.0 * static_cast<double>(part) / static_cast<double>(whole));
  return buf;
}

std::string Micros(double us) {
  char buf[32];
  if (us < 1000) {
    std::snprintf(buf, sizeof buf, "%.0f us", us);
  } else if (us < 1e6) {
    std::snprintf(buf, sizeof buf, "%.2f ms", us / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f s", us / 1e6);
  }
  return buf;
}

// The q-quantile of a histogram (per-bucket counts; the last bucket is
// above the last bound), interpolated inside its bucket as Prometheus's
// histogram_quantile() does. "-" without samples.
std::string Quantile(double q, const std::vector<uint64_t>& bounds_us,
                     const std::vector<uint64_t>& counts) {
  uint64_t total = 0;
  for (uint64_t c : counts) total += c;
  if (total == 0 || counts.size() != bounds_us.size() + 1) return "-";
  const double rank = q * static_cast<double>(total);
  uint64_t below = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (static_cast<double>(below + counts[i]) >= rank && counts[i] > 0) {
      if (i == bounds_us.size()) return "> " + Micros(static_cast<double>(bounds_us.back()));
      const double lo = i == 0 ? 0 : static_cast<double>(bounds_us[i - 1]);
      const double hi = static_cast<double>(bounds_us[i]);
      return Micros(lo + (hi - lo) * (rank - static_cast<double>(below)) /
                             static_cast<double>(counts[i]));
    }
    below += counts[i];
  }
  return "-";
}

// Left-aligned columns, two spaces apart.
class Table {
 public:
  void Row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  bool empty() const { return rows_.empty(); }
  void Print() const {
    std::vector<size_t> width;
    for (const auto& r : rows_) {
      width.resize(std::max(width.size(), r.size()));
      for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
    }
    for (const auto& r : rows_) {
      std::string line;
      for (size_t i = 0; i < r.size(); ++i) {
        line += r[i];
        if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 2, ' ');
      }
      std::printf("%s\n", line.c_str());
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

// "lru", or for the adaptive policy "adaptive: lru (leaf-lru 0.41, lru 0.43,
// s3fifo 0.39; 2 switches)": what it follows, each candidate's sampled hit
// rate; with an admission filter, "; admission seen: 12 refused" after it,
// and with none set but blocks kept out by the filter the adaptive policy
// followed (lru/seen), "; 12 kept out".
std::string Policy(const Figures& f, const std::string& p) {
  const std::string admission = f.Text(p + "admission");
  const uint64_t refused = f.Num(p + "admission_refused");
  std::string filter;
  if (!admission.empty() && admission != "off") {
    filter = "; admission " + admission + ": " + Int(refused) + " refused";
  } else if (refused > 0) {
    filter = "; " + Int(refused) + " kept out";
  }
  std::string out = f.Text(p + "policy");
  const std::string follows = f.Text(p + "policy_follows");
  if (follows.empty()) return out + filter;
  out += ": " + follows + " (";
  for (const char* c : {"leaf-lru", "lru", "s3fifo", "lru/seen", "leaf-lru/seen"}) {
    const std::string rate = f.Text(p + "candidate." + c + ".sampled_hit_rate");
    if (rate.empty()) continue;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s %.2f, ", c, std::strtod(rate.c_str(), nullptr));
    out += buf;
  }
  return out + Int(f.Num(p + "policy_switches")) + " switches)" + filter;
}

void PrintTiers(const Figures& f) {
  Table t;
  t.Row({"tier", "capacity", "used", "blocks", "pinned", "lookup hits", "acquire hits", "evictions",
         "demoted in", "promoted in", "moved in", "policy"});
  for (const char* tier : kTiers) {
    const std::string p = std::string("tier.") + tier + ".";
    if (f.Num(p + "present") == 0) {
      t.Row({tier, "off"});
      continue;
    }
    const uint64_t capacity = f.Num(p + "capacity_bytes");
    const uint64_t used = f.Num(p + "used_bytes");
    t.Row({f.Num(p + "emulated") != 0 ? std::string(tier) + " (emulated)" : tier,
           FormatBytes(capacity), FormatBytes(used) + " (" + Percent(used, capacity) + ")",
           Int(f.Num(p + "blocks")), Int(f.Num(p + "pinned_blocks")), Int(f.Num(p + "lookup_hits")),
           Int(f.Num(p + "hits")), Int(f.Num(p + "evictions")), Int(f.Num(p + "demotions_in")),
           Int(f.Num(p + "promotions_in")), FormatBytes(f.Num(p + "bytes_in")), Policy(f, p)});
  }
  // The remote tier holds what the cluster holds (shared, not accounted
  // here): its row has hits and traffic, and whether it is paused.
  if (f.Num("tier.remote.present") == 0) {
    t.Row({"remote", "off"});
  } else {
    t.Row({f.Num("tier.remote.paused") != 0 ? "remote (PAUSED)" : "remote", "shared", "-",
           Int(f.Num("tier.remote.written_blocks")) + " written", "-",
           Int(f.Num("tier.remote.lookup_hits")), Int(f.Num("tier.remote.hits")), "-", "-", "-",
           FormatBytes(f.Num("tier.remote.bytes_read")), "cluster's own"});
  }
  t.Print();
}

// The remote tier's traffic and failures, and the KV events; one line each
// when on.
void PrintRemoteAndEvents(const Figures& f) {
  Table t;
  if (f.Num("tier.remote.present") != 0) {
    t.Row({"remote", f.Text("tier.remote.description")});
    t.Row(
        {"", Int(f.Num("tier.remote.hits")) + " blocks read, " +
                 Int(f.Num("tier.remote.read_misses")) + " missing, " +
                 Int(f.Num("tier.remote.corrupt")) + " not the block (misses" +
                 (f.Num("tier.remote.corrupt") != 0
                      ? ": " + Int(f.Num("tier.remote.corrupt_sealing")) + " sealing, " +
                            Int(f.Num("tier.remote.corrupt_stale")) + " stale"
                      : std::string()) +
                 "); " + Int(f.Num("tier.remote.written_blocks")) + " written (" +
                 FormatBytes(f.Num("tier.remote.bytes_written")) + "), " +
                 Int(f.Num("tier.remote.write_dropped")) + " not written; " +
                 Int(f.Num("tier.remote.errors")) + " errors, " + Int(f.Num("tier.remote.pauses")) +
                 " pauses" +
                 (f.Num("tier.remote.paused") != 0 ? "; PAUSED: " + f.Text("tier.remote.last_error")
                                                   : std::string())});
  }
  if (f.Num("events.enabled") != 0) {
    t.Row({"events", Int(f.Num("events.batches_published")) + " batches (" +
                         Int(f.Num("events.events_published")) + " events) published, " +
                         Int(f.Num("events.batches_dropped")) + " dropped, " +
                         Int(f.Num("events.replay_requests")) + " replays"});
  }
  if (!t.empty()) {
    std::printf("\n");
    t.Print();
  }
}

void PrintTotals(const Figures& f) {
  const uint64_t asked = f.Num("lookup_keys");
  const uint64_t hit = f.Num("lookup_hits");
  Table t;
  t.Row({"lookups", Int(f.Num("lookups")) + ": " + Int(asked) + " blocks asked, " + Int(hit) +
                        " hit (" + Percent(hit, asked) + "), " + Int(asked - std::min(hit, asked)) +
                        " missed"});
  t.Row({"reads", Int(f.Num("acquired_blocks")) + " blocks acquired = " +
                      Int(f.Num("prefix_tokens_saved")) + " prefix tokens saved"});
  t.Row({"writes", Int(f.Num("committed_blocks")) + " committed, " + Int(f.Num("aborted_blocks")) +
                       " aborted, " + Int(f.Num("removed_blocks")) + " removed; " +
                       Int(f.Num("pending_blocks")) + " being written"});
  t.Row({"hints",
         Int(f.Num("hinted_now")) + " blocks protected now; " + Int(f.Num("hinted_blocks")) +
             " hinted: " + Int(f.Num("hints_used")) + " used, " + Int(f.Num("hints_expired")) +
             " expired, " + Int(f.Num("hints_yielded")) + " yielded, " +
             Int(f.Num("hints_withdrawn")) + " withdrawn; " + Int(f.Num("prefetched_blocks")) +
             " read ahead (SSD, remote), " + Int(f.Num("prefetched_used")) + " of them used"});
  t.Row({"dropped",
         Int(f.Num("dropped_blocks")) + " left the last tier (" + Int(f.Num("orphan_drops")) +
             " orphans), " + Int(f.Num("demotions_dropped")) + " dropped instead of demoted" +
             (f.Num("ssd_budget_refused") != 0
                  ? " (" + Int(f.Num("ssd_budget_refused")) + " past the SSD's write budget)"
                  : std::string())});
  // With block keys: the SSD's blocks by the key that sealed them.
  std::string sealed;
  for (const auto& [key, n] : f.WithPrefix("tier.ssd.sealed_blocks.key_")) {
    sealed += (sealed.empty() ? "" : ", ") + n + " under key " + key;
  }
  if (!sealed.empty()) t.Row({"sealed", sealed + " (SSD)"});
  t.Row({"errors", Int(f.Num("checksum_failures")) + " checksum, " + Int(f.Num("io_errors")) +
                       " I/O, " + Int(f.Num("protocol_errors")) + " malformed frames, " +
                       Int(f.Num("request_errors")) + " failed requests" +
                       (f.Num("ssd_paused") != 0 ? "; SSD PAUSED after an error" : "")});
  t.Row(
      {"refused", Int(f.Num("refused.permission_denied")) + " not allowed, " +
                      Int(f.Num("refused.max_sessions")) + " past max_sessions, " +
                      Int(f.Num("refused.max_namespaces")) + " new namespaces past the cap, " +
                      Int(f.Num("refused.max_leases_per_session")) + " leases and " +
                      Int(f.Num("refused.max_allocations_per_session")) + " writes and " +
                      Int(f.Num("refused.max_hinted_blocks_per_session")) +
                      " hints past their limit; timeouts: " + Int(f.Num("refused.hello_timeout")) +
                      " hello, " + Int(f.Num("refused.frame_timeout")) + " frame, " +
                      Int(f.Num("refused.reply_timeout")) + " reply"});
  t.Print();
}

// Per operation: requests, errors and latency quantiles, either since the
// start or (with `before`, a sample `seconds` older) over the interval.
void PrintOps(const Figures& f, const Figures* before, double seconds) {
  const std::vector<uint64_t> bounds = f.List("latency_bounds_us");
  Table t;
  t.Row({"op", before ? "req/s" : "requests", "errors", "p50", "p99", "mean"});
  bool any = false;
  for (const char* op : kOps) {
    const std::string p = std::string("op.") + op + ".";
    uint64_t requests = f.Num(p + "requests");
    uint64_t errors = f.Num(p + "errors");
    uint64_t sum_us = f.Num(p + "latency_sum_us");
    std::vector<uint64_t> counts = f.List(p + "latency_buckets");
    if (before != nullptr) {
      requests -= std::min(requests, before->Num(p + "requests"));
      errors -= std::min(errors, before->Num(p + "errors"));
      sum_us -= std::min(sum_us, before->Num(p + "latency_sum_us"));
      const std::vector<uint64_t> old = before->List(p + "latency_buckets");
      for (size_t i = 0; i < counts.size() && i < old.size(); ++i) {
        counts[i] -= std::min(counts[i], old[i]);
      }
    }
    if (requests == 0) continue;
    any = true;
    char rate[32];
    std::snprintf(rate, sizeof rate, "%.1f", static_cast<double>(requests) / seconds);
    t.Row({op, before ? rate : Int(requests), Int(errors), Quantile(0.5, bounds, counts),
           Quantile(0.99, bounds, counts),
           Micros(static_cast<double>(sum_us) / static_cast<double>(requests))});
  }
  if (any) {
    t.Print();
  } else {
    std::printf("no requests%s\n", before ? " in this interval" : " yet");
  }
}

void PrintHuman(const Entries& entries, const Entries* previous, double seconds) {
  const Figures f(entries);
  std::optional<Figures> before;
  if (previous != nullptr) before.emplace(*previous);
  std::printf(
      "kvtierd %s (pid %s)   sessions %s (%s opened)   namespaces %s   leases %s   open writes "
      "%s\n\n",
      f.Text("version").c_str(), std::to_string(static_cast<uint64_t>(f.Num("pid"))).c_str(),
      Int(f.Num("sessions")).c_str(), Int(f.Num("sessions_opened")).c_str(),
      Int(f.Num("namespaces")).c_str(), Int(f.Num("open_leases")).c_str(),
      Int(f.Num("open_allocations")).c_str());
  PrintTiers(f);
  PrintRemoteAndEvents(f);
  std::printf("\n");
  PrintTotals(f);
  std::printf("\n");
  PrintOps(f, before ? &*before : nullptr, seconds);
}

// Every entry as it came, grouped by name prefix ("tier.host.blocks" under
// "tier.host"); names without a dot go under "daemon".
void PrintRaw(const Entries& entries) {
  std::vector<std::pair<std::string, Entries>> groups;
  size_t width = 0;
  for (const auto& [name, value] : entries) {
    const size_t dot = name.rfind('.');
    const std::string group = dot == std::string::npos ? "daemon" : name.substr(0, dot);
    const std::string leaf = dot == std::string::npos ? name : name.substr(dot + 1);
    auto it = std::find_if(groups.begin(), groups.end(), [&](auto& g) { return g.first == group; });
    if (it == groups.end()) it = groups.insert(groups.end(), {group, {}});
    it->second.emplace_back(leaf, value);
    width = std::max(width, leaf.size());
  }
  for (const auto& [group, rows] : groups) {
    std::printf("%s\n", group.c_str());
    for (const auto& [name, value] : rows) {
      std::string shown = value;
      uint64_t n = 0;
      const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (name.ends_with("_bytes") && ec == std::errc() && ptr == value.data() + value.size() &&
          n >= 1024) {
        shown += " (" + FormatBytes(n) + ")";
      }
      std::printf("  %-*s  %s\n", static_cast<int>(width), name.c_str(), shown.c_str());
    }
  }
}

int RunStats(const StatsOptions& o) {
  auto c = Connect(o.conn, /*map_arenas=*/false);
  if (!c.ok()) return Fail(c.status());
  const bool tty = ::isatty(STDOUT_FILENO) != 0;
  const auto interval = std::chrono::duration<double>(std::max(0.1, o.interval_s));
  std::optional<Entries> previous;
  auto previous_at = std::chrono::steady_clock::now();
  for (uint64_t n = 0; !o.watch || o.count == 0 || n < o.count; ++n) {
    if (n > 0) std::this_thread::sleep_for(interval);
    auto stats = (*c)->Stats();
    if (!stats.ok()) return Fail(stats.status());
    const auto now = std::chrono::steady_clock::now();
    if (o.json) {
      // With --watch, one object per line (JSON Lines) for a script to follow.
      std::printf("%s\n", client::internal::StatsJson(*stats, /*pretty=*/!o.watch).c_str());
    } else {
      if (o.watch) {
        // Clear the terminal and redraw; into a pipe, frames follow each other.
        if (tty) {
          std::printf("\x1b[H\x1b[2J");
        } else if (n > 0) {
          std::printf("\n");
        }
        const std::time_t t = std::time(nullptr);
        char stamp[32];
        std::strftime(stamp, sizeof stamp, "%H:%M:%S", std::localtime(&t));
        std::printf("every %.1f s, %s%s\n", interval.count(), stamp,
                    previous ? "; requests over the last interval" : "; requests since start");
      }
      if (o.raw) {
        PrintRaw(*stats);
      } else {
        const double seconds = std::chrono::duration<double>(now - previous_at).count();
        PrintHuman(*stats, previous ? &*previous : nullptr, seconds);
      }
    }
    std::fflush(stdout);
    previous = std::move(stats).value();
    previous_at = now;
    if (!o.watch) break;
  }
  return 0;
}

}  // namespace

void AddStatsCommand(CLI::App* app, int* exit_code) {
  auto* sub = app->add_subcommand(
      "stats", "the daemon's figures: tiers, hits, moves, errors, latency per operation");
  auto o = std::make_shared<StatsOptions>();
  AddConnectFlags(sub, &o->conn);
  sub->add_flag("--json", o->json, "print a JSON object (one per line with --watch)");
  sub->add_flag("--raw", o->raw, "print every STATS entry as it comes, grouped by name");
  sub->add_flag("--watch", o->watch, "refresh every --interval seconds until interrupted");
  sub->add_option("--interval", o->interval_s, "seconds between refreshes with --watch")
      ->capture_default_str();
  sub->add_option("--count", o->count, "with --watch: stop after N refreshes (0 = never)")
      ->capture_default_str();
  sub->callback([o, exit_code] { *exit_code = RunStats(*o); });
}

}  // namespace kvtier::cli
