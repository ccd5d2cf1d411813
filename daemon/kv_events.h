// KvEventPublisher: block events (stored, removed, all cleared) published on
// a ZeroMQ PUB socket in vLLM's KV-event wire format, so that KV-aware
// routers written for vLLM's events (NVIDIA Dynamo, llm-d) read kvtierd's
// (DESIGN.md §9). This module knows ZeroMQ and msgpack and no tiers: the
// daemon converts the engine's reports into KvEvents.
//
// The wire, as vLLM's ZmqEventPublisher (vllm/distributed/kv_events.py):
//  - PUB: one multipart message per batch: (topic, seq, payload). seq is an
//    8-byte big-endian unsigned counter, 0 for the first batch sent, one more
//    for each batch after it. payload is the msgpack of an EventBatch,
//    `[ts, [event...], 0]`: float64 seconds since the epoch, the events, data
//    parallel rank 0. Each event is a msgpack map whose first entry is
//    "type" ("BlockStored" | "BlockRemoved" | "AllBlocksCleared"), then the
//    fields vLLM always writes (omit_defaults: the defaulted ones are left
//    out), None as nil:
//      BlockStored:  block_hashes, parent_block_hash, token_ids, block_size,
//                    lora_id (nil), medium, lora_name (nil)
//      BlockRemoved: block_hashes, medium
//  - Replay (ROUTER, optional): a request is (identity, "", 8-byte big-endian
//    start seq), from a DEALER that sends ("", seq). The answer is every
//    batch still buffered with seq >= start, each as (identity, "", topic,
//    seq, payload), then the end marker (identity, "", "", -1 as 8 bytes
//    big-endian, ""). The last `buffer_batches` batches are kept. An answer
//    the asker reads too slowly to take whole is cut, without the end
//    marker. Anything else on the socket is ignored, as vLLM does.
//
// Delivery is best effort, as in vLLM: a batch the queue or the socket
// refuses is dropped and counted, never retried, and takes no sequence number
// (seq counts the batches sent), so a subscriber cannot see such a loss in
// the numbers; it sees batches_dropped. A gap a subscriber does see (its own
// receive queue overflowed, it reconnected) is what replay is for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace kvtier::daemon {

// One block event, the fields vLLM's BlockStored / BlockRemoved /
// AllBlocksCleared carry that kvtierd has.
struct KvEvent {
  enum class Kind : uint8_t { kStored, kRemoved, kAllCleared };
  Kind kind = Kind::kStored;
  // Stored and removed: the blocks, a chain's blocks in order for stored.
  std::vector<uint64_t> block_hashes;
  // Stored: the block before block_hashes[0]; none (nil) for a chain that
  // starts at the root.
  std::optional<uint64_t> parent_hash;
  // Stored: the blocks' token ids, block_size per block; empty unless the
  // worker gave them (kvtierd sees keys, not tokens: DESIGN.md §1).
  std::vector<uint32_t> token_ids;
  // Stored: tokens per block.
  uint32_t block_size = 0;
  // Stored and removed: where the blocks are, "GPU", "CPU", "STORAGE",
  // "REMOTE"; empty is written as nil (vLLM's "unspecified").
  std::string medium;
};

struct KvEventOptions {
  // Where the PUB socket goes. Bound when it holds "*" or "::", starts with
  // ipc://, or is tcp with port 0 (the OS picks one: see endpoint()); connected
  // otherwise (to a forwarder that binds), as vLLM does. inproc:// is refused:
  // the publisher's ZeroMQ context is its own, so no one could reach it.
  std::string endpoint = "tcp://*:5557";
  // Where the ROUTER socket for replay is bound (always bound, as in vLLM);
  // empty: no replay.
  std::string replay_endpoint;
  // Batches kept for replay, the last ones sent; each costs its encoded size
  // (tens of bytes plus 9 per block hash and up to 5 per token id). 0: replay
  // answers with the end marker alone.
  uint64_t buffer_batches = 10'000;
  // ZMQ_SNDHWM of the PUB socket: messages queued per subscriber before the
  // socket drops that subscriber's messages (ZeroMQ's PUB never blocks).
  // 0: no limit. vLLM's default.
  int hwm = 100'000;
  // Batches waiting for the publisher thread, at most; past it Publish drops
  // the batch it is given. Bounds the memory a stalled publisher thread can
  // hold. At least 1. vLLM's default.
  size_t max_queue_batches = 100'000;
};

// Validates `options` as Start() does, without opening anything.
Status ValidateKvEventOptions(const KvEventOptions& options);

// Thread-safety: Publish() and stats() may be called from any thread at any
// time; the endpoints are fixed at Start(). One thread inside owns both
// sockets (ZeroMQ sockets are not thread-safe): it encodes, numbers and sends
// the batches and answers replay requests. Destroying the publisher while
// another thread calls Publish() is a bug.
class KvEventPublisher {
 public:
  struct Stats {
    uint64_t batches_published = 0;  // handed to the PUB socket, numbered
    uint64_t events_published = 0;   // in those batches
    // Refused by the full queue, by the PUB socket, or still queued 1 s into
    // the destructor. published + dropped == batches given to Publish, once
    // the queue is empty. (A PUB socket drops a subscriber's messages past
    // its hwm without telling; those count as published.)
    uint64_t batches_dropped = 0;
    uint64_t replay_requests = 0;  // well-formed ones, answered
  };

  // Creates the sockets, binds or connects them, and starts the publisher
  // thread. InvalidArgument for options ValidateKvEventOptions refuses or an
  // endpoint ZeroMQ cannot parse; Unavailable for one it cannot bind (in use,
  // no such address or directory); ResourceExhausted when the process is out
  // of fds or threads. Connecting never fails on a peer that is not there:
  // ZeroMQ reaches it in the background, retrying until it answers.
  static Result<std::unique_ptr<KvEventPublisher>> Start(const KvEventOptions& options);

  // Sends what is queued (for at most 1 s; the rest is dropped and counted),
  // stops the thread, and closes the sockets with linger 0: what ZeroMQ has
  // not yet written to a subscriber's connection is lost.
  virtual ~KvEventPublisher() = default;

  // Hands one batch, stamped now, to the publisher thread, to go out under
  // `topic` (vLLM's default topic is ""). Never blocks on the network or the
  // publisher thread (it takes a mutex the thread holds only to swap the
  // queue out, and may write an eventfd to wake it): when max_queue_batches
  // batches are waiting, this one is dropped and counted (drop-newest).
  // Batches go out in the order Publish() was called.
  virtual void Publish(std::string topic, std::vector<KvEvent> events) = 0;

  virtual Stats stats() const = 0;

  // The endpoints as bound ("tcp://127.0.0.1:41234" for "tcp://127.0.0.1:0",
  // "tcp://0.0.0.0:5557" for "tcp://*:5557"), or as given when connected;
  // replay_endpoint() is empty without replay.
  virtual std::string endpoint() const = 0;
  virtual std::string replay_endpoint() const = 0;

 protected:
  KvEventPublisher() = default;
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;
};

// The msgpack payload of one batch, `[ts, [event...], 0]`, exactly as the
// publisher sends it. Exposed for tests and tools; thread-safe (pure).
std::string EncodeKvEventBatch(double ts, const std::vector<KvEvent>& events);

}  // namespace kvtier::daemon
