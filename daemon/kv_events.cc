#include "daemon/kv_events.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cassert>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "daemon/log.h"

// The encoder is msgpack-c's packer, header-only and without Boost (the
// packer needs none; msgpack.hpp would pull in its Boost adaptors). Like
// msgspec it writes every integer, string and container header in its
// shortest form, so a batch comes out as the very bytes vLLM's encoder
// writes (tests/daemon/kv_events_test.cc compares one byte for byte), and
// no format code of ours needs its own tests.
#ifndef MSGPACK_NO_BOOST
#define MSGPACK_NO_BOOST
#endif
#include <msgpack/pack.hpp>

namespace kvtier::daemon {
namespace {

using SteadyTime = std::chrono::steady_clock::time_point;

// How long the destructor goes on sending what is queued.
constexpr std::chrono::seconds kFlushTimeout{1};
// Replay requests answered per wake-up, so a flood of them cannot keep new
// batches waiting long.
constexpr int kMaxReplaysPerWake = 16;
// A replay request is three short frames; a longer frame is not one, and
// ZeroMQ disconnects the peer that sends it instead of buffering it.
constexpr int64_t kMaxReplayFrameBytes = 256;
// After an unexpected error on the publisher thread, so that one that
// persists does not spin the thread.
constexpr std::chrono::milliseconds kErrorBackoff{10};

std::array<unsigned char, 8> BigEndian(uint64_t v) {
  std::array<unsigned char, 8> out;
  for (size_t i = 0; i < 8; ++i) out[7 - i] = static_cast<unsigned char>(v >> (8 * i));
  return out;
}

uint64_t FromBigEndian(const unsigned char* p) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

// vLLM's rule (ZmqEventPublisher._is_bind_endpoint) plus tcp port 0, which
// only makes sense bound.
bool IsBindEndpoint(std::string_view endpoint) {
  if (endpoint.find('*') != std::string_view::npos) return true;
  if (endpoint.find("::") != std::string_view::npos) return true;
  if (endpoint.starts_with("ipc://")) return true;
  return endpoint.starts_with("tcp://") && endpoint.ends_with(":0");
}

Status ZmqError(const zmq::error_t& e, std::string_view what, std::string_view endpoint) {
  const std::string msg = Str("kv events: cannot ", what, " ", endpoint, ": ", e.what());
  switch (e.num()) {
    case EINVAL:
    case EPROTONOSUPPORT:
    case ENOCOMPATPROTO:
      return InvalidArgumentError(msg);
    case EMFILE:
    case ENFILE:
      return ResourceExhaustedError(msg);
    default:  // EADDRINUSE, EADDRNOTAVAIL, ENODEV, EACCES, ENOENT, ...
      return UnavailableError(msg);
  }
}

// msgpack-c's packer writes to any stream with write(const char*, size_t).
struct StringSink {
  std::string& out;
  void write(const char* data, size_t size) { out.append(data, size); }
};
using Packer = msgpack::packer<StringSink>;

uint32_t Size32(size_t n) {
  assert(n <= UINT32_MAX && "msgpack containers hold at most 2^32-1 entries");
  return static_cast<uint32_t>(n);
}

void PackStr(Packer& pk, std::string_view s) {
  pk.pack_str(Size32(s.size()));
  pk.pack_str_body(s.data(), Size32(s.size()));
}

void PackMedium(Packer& pk, const std::string& medium) {
  PackStr(pk, "medium");
  if (medium.empty()) {
    pk.pack_nil();
  } else {
    PackStr(pk, medium);
  }
}

void PackHashes(Packer& pk, const std::vector<uint64_t>& hashes) {
  PackStr(pk, "block_hashes");
  pk.pack_array(Size32(hashes.size()));
  for (uint64_t h : hashes) pk.pack_uint64(h);
}

// A msgspec tagged struct (tag=True, omit_defaults=True): a map, the tag
// "type" first, then the fields in declaration order, those with a default
// left out while they hold it. vLLM's fields with defaults (extra_keys,
// group_idx, locality, ...) we never set, so they never appear.
void PackEvent(Packer& pk, const KvEvent& e) {
  switch (e.kind) {
    case KvEvent::Kind::kStored:
      pk.pack_map(8);
      PackStr(pk, "type");
      PackStr(pk, "BlockStored");
      PackHashes(pk, e.block_hashes);
      PackStr(pk, "parent_block_hash");
      if (e.parent_hash.has_value()) {
        pk.pack_uint64(*e.parent_hash);
      } else {
        pk.pack_nil();
      }
      PackStr(pk, "token_ids");
      pk.pack_array(Size32(e.token_ids.size()));
      for (uint32_t t : e.token_ids) pk.pack_uint32(t);
      PackStr(pk, "block_size");
      pk.pack_uint32(e.block_size);
      PackStr(pk, "lora_id");
      pk.pack_nil();
      PackMedium(pk, e.medium);
      PackStr(pk, "lora_name");
      pk.pack_nil();
      return;
    case KvEvent::Kind::kRemoved:
      pk.pack_map(3);
      PackStr(pk, "type");
      PackStr(pk, "BlockRemoved");
      PackHashes(pk, e.block_hashes);
      PackMedium(pk, e.medium);
      return;
    case KvEvent::Kind::kAllCleared:
      pk.pack_map(1);
      PackStr(pk, "type");
      PackStr(pk, "AllBlocksCleared");
      return;
  }
  assert(false && "unknown KvEvent::Kind");
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

class ZmqKvEventPublisher final : public KvEventPublisher {
 public:
  explicit ZmqKvEventPublisher(const KvEventOptions& options) : options_(options) {}
  ~ZmqKvEventPublisher() override;

  // Opens the sockets and starts the thread; called once, by Start().
  Status Open();

  void Publish(std::string topic, std::vector<KvEvent> events) override;
  Stats stats() const override;
  std::string endpoint() const override { return endpoint_; }
  std::string replay_endpoint() const override { return replay_endpoint_; }

 private:
  struct Pending {
    std::string topic;
    std::vector<KvEvent> events;
    double ts;
  };
  struct Sent {  // a batch kept for replay; its seq is implied by its place
    std::string topic;
    std::string payload;
  };

  Status OpenSockets();
  void Wake();
  // The publisher thread.
  void Run();
  void Send(Pending& batch);
  // Waits for the eventfd or a replay request; answers the requests.
  void WaitAndServe();
  void ServeReplay(const zmq::message_t& identity, uint64_t start);

  const KvEventOptions options_;
  std::string endpoint_;         // set by Open(), then read-only
  std::string replay_endpoint_;  // set by Open(), then read-only

  // The context is declared before the sockets: it must outlive them (its
  // destructor waits for them to close). The sockets are the publisher
  // thread's from Open() to the join in the destructor.
  zmq::context_t ctx_;
  zmq::socket_t pub_;
  zmq::socket_t replay_;  // null without replay
  int wake_fd_ = -1;      // eventfd: Publish() and the destructor wake the thread

  std::mutex mu_;
  std::deque<Pending> queue_;  // GUARDED_BY(mu_)
  bool stop_ = false;          // GUARDED_BY(mu_)

  // Publisher thread only.
  uint64_t next_seq_ = 0;
  std::deque<Sent> sent_;  // the last buffer_batches sent: seq next_seq_ - size() ...
  RateLimitedLog error_log_;

  std::atomic<uint64_t> batches_published_{0};
  std::atomic<uint64_t> events_published_{0};
  std::atomic<uint64_t> batches_dropped_{0};
  std::atomic<uint64_t> replay_requests_{0};

  std::thread thread_;
};

ZmqKvEventPublisher::~ZmqKvEventPublisher() {
  if (thread_.joinable()) {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    Wake();
    thread_.join();
  }
  // linger 0 was set on both sockets when they were made; the members'
  // destructors close them, then the context.
  if (wake_fd_ >= 0) close(wake_fd_);
}

Status ZmqKvEventPublisher::Open() {
  KVTIER_RETURN_IF_ERROR(OpenSockets());
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    return ResourceExhaustedError(Str("kv events: eventfd: ", std::strerror(errno)));
  }
  try {
    thread_ = std::thread([this] { Run(); });
  } catch (const std::system_error& e) {
    return ResourceExhaustedError(Str("kv events: cannot start the publisher thread: ", e.what()));
  }
  return Status::Ok();
}

Status ZmqKvEventPublisher::OpenSockets() {
  const std::string& ep = options_.endpoint;
  const char* step = "create a PUB socket for";
  try {
    pub_ = zmq::socket_t(ctx_, zmq::socket_type::pub);
    pub_.set(zmq::sockopt::linger, 0);
    pub_.set(zmq::sockopt::sndhwm, options_.hwm);
    if (ep.find('[') != std::string::npos) pub_.set(zmq::sockopt::ipv6, 1);
    if (IsBindEndpoint(ep)) {
      step = "bind";
      pub_.bind(ep);
      endpoint_ = pub_.get(zmq::sockopt::last_endpoint);
    } else {
      // ZeroMQ checks the syntax now and reaches the peer in the
      // background, retrying until it answers.
      step = "connect to";
      pub_.connect(ep);
      endpoint_ = ep;
    }
  } catch (const zmq::error_t& e) {
    return ZmqError(e, step, ep);
  }

  const std::string& rep = options_.replay_endpoint;
  if (rep.empty()) return Status::Ok();
  try {
    step = "create a ROUTER socket for";
    replay_ = zmq::socket_t(ctx_, zmq::socket_type::router);
    replay_.set(zmq::sockopt::linger, 0);
    // An answer is up to buffer_batches + 1 messages to one peer, queued at
    // once: room for all of them, or a full replay would be cut at
    // ZeroMQ's default of 1000.
    const uint64_t hwm = options_.buffer_batches + 16;
    replay_.set(zmq::sockopt::sndhwm, hwm > INT_MAX ? INT_MAX : static_cast<int>(hwm));
    // A peer gone or too slow is an error on send (EHOSTUNREACH, EAGAIN)
    // instead of a silent drop, so its answer is abandoned at once.
    replay_.set(zmq::sockopt::router_mandatory, 1);
    replay_.set(zmq::sockopt::maxmsgsize, kMaxReplayFrameBytes);
    if (rep.find('[') != std::string::npos) replay_.set(zmq::sockopt::ipv6, 1);
    step = "bind";
    replay_.bind(rep);
    replay_endpoint_ = replay_.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return ZmqError(e, step, rep);
  }
  return Status::Ok();
}

void ZmqKvEventPublisher::Wake() {
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) < 0) {
    // EAGAIN: the counter is at its maximum, so the thread is woken anyway.
  }
}

