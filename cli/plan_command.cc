// kvtier plan: capacity planning for one layout. KV bytes per token
// (planes x layers x kv_heads x head_dim x dtype bytes; planes 2 for K and V,
// 1 for an MLA latent layout) and per block, how many
// blocks and tokens each tier holds, the longest context that fits, and the
// memory of a list of context lengths. Decimal units throughout (1 GB =
// 10^9 bytes), as GPU and disk capacities are quoted.
//
// Capacities come from flags, else from a kvtierd configuration file
// (--config, read by kvtierd's own parser, so defaults agree), else from a
// running daemon's STATS (--daemon), else from kvtierd's defaults.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <memory>
#include <optional>
#include <string_view>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "common/fp8.h"
#include "common/layout.h"
#include "daemon/config.h"

namespace kvtier::cli {
namespace {

// Tiers allocate page-aligned slots (the host and device arenas' slabs and
// the SSD's slot files alike), so a block takes its size rounded up to this.
constexpr uint64_t kSlotAlign = 4096;

struct PlanOptions {
  ConnectFlags conn;  // --socket, for --daemon
  uint32_t layers = 0, kv_heads = 0, head_dim = 0, block_tokens = 16;
  std::string dtype = "fp16";
  std::string kind = "kv";
  std::string quantize_lower = "fp8_e4m3";  // the form the "with" columns show
  std::string device_capacity, host_capacity, ssd_capacity;
  std::string config;
  bool daemon = false;
  std::vector<std::string> tokens = {"1k", "16k", "64k", "128k"};
};

struct TierPlan {
  const char* name = "";
  bool present = false;
  uint64_t capacity = 0;
};

// "2.62 MB", "41.9 GB", "328 kB": decimal units, three significant digits.
std::string Decimal3(double bytes) {
  static constexpr const char* kUnits[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  size_t unit = 0;
  while (bytes >= 999.5 && unit + 1 < std::size(kUnits)) {
    bytes /= 1000;
    ++unit;
  }
  const int decimals = unit == 0 ? 0 : bytes < 9.995 ? 2 : bytes < 99.95 ? 1 : 0;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f %s", decimals, bytes, kUnits[unit]);
  return buf;
}

// "2.6 GB", "335.5 GB": decimal units, one decimal place (the unit is the
// largest below the value).
std::string Decimal1(double bytes) {
  static constexpr const char* kUnits[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  size_t unit = 0;
  while (bytes >= 1000 && unit + 1 < std::size(kUnits)) {
    bytes /= 1000;
    ++unit;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f %s", unit == 0 ? 0 : 1, bytes, kUnits[unit]);
  return buf;
}

// "128k" = 128,000 tokens, "1m" = 1,000,000, "4096" = 4,096.
Result<uint64_t> ParseTokens(const std::string& text) {
  uint64_t scale = 1;
  std::string digits = text;
  if (!digits.empty()) {
    const char unit = static_cast<char>(std::tolower(static_cast<unsigned char>(digits.back())));
    if (unit == 'k' || unit == 'm') {
      scale = unit == 'k' ? 1000 : 1000000;
      digits.pop_back();
    }
  }
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos ||
      digits.size() > 12) {
    return InvalidArgumentError("'" + text + "' is not a token count (e.g. 4096, 16k, 1m)");
  }
  const uint64_t n = std::stoull(digits) * scale;
  if (n == 0) return InvalidArgumentError("a context of 0 tokens");
  return n;
}

// The tiers, fastest first, with their capacities from the chosen source.
Result<std::vector<TierPlan>> Tiers(const PlanOptions& o, std::string* source) {
  std::vector<TierPlan> tiers = {{"device"}, {"host"}, {"ssd"}};
  if (o.daemon) {
    auto c = Connect(o.conn, /*map_arenas=*/false);
    if (!c.ok()) return c.status();
    auto stats = (*c)->Stats();
    if (!stats.ok()) return stats.status();
    for (TierPlan& t : tiers) {
      const std::string p = std::string("tier.") + t.name + ".";
      for (const auto& [name, value] : *stats) {
        if (name == p + "present") t.present = value == "1";
        if (name == p + "capacity_bytes") t.capacity = std::stoull(value);
      }
    }
    *source = "the running kvtierd";
  } else {
    daemon::DaemonConfig c;
    *source = "kvtierd's defaults";
    if (!o.config.empty()) {
      KVTIER_ASSIGN_OR_RETURN(c, daemon::LoadConfigFile(o.config));
      *source = o.config;
    }
    // "auto" depends on the serving node having a GPU, which a plan made
    // from a file cannot know: counted only when asked for outright (or
    // with --device-capacity, or read from a running daemon with --daemon).
    tiers[0] = {"device", c.device_mode == "cuda" || c.device_mode == "emulated",
                c.device_capacity_bytes};
    tiers[1] = {"host", true, c.host_capacity_bytes};
    tiers[2] = {"ssd", !c.ssd_dir.empty(), c.ssd_capacity_bytes};
  }
  // Flags win; "0" turns a tier off.
  const std::string* flags[] = {&o.device_capacity, &o.host_capacity, &o.ssd_capacity};
  bool any_flag = false;
  for (size_t i = 0; i < tiers.size(); ++i) {
    if (flags[i]->empty()) continue;
    KVTIER_ASSIGN_OR_RETURN(tiers[i].capacity, ParseBytes(*flags[i]));
    tiers[i].present = tiers[i].capacity > 0;
    any_flag = true;
  }
  if (any_flag) *source += " and flags";
  return tiers;
}

int RunPlan(const PlanOptions& o) {
  Layout layout;
  layout.layers = o.layers;
  layout.kv_heads = o.kv_heads;
  layout.head_dim = o.head_dim;
  layout.block_tokens = o.block_tokens;
  if (!ParseDType(o.dtype, &layout.dtype)) {
    return Fail(InvalidArgumentError("unknown --dtype '" + o.dtype + "'"));
  }
  if (!ParseKvKind(o.kind, &layout.kind)) {
    return Fail(InvalidArgumentError("unknown --kind '" + o.kind + "': expected kv or latent"));
  }
  if (layout.kind == KvKind::kLatent && layout.kv_heads != 1) {
    return Fail(InvalidArgumentError(
        "--kind latent (MLA) caches one latent vector per token and layer: --kv-heads 1, "
        "--head-dim its width (kv_lora_rank + rope dims, e.g. 576)"));
  }
  if (layout.layers == 0 || layout.kv_heads == 0 || layout.head_dim == 0 ||
      layout.block_tokens == 0) {
    return Fail(
        InvalidArgumentError("--layers, --kv-heads, --head-dim and --block-tokens must be "
                             "positive"));
  }
  std::vector<uint64_t> contexts;
  for (const std::string& t : o.tokens) {
    auto n = ParseTokens(t);
    if (!n.ok()) return Fail(n.status());
    contexts.push_back(*n);
  }
  std::string source;
  auto tiers = Tiers(o, &source);
  if (!tiers.ok()) return Fail(tiers.status());

  const uint64_t per_token = layout.BytesPerToken();
  const uint64_t per_block = layout.BlockBytes();
  const uint64_t slot = AlignUp(per_block, kSlotAlign);
  std::printf(
      "layout: %u layers x %u KV heads x %u head dim, %s, %u tokens per block%s\n", layout.layers,
      layout.kv_heads, layout.head_dim, std::string(DTypeName(layout.dtype)).c_str(),
      layout.block_tokens,
      layout.kind == KvKind::kLatent ? ", MLA latent (one vector per token and layer)" : "");
  std::printf("KV per token: %s (%s bytes)\n", Decimal3(static_cast<double>(per_token)).c_str(),
              Int(per_token).c_str());
  const std::string padding = slot == per_block ? "" : ", " + Int(slot) + " with slot padding";
  std::printf("KV per block: %s (%s bytes%s)\n", Decimal3(static_cast<double>(per_block)).c_str(),
              Int(per_block).c_str(), padding.c_str());
  if (per_block > kMaxBlockBytes) {
    std::printf("warning: kvtierd refuses blocks above %s; use fewer --block-tokens\n",
                Decimal3(static_cast<double>(kMaxBlockBytes)).c_str());
  }

  // Quantize on demote: the ssd keeps blocks in fp8 (values + scales), so
  // it holds more of them; memory tiers are unchanged. Shown beside the
  // plain figures for a 16-bit layout.
  Quantize q = Quantize::kOff;
  if (!ParseQuantize(o.quantize_lower, &q)) {
    return Fail(InvalidArgumentError("unknown --quantize-lower '" + o.quantize_lower +
                                     "': expected off, fp8_e4m3 or fp8_e5m2"));
  }
  const bool with_q = q != Quantize::kOff && CheckQuantize(layout, q).ok();
  const uint64_t stored_block = with_q ? StoredLayout(layout, q).BlockBytes() : per_block;
  const uint64_t stored_slot = AlignUp(stored_block, kSlotAlign);
  const std::string q_name(QuantizeName(q));
  if (with_q) {
    std::printf(
        "KV per block on the ssd with quantize_lower %s: %s (%s bytes, %s with slot "
        "padding; lossy, docs/fp8.md)\n",
        q_name.c_str(), Decimal3(static_cast<double>(stored_block)).c_str(),
        Int(stored_block).c_str(), Int(stored_slot).c_str());
  }

  // Per tier, and cumulatively from the fastest: a prefix fills the fast
  // tiers first and its tail is demoted down.
  std::printf("\ntiers (from %s):\n", source.c_str());
  std::printf("  %-7s %12s %12s %14s %14s", "tier", "capacity", "blocks", "tokens", "cumulative");
  if (with_q) std::printf("   %s: %12s %14s", q_name.c_str(), "blocks", "cumulative");
  std::printf("\n");
  std::vector<uint64_t> cumulative_blocks, cumulative_q;
  std::vector<std::string> cumulative_names;
  uint64_t total_blocks = 0, total_q = 0;
  std::string names;
  for (const TierPlan& t : *tiers) {
    if (!t.present) {
      std::printf("  %-7s %12s\n", t.name, "off");
      continue;
    }
    const bool ssd = std::string_view(t.name) == "ssd";
    const uint64_t blocks = t.capacity / slot;
    const uint64_t blocks_q = ssd ? t.capacity / stored_slot : blocks;
    total_blocks += blocks;
    total_q += blocks_q;
    names += (names.empty() ? "" : "+") + std::string(t.name);
    cumulative_blocks.push_back(total_blocks);
    cumulative_q.push_back(total_q);
    cumulative_names.push_back(names);
    std::printf("  %-7s %12s %12s %14s %14s", t.name,
                Decimal1(static_cast<double>(t.capacity)).c_str(), Int(blocks).c_str(),
                Int(blocks * layout.block_tokens).c_str(),
                Int(total_blocks * layout.block_tokens).c_str());
    if (with_q) {
      std::printf("   %*s  %12s %14s", static_cast<int>(q_name.size()), "", Int(blocks_q).c_str(),
                  Int(total_q * layout.block_tokens).c_str());
    }
    std::printf("\n");
  }
  std::printf("longest context that fits: %s tokens (all tiers)",
              Int(total_blocks * layout.block_tokens).c_str());
  if (!cumulative_blocks.empty()) {
    std::printf(", %s in %s alone", Int(cumulative_blocks.front() * layout.block_tokens).c_str(),
                cumulative_names.front().c_str());
  }
  if (with_q) {
    std::printf("; %s tokens with quantize_lower %s", Int(total_q * layout.block_tokens).c_str(),
                q_name.c_str());
  }
  std::printf("\n\ncontext lengths:\n");
  std::printf("  %-10s %12s %12s  %-22s", "tokens", "KV memory", "blocks", "fits in");
  if (with_q) std::printf("  with %s", q_name.c_str());
  std::printf("\n");
  auto fits_in = [&](uint64_t blocks, const std::vector<uint64_t>& cumulative) {
    for (size_t i = 0; i < cumulative.size(); ++i) {
      if (blocks <= cumulative[i]) return cumulative_names[i];
    }
    return std::string("does not fit");
  };
  for (uint64_t tokens : contexts) {
    // Memory of the context itself; only full blocks are cached, the
    // partial last block is recomputed.
    const uint64_t blocks = tokens / layout.block_tokens;
    std::printf("  %-10s %12s %12s  %-22s", Int(tokens).c_str(),
                Decimal1(static_cast<double>(tokens) * static_cast<double>(per_token)).c_str(),
                Int(blocks).c_str(), fits_in(blocks, cumulative_blocks).c_str());
    if (with_q) std::printf("  %s", fits_in(blocks, cumulative_q).c_str());
    std::printf("\n");
  }
  return 0;
}

}  // namespace

void AddPlanCommand(CLI::App* app, int* exit_code) {
  auto* sub = app->add_subcommand(
      "plan", "capacity planning: KV bytes per token and block, what each tier holds, what fits");
  auto o = std::make_shared<PlanOptions>();
  sub->add_option("--layers", o->layers, "layout: layers")->required();
  sub->add_option("--kv-heads", o->kv_heads, "layout: KV heads (GQA groups)")->required();
  sub->add_option("--head-dim", o->head_dim, "layout: head dimension")->required();
  sub->add_option("--dtype", o->dtype, "layout: fp16 | bf16 | fp32 | fp8_e4m3 | fp8_e5m2")
      ->capture_default_str();
  sub->add_option("--block-tokens", o->block_tokens, "layout: tokens per block")
      ->capture_default_str();
  sub->add_option("--kind", o->kind,
                  "layout: kv (K and V per layer) | latent (MLA, DeepSeek-V2/V3: one latent "
                  "vector per token and layer, --kv-heads 1)")
      ->capture_default_str();
  sub->add_option("--quantize-lower", o->quantize_lower,
                  "also show the ssd kept in this fp8 form: fp8_e4m3 | fp8_e5m2 | off (16-bit "
                  "layouts)")
      ->capture_default_str();
  sub->add_option("--device-capacity", o->device_capacity,
                  "device tier bytes (e.g. 80GB), 0 = off");
  sub->add_option("--host-capacity", o->host_capacity, "host tier bytes (e.g. 512GiB), 0 = off");
  sub->add_option("--ssd-capacity", o->ssd_capacity, "ssd tier bytes (e.g. 4TB), 0 = off");
  auto* config =
      sub->add_option("--config", o->config, "take the capacities from a kvtierd TOML file")
          ->check(CLI::ExistingFile);
  auto* daemon = sub->add_flag("--daemon", o->daemon,
                               "take the capacities from the running kvtierd (see --socket)");
  config->excludes(daemon);
  sub->add_option("--socket", o->conn.socket,
                  "kvtierd's Unix socket, with --daemon [$KVTIER_SOCKET or " +
                      std::string(client::kDefaultSocketPath) + "]");
  sub->add_option("--tokens", o->tokens, "context lengths to size (k = 1,000, m = 1,000,000)")
      ->delimiter(',')
      ->capture_default_str();
  sub->callback([o, exit_code] { *exit_code = RunPlan(*o); });
}

}  // namespace kvtier::cli
