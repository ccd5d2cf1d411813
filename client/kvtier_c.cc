// The C API over kvtier::client::Client. Exceptions stop here (STYLE.md 7):
// every entry point runs inside Guard(), which turns one into KVTIER_INTERNAL.
#include "client/kvtier_c.h"

#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/internal/json.h"

using kvtier::Status;
using kvtier::StatusCode;
using kvtier::client::BlockKey;
using kvtier::client::Client;
using kvtier::client::WireTier;

static_assert(KVTIER_KIND_KV == static_cast<int>(kvtier::KvKind::kKeyValue));
static_assert(KVTIER_KIND_LATENT == static_cast<int>(kvtier::KvKind::kLatent));

struct kvtier_client {
  std::unique_ptr<Client> impl;
  mutable std::string last_error;
};

struct kvtier_write {
  kvtier_client* owner;
  kvtier::client::WriteHandle handle;
};

struct kvtier_read {
  kvtier_client* owner;
  kvtier::client::ReadLease lease;
};

namespace {

// The last failure on this thread, for calls without a client (connect).
thread_local std::string t_last_error;

int Fail(const kvtier_client* c, const Status& s) {
  t_last_error = s.ToString();
  if (c != nullptr) c->last_error = t_last_error;
  return static_cast<int>(s.code());
}

int Check(const kvtier_client* c, const Status& s) { return s.ok() ? KVTIER_OK : Fail(c, s); }

int NullArgument(const kvtier_client* c, const char* what) {
  return Fail(c, kvtier::InvalidArgumentError(std::string(what) + " is NULL"));
}

template <typename F>
int Guard(const kvtier_client* c, F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(c, kvtier::ResourceExhaustedError("out of memory"));
  } catch (const std::exception& e) {
    return Fail(c, kvtier::InternalError(std::string("unexpected exception: ") + e.what()));
  } catch (...) {
    return Fail(c, kvtier::InternalError("unexpected exception"));
  }
}

std::vector<BlockKey> ToKeys(const kvtier_key* keys, size_t n) {
  std::vector<BlockKey> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = BlockKey{keys[i].hi, keys[i].lo};
  return out;
}

Status CheckTier(uint32_t tier) {
  if (tier != KVTIER_TIER_DEVICE && tier != KVTIER_TIER_HOST) {
    return kvtier::InvalidArgumentError("tier " + std::to_string(tier) + " is not addressable");
  }
  return Status::Ok();
}

}  // namespace