void ZmqKvEventPublisher::Publish(std::string topic, std::vector<KvEvent> events) {
  Pending batch{std::move(topic), std::move(events), NowSeconds()};
  bool queued = false;
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    // Drop-newest: the batch already queued stays, this one goes. Every
    // queued batch was accepted in order, so what does go out is the
    // engine's history up to a point, stored-before-removed intact for the
    // blocks in it, and a drop costs one counter: the batch is freed below,
    // outside the lock.
    if (queue_.size() < options_.max_queue_batches) {
      queue_.push_back(std::move(batch));
      queued = true;
      // The thread takes the whole queue at once: only the first batch of
      // an empty queue needs to wake it.
      wake = queue_.size() == 1;
    }
  }
  if (!queued) {
    batches_dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (wake) Wake();
}

KvEventPublisher::Stats ZmqKvEventPublisher::stats() const {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  return Stats{batches_published_.load(kRelaxed), events_published_.load(kRelaxed),
               batches_dropped_.load(kRelaxed), replay_requests_.load(kRelaxed)};
}

void ZmqKvEventPublisher::Run() {
  std::deque<Pending> work;
  for (;;) {
    bool stopping;
    {
      std::lock_guard lock(mu_);
      work.swap(queue_);
      stopping = stop_;
    }
    const SteadyTime deadline =
        stopping ? std::chrono::steady_clock::now() + kFlushTimeout : SteadyTime::max();
    uint64_t left = work.size();
    for (Pending& batch : work) {
      if (stopping && (left & 63) == 0 && std::chrono::steady_clock::now() > deadline) break;
      Send(batch);
      --left;
    }
    if (left > 0) batches_dropped_.fetch_add(left, std::memory_order_relaxed);
    work.clear();
    if (stopping) return;  // Publish() may not be called any more: nothing is left
    WaitAndServe();
  }
}

