// kvtier lookup | put | get: one prompt's blocks, named by --tokens or --random.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "client/internal/json.h"

namespace kvtier::cli {
namespace {

using client::BlockKey;
using client::Client;
using client::WireWriteState;

struct DataOptions {
  ConnectFlags conn;
  TokenFlags tokens;
  bool json = false;
  bool inline_bytes = false;
  bool verify = false;
  std::string file;
  std::string tier = "host";  // zero-copy put/get: the arena to use
  int priority = -1;          // put: retention priority 0-100 of every block; -1 none
  uint64_t priority_duration_ms = 0;
};

client::WireTier ArenaTier(const DataOptions& o) {
  return o.tier == "device" ? client::WireTier::kDevice : client::WireTier::kHost;
}

std::string Mode(const DataOptions& o) {
  return o.inline_bytes ? "inline" : "zero-copy, " + o.tier + " arena";
}

void AddTierFlag(CLI::App* sub, DataOptions* o) {
  sub->add_option("--tier", o->tier, "zero-copy through the host or the (emulated) device arena")
      ->check(CLI::IsMember({"host", "device"}))
      ->capture_default_str();
}

// A connected client and the keys of the flags' tokens.
struct Session {
  std::unique_ptr<Client> client;
  std::vector<BlockKey> keys;
};

Result<Session> Open(const DataOptions& o, bool map_arenas) {
  KVTIER_ASSIGN_OR_RETURN(auto tokens, MakeTokens(o.tokens, o.conn.block_tokens));
  KVTIER_ASSIGN_OR_RETURN(auto c, Connect(o.conn, map_arenas));
  Session s{std::move(c), {}};
  s.keys = s.client->Keys(tokens);
  return s;
}

std::shared_ptr<DataOptions> AddCommon(CLI::App* sub) {
  auto o = std::make_shared<DataOptions>();
  AddConnectFlags(sub, &o->conn);
  AddTokenFlags(sub, &o->tokens);
  return o;
}

// ---- lookup ---------------------------------------------------------------

int RunLookup(const DataOptions& o) {
  auto s = Open(o, /*map_arenas=*/false);
  if (!s.ok()) return Fail(s.status());
  std::vector<client::WireTier> tiers;
  for (auto [start, n] : Chunks(s->keys.size(), s->client->session().max_keys)) {
    auto reply = s->client->Lookup(std::span(s->keys).subspan(start, n));
    if (!reply.ok()) return Fail(reply.status());
    tiers.insert(tiers.end(), reply->tiers.begin(), reply->tiers.end());
    if (reply->tiers.size() < n) break;  // a prefix hit ends at the first miss
  }
  if (o.json) {
    std::string out = "{\"hits\":" + std::to_string(tiers.size()) +
                      ",\"total\":" + std::to_string(s->keys.size()) + ",\"tiers\":[";
    for (size_t i = 0; i < tiers.size(); ++i) {
      out += (i ? ",\"" : "\"") + std::string(TierName(tiers[i])) + "\"";
    }
    // Every key of the chain, hits or not: what another client (the Python
    // package) must compute for the same tokens.
    out += "],\"keys\":[";
    for (size_t i = 0; i < s->keys.size(); ++i) {
      out += i ? ",\"" : "\"";
      out += s->keys[i].ToHex();
      out += '"';
    }
    std::printf("%s]}\n", out.c_str());
    return 0;
  }
  std::printf("lookup: %zu/%zu blocks hit\n", tiers.size(), s->keys.size());
  std::map<std::string_view, size_t> per_tier;
  for (auto t : tiers) ++per_tier[TierName(t)];
  for (auto [name, n] : per_tier) std::printf("  %-6s %zu blocks\n", std::string(name).c_str(), n);
  // Block by block only while it stays readable.
  if (!tiers.empty() && tiers.size() <= 64) {
    std::printf("  %5s  %-32s  %s\n", "block", "key", "tier");
    for (size_t i = 0; i < tiers.size(); ++i) {
      std::printf("  %5zu  %s  %s\n", i, s->keys[i].ToHex().c_str(),
                  std::string(TierName(tiers[i])).c_str());
    }
  }
  return 0;
}

// ---- put ------------------------------------------------------------------

// Fills block `index` of the prompt: from the file's bytes, taken as an
// endless stream across the blocks, or from the key's pattern.
void FillBlock(const std::vector<std::byte>& file, size_t index, const BlockKey& key,
               std::span<std::byte> out) {
  if (file.empty()) return FillPattern(key, out);
  size_t pos = (index * out.size()) % file.size();
  for (size_t done = 0; done < out.size();) {
    const size_t n = std::min(out.size() - done, file.size() - pos);
    std::memcpy(out.data() + done, file.data() + pos, n);
    done += n;
    pos = 0;
  }
}

struct PutTally {
  size_t written = 0, exists = 0, skipped = 0;
  void Add(std::span<const WireWriteState> states) {
    for (auto st : states) {
      (st == WireWriteState::kAllocated ? written
       : st == WireWriteState::kExists  ? exists
                                        : skipped)++;
    }
  }
  // True when the chunk's last block was not stored: the next chunk's parent
  // is missing, so the daemon would refuse it; the rest counts as skipped.
  bool ChainBroken(std::span<const WireWriteState> states, size_t remaining) {
    if (states.empty() || states.back() != WireWriteState::kSkipped) return false;
    skipped += remaining;
    return true;
  }
};

Status PutZeroCopy(Client& c, std::span<const BlockKey> keys, const std::vector<std::byte>& file,
                   client::WireTier tier, PutTally* tally) {
  for (auto [start, n] : Chunks(keys.size(), c.session().max_keys)) {
    const auto chunk = keys.subspan(start, n);
    std::optional<BlockKey> parent;
    if (start > 0) parent = keys[start - 1];
    KVTIER_ASSIGN_OR_RETURN(auto w, c.Allocate(chunk, parent, tier));
    for (size_t i = 0; i < n; ++i) {
      if (w.state(i) == WireWriteState::kAllocated)
        FillBlock(file, start + i, chunk[i], w.Bytes(i));
    }
    std::vector<WireWriteState> states;
    for (size_t i = 0; i < n; ++i) states.push_back(w.state(i));
    KVTIER_RETURN_IF_ERROR(w.Commit());
    tally->Add(states);
    if (tally->ChainBroken(states, keys.size() - start - n)) break;
  }
  return Status::Ok();
}

Status PutInline(Client& c, std::span<const BlockKey> keys, const std::vector<std::byte>& file,
                 PutTally* tally) {
  const size_t bb = c.block_bytes();
  for (auto [start, n] : Chunks(keys.size(), InlineChunk(c))) {
    std::vector<std::byte> data(n * bb);
    for (size_t i = 0; i < n; ++i) {
      FillBlock(file, start + i, keys[start + i], std::span(data).subspan(i * bb, bb));
    }
    std::optional<BlockKey> parent;
    if (start > 0) parent = keys[start - 1];
    KVTIER_ASSIGN_OR_RETURN(auto reply, c.PutInline(keys.subspan(start, n), data, parent));
    tally->Add(reply.states);
    if (tally->ChainBroken(reply.states, keys.size() - start - n)) break;
  }
  return Status::Ok();
}

Result<std::vector<std::byte>> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return IoError("cannot read " + path);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (chars.empty()) return InvalidArgumentError(path + " is empty");
  std::vector<std::byte> bytes(chars.size());
  std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

int RunPut(const DataOptions& o) {
  std::vector<std::byte> file;
  if (!o.file.empty()) {
    auto bytes = ReadFile(o.file);
    if (!bytes.ok()) return Fail(bytes.status());
    file = *std::move(bytes);
  }
  auto s = Open(o, /*map_arenas=*/!o.inline_bytes);
  if (!s.ok()) return Fail(s.status());
  PutTally t;
  Status st = o.inline_bytes ? PutInline(*s->client, s->keys, file, &t)
                             : PutZeroCopy(*s->client, s->keys, file, ArenaTier(o), &t);
  if (!st.ok()) return Fail(st);
  std::printf("put: %zu blocks of %s (%s): %zu written, %zu already present, %zu skipped\n",
              s->keys.size(), FormatBytes(s->client->block_bytes()).c_str(), Mode(o).c_str(),
              t.written, t.exists, t.skipped);
  if (o.priority >= 0 && !s->keys.empty()) {
    const uint64_t tokens = s->keys.size() * o.conn.block_tokens;
    const protocol::RetentionRange range{0, tokens, static_cast<uint8_t>(o.priority),
                                         o.priority_duration_ms};
    auto updated = s->client->SetRetention(s->keys, std::span(&range, 1));
    if (!updated.ok()) return Fail(updated.status());
    std::printf("retention: priority %d on %llu blocks%s\n", o.priority,
                static_cast<unsigned long long>(*updated),
                o.priority_duration_ms == 0
                    ? ""
                    : (", for " + std::to_string(o.priority_duration_ms) + " ms").c_str());
  }
  return 0;
}

// ---- get ------------------------------------------------------------------

// Takes the leading present blocks one by one; false stops early.
using BlockSink = std::function<void(size_t index, std::span<const std::byte> bytes)>;

Result<size_t> GetZeroCopy(Client& c, std::span<const BlockKey> keys, client::WireTier tier,
                           const BlockSink& sink) {
  size_t hits = 0;
  for (auto [start, n] : Chunks(keys.size(), c.session().max_keys)) {
    KVTIER_ASSIGN_OR_RETURN(auto lease, c.Acquire(keys.subspan(start, n), tier));
    for (size_t i = 0; i < lease.size(); ++i) sink(start + i, lease.Bytes(i));
    hits += lease.size();
    KVTIER_RETURN_IF_ERROR(lease.Release());
    if (hits < start + n) break;
  }
  return hits;
}

Result<size_t> GetInline(Client& c, std::span<const BlockKey> keys, const BlockSink& sink) {
  const size_t bb = c.block_bytes();
  size_t hits = 0;
  for (auto [start, n] : Chunks(keys.size(), InlineChunk(c))) {
    KVTIER_ASSIGN_OR_RETURN(auto reply, c.GetInline(keys.subspan(start, n)));
    for (size_t i = 0; i < reply.hits; ++i) {
      sink(start + i, std::span<const std::byte>(reply.data).subspan(i * bb, bb));
    }
    hits += reply.hits;
    if (hits < start + n) break;
  }
  return hits;
}

int RunGet(const DataOptions& o) {
  auto s = Open(o, /*map_arenas=*/!o.inline_bytes);
  if (!s.ok()) return Fail(s.status());
  std::FILE* out = nullptr;
  if (!o.file.empty() && (out = std::fopen(o.file.c_str(), "wb")) == nullptr) {
    return Fail(IoError("cannot write " + o.file + ": " + std::strerror(errno)));
  }
  size_t mismatched = 0;
  bool write_failed = false;
  const BlockSink sink = [&](size_t i, std::span<const std::byte> bytes) {
    if (o.verify && !MatchesPattern(s->keys[i], bytes)) {
      if (mismatched++ == 0) std::fprintf(stderr, "kvtier: block %zu: wrong bytes\n", i);
    }
    if (out != nullptr && std::fwrite(bytes.data(), 1, bytes.size(), out) != bytes.size()) {
      write_failed = true;
    }
  };
  auto hits = o.inline_bytes ? GetInline(*s->client, s->keys, sink)
                             : GetZeroCopy(*s->client, s->keys, ArenaTier(o), sink);
  if (out != nullptr && std::fclose(out) != 0) write_failed = true;
  if (!hits.ok()) return Fail(hits.status());
  if (write_failed) return Fail(IoError("writing " + o.file + " failed"));
  if (o.json) {
    std::printf("{\"hits\":%zu,\"total\":%zu,\"block_bytes\":%llu", *hits, s->keys.size(),
                static_cast<unsigned long long>(s->client->block_bytes()));
    if (o.verify)
      std::printf(",\"verified\":%zu,\"mismatched\":%zu", *hits - mismatched, mismatched);
    std::printf("}\n");
  } else {
    std::printf("get: %zu/%zu blocks hit (%s)", *hits, s->keys.size(), Mode(o).c_str());
    if (o.verify) std::printf(", %zu verified, %zu wrong", *hits - mismatched, mismatched);
    if (out != nullptr)
      std::printf(", %s written to %s", FormatBytes(*hits * s->client->block_bytes()).c_str(),
                  o.file.c_str());
    std::printf("\n");
  }
  return mismatched == 0 ? 0 : 2;
}

}  // namespace

void AddLookupCommand(CLI::App* app, int* exit_code) {
  auto* sub =
      app->add_subcommand("lookup", "how many leading blocks of a prompt are cached, where");
  auto o = AddCommon(sub);
  sub->add_flag("--json", o->json, "print a JSON object");
  sub->callback([o, exit_code] { *exit_code = RunLookup(*o); });
}

void AddPutCommand(CLI::App* app, int* exit_code) {
  auto* sub = app->add_subcommand("put", "write a prompt's blocks");
  auto o = AddCommon(sub);
  sub->add_option("--file", o->file,
                  "bytes to write, repeated or cut to fill the blocks [a pattern from each key, "
                  "which get --verify checks]");
  sub->add_flag("--inline", o->inline_bytes, "send the bytes through the socket, not the arena");
  AddTierFlag(sub, o.get());
  sub->add_option("--priority", o->priority,
                  "retention priority 0-100 of the blocks (lower goes first; default 35)")
      ->check(CLI::Range(0, 100));
  sub->add_option("--priority-duration-ms", o->priority_duration_ms,
                  "after this long the priority falls back to 35 [0 = never]");
  sub->callback([o, exit_code] { *exit_code = RunPut(*o); });
}

void AddGetCommand(CLI::App* app, int* exit_code) {
  auto* sub = app->add_subcommand("get", "read the leading cached blocks of a prompt");
  auto o = AddCommon(sub);
  sub->add_option("--out", o->file, "write the blocks' bytes to this file");
  sub->add_flag("--verify", o->verify,
                "check the bytes against put's per-key pattern (exit 2 on a mismatch)");
  sub->add_flag("--inline", o->inline_bytes, "receive the bytes through the socket");
  AddTierFlag(sub, o.get());
  sub->add_flag("--json", o->json, "print a JSON object");
  sub->callback([o, exit_code] { *exit_code = RunGet(*o); });
}

}  // namespace kvtier::cli