extern "C" {

int kvtier_connect(const char* socket_path, const char* model, const char* salt,
                   const kvtier_layout* layout, kvtier_client** out) {
  return Guard(nullptr, [&] {
    if (out == nullptr) return NullArgument(nullptr, "out");
    *out = nullptr;
    if (model == nullptr) return NullArgument(nullptr, "model");
    if (layout == nullptr) return NullArgument(nullptr, "layout");
    kvtier::client::ClientOptions o;
    if (socket_path != nullptr) o.socket_path = socket_path;
    o.model = model;
    o.salt = salt != nullptr ? salt : "";
    o.client_name = "kvtier C API";
    if (layout->dtype > KVTIER_DTYPE_FP8_E5M2) {
      return Fail(nullptr,
                  kvtier::InvalidArgumentError("unknown dtype " + std::to_string(layout->dtype)));
    }
    if (layout->kind > KVTIER_KIND_LATENT) {
      return Fail(nullptr, kvtier::InvalidArgumentError("unknown layout kind " +
                                                        std::to_string(layout->kind)));
    }
    o.layout = kvtier::Layout{layout->layers,       layout->kv_heads,
                              layout->head_dim,     static_cast<kvtier::DType>(layout->dtype),
                              layout->block_tokens, static_cast<kvtier::KvKind>(layout->kind)};
    auto client = Client::Connect(o);
    if (!client.ok()) return Fail(nullptr, client.status());
    *out = new kvtier_client{*std::move(client), {}};
    return KVTIER_OK;
  });
}

void kvtier_close(kvtier_client* client) { delete client; }

const char* kvtier_last_error(const kvtier_client* client) {
  return client != nullptr ? client->last_error.c_str() : t_last_error.c_str();
}

uint64_t kvtier_block_bytes(const kvtier_client* client) {
  return client != nullptr ? client->impl->block_bytes() : 0;
}

int kvtier_keys(const kvtier_client* client, const uint32_t* tokens, size_t n, kvtier_key* out,
                size_t cap, size_t* nkeys) {
  return Guard(client, [&] {
    if (client == nullptr) return NullArgument(client, "client");
    if ((tokens == nullptr && n > 0) || nkeys == nullptr) return NullArgument(client, "argument");
    const auto keys = client->impl->Keys({tokens, n});
    *nkeys = keys.size();
    if (out == nullptr && cap > 0) return NullArgument(client, "out");
    for (size_t i = 0; i < keys.size() && i < cap; ++i) out[i] = {keys[i].hi, keys[i].lo};
    if (cap < keys.size()) {
      return Fail(client,
                  kvtier::InvalidArgumentError("room for " + std::to_string(cap) + " keys, " +
                                               std::to_string(keys.size()) + " needed"));
    }
    return KVTIER_OK;
  });
}

int kvtier_lookup(kvtier_client* client, const kvtier_key* keys, size_t n, size_t* hits) {
  return Guard(client, [&] {
    if (client == nullptr || (keys == nullptr && n > 0) || hits == nullptr) {
      return NullArgument(client, "argument");
    }
    auto reply = client->impl->Lookup(ToKeys(keys, n));
    if (!reply.ok()) return Fail(client, reply.status());
    *hits = reply->tiers.size();
    return KVTIER_OK;
  });
}

int kvtier_put(kvtier_client* client, const kvtier_key* keys, size_t n, const void* data,
               size_t bytes, size_t* written) {
  return Guard(client, [&] {
    if (client == nullptr || (keys == nullptr && n > 0) || (data == nullptr && bytes > 0)) {
      return NullArgument(client, "argument");
    }
    auto reply =
        client->impl->PutInline(ToKeys(keys, n), {static_cast<const std::byte*>(data), bytes});
    if (!reply.ok()) return Fail(client, reply.status());
    size_t count = 0;
    for (auto s : reply->states) count += s == kvtier::client::WireWriteState::kAllocated ? 1 : 0;
    if (written != nullptr) *written = count;
    return KVTIER_OK;
  });
}

namespace {

// The arguments of a read of n blocks into `out` (cap bytes): KVTIER_OK, or
// the error recorded on the client.
int CheckOut(kvtier_client* client, const kvtier_key* keys, size_t n, const void* out, size_t cap,
             const size_t* hits) {
  if (client == nullptr || (keys == nullptr && n > 0) || hits == nullptr ||
      (out == nullptr && cap > 0)) {
    return NullArgument(client, "argument");
  }
  if (cap / client->impl->block_bytes() < n) {
    return Fail(client, kvtier::InvalidArgumentError("out holds " + std::to_string(cap) +
                                                     " bytes, fewer than n blocks"));
  }
  return KVTIER_OK;
}

}  // namespace

int kvtier_get(kvtier_client* client, const kvtier_key* keys, size_t n, void* out, size_t cap,
               size_t* hits) {
  return Guard(client, [&] {
    if (int bad = CheckOut(client, keys, n, out, cap, hits); bad != KVTIER_OK) return bad;
    auto reply = client->impl->GetInline(ToKeys(keys, n));
    if (!reply.ok()) return Fail(client, reply.status());
    if (!reply->data.empty()) std::memcpy(out, reply->data.data(), reply->data.size());
    *hits = reply->hits;
    return KVTIER_OK;
  });
}

int kvtier_copy(kvtier_client* client, const kvtier_key* keys, size_t n, void* out, size_t cap,
                size_t* hits) {
  return Guard(client, [&] {
    if (int bad = CheckOut(client, keys, n, out, cap, hits); bad != KVTIER_OK) return bad;
    const uint64_t bb = client->impl->block_bytes();
    std::vector<std::byte*> dst(n);
    for (size_t i = 0; i < n; ++i) dst[i] = static_cast<std::byte*>(out) + i * bb;
    auto copied = client->impl->Read(ToKeys(keys, n), dst);
    if (!copied.ok()) return Fail(client, copied.status());
    *hits = *copied;
    return KVTIER_OK;
  });
}

int kvtier_allocate(kvtier_client* client, const kvtier_key* keys, size_t n, uint32_t tier,
                    kvtier_write** out) {
  return Guard(client, [&] {
    if (client == nullptr || (keys == nullptr && n > 0) || out == nullptr) {
      return NullArgument(client, "argument");
    }
    *out = nullptr;
    if (Status s = CheckTier(tier); !s.ok()) return Fail(client, s);
    auto w = client->impl->Allocate(ToKeys(keys, n), std::nullopt, static_cast<WireTier>(tier));
    if (!w.ok()) return Fail(client, w.status());
    *out = new kvtier_write{client, *std::move(w)};
    return KVTIER_OK;
  });
}

int kvtier_write_block(kvtier_write* w, size_t i, void** ptr, int* state) {
  const kvtier_client* c = w != nullptr ? w->owner : nullptr;
  return Guard(c, [&] {
    if (w == nullptr) return NullArgument(c, "w");
    if (i >= w->handle.size()) {
      return Fail(c, kvtier::InvalidArgumentError("block " + std::to_string(i) + " of " +
                                                  std::to_string(w->handle.size())));
    }
    const auto s = w->handle.state(i);
    const bool mine = s == kvtier::client::WireWriteState::kAllocated && w->handle.open();
    if (state != nullptr) *state = static_cast<int>(s);
    if (ptr != nullptr) *ptr = mine ? w->handle.Bytes(i).data() : nullptr;
    return KVTIER_OK;
  });
}

int kvtier_commit(kvtier_write* w) {
  std::unique_ptr<kvtier_write> owned(w);  // freed on every path
  const kvtier_client* c = w != nullptr ? w->owner : nullptr;
  return Guard(c, [&] {
    if (w == nullptr) return NullArgument(c, "w");
    return w->handle.open() ? Check(c, w->handle.Commit()) : KVTIER_OK;
  });
}

int kvtier_abort(kvtier_write* w) {
  std::unique_ptr<kvtier_write> owned(w);
  const kvtier_client* c = w != nullptr ? w->owner : nullptr;
  return Guard(c, [&] {
    if (w == nullptr) return NullArgument(c, "w");
    return w->handle.open() ? Check(c, w->handle.Abort()) : KVTIER_OK;
  });
}

int kvtier_acquire(kvtier_client* client, const kvtier_key* keys, size_t n, uint32_t tier,
                   kvtier_read** out) {
  return Guard(client, [&] {
    if (client == nullptr || (keys == nullptr && n > 0) || out == nullptr) {
      return NullArgument(client, "argument");
    }
    *out = nullptr;
    if (Status s = CheckTier(tier); !s.ok()) return Fail(client, s);
    auto r = client->impl->Acquire(ToKeys(keys, n), static_cast<WireTier>(tier));
    if (!r.ok()) return Fail(client, r.status());
    *out = new kvtier_read{client, *std::move(r)};
    return KVTIER_OK;
  });
}

size_t kvtier_read_count(const kvtier_read* r) { return r != nullptr ? r->lease.size() : 0; }

int kvtier_read_block(const kvtier_read* r, size_t i, const void** ptr) {
  const kvtier_client* c = r != nullptr ? r->owner : nullptr;
  return Guard(c, [&] {
    if (r == nullptr || ptr == nullptr) return NullArgument(c, "argument");
    if (i >= r->lease.size() || !r->lease.held()) {
      return Fail(c, kvtier::InvalidArgumentError("block " + std::to_string(i) + " of " +
                                                  std::to_string(r->lease.size()) + " leased"));
    }
    *ptr = r->lease.Bytes(i).data();
    return KVTIER_OK;
  });
}

int kvtier_release(kvtier_read* r) {
  std::unique_ptr<kvtier_read> owned(r);
  const kvtier_client* c = r != nullptr ? r->owner : nullptr;
  return Guard(c, [&] {
    if (r == nullptr) return NullArgument(c, "r");
    return r->lease.held() ? Check(c, r->lease.Release()) : KVTIER_OK;
  });
}

int kvtier_remove(kvtier_client* client, const kvtier_key* keys, size_t n, uint64_t* removed) {
  return Guard(client, [&] {
    if (client == nullptr || (keys == nullptr && n > 0)) return NullArgument(client, "argument");
    auto count = client->impl->Remove(ToKeys(keys, n));
    if (!count.ok()) return Fail(client, count.status());
    if (removed != nullptr) *removed = *count;
    return KVTIER_OK;
  });
}

int kvtier_set_retention(kvtier_client* client, const kvtier_key* keys, size_t n,
                         const kvtier_retention_range* ranges, size_t nranges, size_t* updated) {
  return Guard(client, [&] {
    if (client == nullptr || (keys == nullptr && n > 0) || (ranges == nullptr && nranges > 0)) {
      return NullArgument(client, "argument");
    }
    std::vector<kvtier::protocol::RetentionRange> rs(nranges);
    for (size_t i = 0; i < nranges; ++i) {
      rs[i] = {ranges[i].token_begin, ranges[i].token_end, ranges[i].priority,
               ranges[i].duration_ms};
    }
    auto count = client->impl->SetRetention(ToKeys(keys, n), rs);
    if (!count.ok()) return Fail(client, count.status());
    if (updated != nullptr) *updated = static_cast<size_t>(*count);
    return KVTIER_OK;
  });
}

int kvtier_hint(kvtier_client* client, const kvtier_key* keys, size_t n, uint32_t ttl_ms,
                size_t* protected_blocks, size_t* prefetching) {
  return Guard(client, [&] {
    if (client == nullptr || (keys == nullptr && n > 0)) return NullArgument(client, "argument");
    auto reply = client->impl->Hint(ToKeys(keys, n), ttl_ms);
    if (!reply.ok()) return Fail(client, reply.status());
    if (protected_blocks != nullptr) *protected_blocks = static_cast<size_t>(reply->blocks);
    if (prefetching != nullptr) *prefetching = static_cast<size_t>(reply->prefetching);
    return KVTIER_OK;
  });
}

int kvtier_unhint(kvtier_client* client, const kvtier_key* keys, size_t n, size_t* withdrawn) {
  return Guard(client, [&] {
    if (client == nullptr || (keys == nullptr && n > 0)) return NullArgument(client, "argument");
    auto count = client->impl->Unhint(ToKeys(keys, n));
    if (!count.ok()) return Fail(client, count.status());
    if (withdrawn != nullptr) *withdrawn = static_cast<size_t>(*count);
    return KVTIER_OK;
  });
}

int kvtier_stats_json(kvtier_client* client, char* buf, size_t cap, size_t* len) {
  return Guard(client, [&] {
    if (client == nullptr || len == nullptr || (buf == nullptr && cap > 0)) {
      return NullArgument(client, "argument");
    }
    auto stats = client->impl->Stats();
    if (!stats.ok()) return Fail(client, stats.status());
    const std::string json = kvtier::client::internal::StatsJson(*stats, /*pretty=*/false);
    *len = json.size();
    if (cap > 0) {
      const size_t n = json.size() < cap ? json.size() : cap - 1;
      std::memcpy(buf, json.data(), n);
      buf[n] = '\0';
    }
    if (cap <= json.size()) {
      return Fail(client, kvtier::InvalidArgumentError("stats need " +
                                                       std::to_string(json.size() + 1) + " bytes"));
    }
    return KVTIER_OK;
  });
}

}  // extern "C"