void ZmqKvEventPublisher::Send(Pending& batch) {
  try {
    std::string payload = EncodeKvEventBatch(batch.ts, batch.events);
    const auto seq = BigEndian(next_seq_);
    const std::array<zmq::const_buffer, 3> frames = {zmq::buffer(batch.topic), zmq::buffer(seq),
                                                     zmq::buffer(payload)};
    // PUB drops per subscriber at its hwm rather than blocking, so a refusal
    // here is rare; dontwait makes sure it never waits either way.
    if (!zmq::send_multipart(pub_, frames, zmq::send_flags::dontwait)) {
      batches_dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    ++next_seq_;
    batches_published_.fetch_add(1, std::memory_order_relaxed);
    events_published_.fetch_add(batch.events.size(), std::memory_order_relaxed);
    if (options_.buffer_batches == 0) return;
    if (sent_.size() >= options_.buffer_batches) sent_.pop_front();
    sent_.push_back(Sent{std::move(batch.topic), std::move(payload)});
  } catch (const std::exception& e) {  // zmq::error_t, bad_alloc: this batch is lost
    batches_dropped_.fetch_add(1, std::memory_order_relaxed);
    error_log_.Log(LogLevel::kError, Str("kv events: cannot publish a batch: ", e.what()));
  }
}

void ZmqKvEventPublisher::WaitAndServe() {
  std::array<zmq::pollitem_t, 2> items = {zmq::pollitem_t{nullptr, wake_fd_, ZMQ_POLLIN, 0},
                                          zmq::pollitem_t{replay_.handle(), 0, ZMQ_POLLIN, 0}};
  const size_t n = replay_ ? 2 : 1;
  try {
    zmq::poll(items.data(), n, std::chrono::milliseconds{-1});
    if ((items[0].revents & ZMQ_POLLIN) != 0) {
      // Reset before the caller takes the queue, so a batch queued after
      // that wakes the thread again.
      uint64_t count;
      if (read(wake_fd_, &count, sizeof(count)) < 0) {
        // EAGAIN: already reset.
      }
    }
    if (n < 2 || (items[1].revents & ZMQ_POLLIN) == 0) return;
    for (int i = 0; i < kMaxReplaysPerWake; ++i) {
      // A request: (identity, "", start seq). Parts past the third are read
      // and dropped, so a malformed message never stays half-read.
      std::array<zmq::message_t, 3> parts;
      size_t count = 0;
      bool more = true;
      while (more) {
        zmq::message_t part;
        if (!replay_.recv(part, zmq::recv_flags::dontwait)) {
          if (count == 0) return;  // no more requests
          continue;                // the rest of a multipart is atomic: it is there
        }
        more = part.more();
        if (count < parts.size()) parts[count] = std::move(part);
        ++count;
      }
      // vLLM ignores what is not a request; so do we (the asker times out).
      if (count != 3 || parts[1].size() != 0 || parts[2].size() != 8) {
        error_log_.Log(LogLevel::kWarn, "kv events: ignored a malformed replay request");
        continue;
      }
      ServeReplay(parts[0], FromBigEndian(parts[2].data<unsigned char>()));
    }
  } catch (const std::exception& e) {  // zmq::error_t, bad_alloc
    const auto* z = dynamic_cast<const zmq::error_t*>(&e);
    if (z != nullptr && z->num() == EINTR) return;
    error_log_.Log(LogLevel::kError, Str("kv events: ", e.what()));
    std::this_thread::sleep_for(kErrorBackoff);
  }
}

void ZmqKvEventPublisher::ServeReplay(const zmq::message_t& identity, uint64_t start) {
  replay_requests_.fetch_add(1, std::memory_order_relaxed);
  const uint64_t first = next_seq_ - sent_.size();
  const size_t from =
      start <= first ? 0 : static_cast<size_t>(std::min<uint64_t>(start - first, sent_.size()));
  const zmq::const_buffer empty = zmq::buffer(static_cast<const void*>(nullptr), 0);
  try {
    for (size_t i = from; i < sent_.size(); ++i) {
      const auto seq = BigEndian(first + i);
      const std::array<zmq::const_buffer, 5> frames = {
          zmq::buffer(identity.data(), identity.size()), empty, zmq::buffer(sent_[i].topic),
          zmq::buffer(seq), zmq::buffer(sent_[i].payload)};
      if (!zmq::send_multipart(replay_, frames, zmq::send_flags::dontwait)) {
        // The peer fell this far behind. No end marker: a cut answer must
        // not look whole; the asker times out and asks again.
        error_log_.Log(LogLevel::kWarn, "kv events: a replay peer fell behind; answer cut");
        return;
      }
    }
    const auto end_marker = BigEndian(~uint64_t{0});  // -1, two's complement
    const std::array<zmq::const_buffer, 5> frames = {zmq::buffer(identity.data(), identity.size()),
                                                     empty, empty, zmq::buffer(end_marker), empty};
    if (!zmq::send_multipart(replay_, frames, zmq::send_flags::dontwait)) {
      error_log_.Log(LogLevel::kWarn, "kv events: a replay peer fell behind; answer cut");
    }
  } catch (const zmq::error_t& e) {  // EHOSTUNREACH: the asker is gone
    error_log_.Log(LogLevel::kWarn, Str("kv events: replay answer abandoned: ", e.what()));
  }
}

}  // namespace

std::string EncodeKvEventBatch(double ts, const std::vector<KvEvent>& events) {
  std::string out;
  StringSink sink{out};
  Packer pk(sink);
  // EventBatch is array_like: [ts, events, data_parallel_rank]. vLLM's
  // publisher fills in its rank; kvtierd is one rank, 0.
  pk.pack_array(3);
  pk.pack_double(ts);
  pk.pack_array(Size32(events.size()));
  for (const KvEvent& e : events) PackEvent(pk, e);
  pk.pack_uint32(0);
  return out;
}

Status ValidateKvEventOptions(const KvEventOptions& options) {
  if (options.endpoint.empty()) return InvalidArgumentError("kv events: endpoint is empty");
  for (const std::string* ep : {&options.endpoint, &options.replay_endpoint}) {
    if (ep->starts_with("inproc://")) {
      return InvalidArgumentError(
          Str("kv events: ", *ep,
              ": inproc endpoints are private to the publisher's ZeroMQ context; use ipc://"));
    }
  }
  if (options.hwm < 0) return InvalidArgumentError("kv events: hwm must be >= 0");
  if (options.max_queue_batches == 0) {
    return InvalidArgumentError("kv events: max_queue_batches must be >= 1");
  }
  return Status::Ok();
}

Result<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Start(const KvEventOptions& options) {
  KVTIER_RETURN_IF_ERROR(ValidateKvEventOptions(options));
  std::unique_ptr<ZmqKvEventPublisher> publisher;
  try {
    publisher = std::make_unique<ZmqKvEventPublisher>(options);  // makes the context
  } catch (const zmq::error_t& e) {
    return ResourceExhaustedError(Str("kv events: cannot create a ZeroMQ context: ", e.what()));
  }
  KVTIER_RETURN_IF_ERROR(publisher->Open());
  return std::unique_ptr<KvEventPublisher>(std::move(publisher));
}

}  // namespace kvtier::daemon
