// The KV-event publisher against real ZeroMQ peers: a SUB subscriber and a
// DEALER replay client written here with cppzmq, payloads decoded with
// msgpack-c, and the encoder checked byte for byte against vLLM's own.
#include "daemon/kv_events.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#define MSGPACK_NO_BOOST
#include <msgpack.hpp>

#include "support/temp_dir.h"

namespace kvtier::daemon {

using kvtier::testing::TempDir;
namespace {

using std::chrono::milliseconds;

// How long a test waits for something that should happen at once before it
// gives up (a failure, not a measurement).
constexpr auto kPatience = std::chrono::seconds(20);

std::string BigEndian(uint64_t v) {
  std::string out(8, '\0');
  for (size_t i = 0; i < 8; ++i) out[7 - i] = static_cast<char>(v >> (8 * i));
  return out;
}

uint64_t FromBigEndian(const zmq::message_t& m) {
  EXPECT_EQ(m.size(), 8u);
  uint64_t v = 0;
  const auto* p = m.data<unsigned char>();
  for (size_t i = 0; i < 8 && i < m.size(); ++i) v = (v << 8) | p[i];
  return v;
}

// --- msgpack decoding helpers: each checks the type it expects. ---

std::string AsStr(const msgpack::object& o) {
  EXPECT_EQ(o.type, msgpack::type::STR);
  return o.type == msgpack::type::STR ? std::string(o.via.str.ptr, o.via.str.size) : "";
}

uint64_t UInt(const msgpack::object& o) {
  EXPECT_EQ(o.type, msgpack::type::POSITIVE_INTEGER);
  return o.via.u64;
}

std::vector<uint64_t> UInts(const msgpack::object& o) {
  std::vector<uint64_t> out;
  EXPECT_EQ(o.type, msgpack::type::ARRAY);
  if (o.type != msgpack::type::ARRAY) return out;
  for (uint32_t i = 0; i < o.via.array.size; ++i) out.push_back(UInt(o.via.array.ptr[i]));
  return out;
}

bool IsNil(const msgpack::object& o) { return o.type == msgpack::type::NIL; }

// A map's entries in wire order.
std::vector<std::pair<std::string, msgpack::object>> Entries(const msgpack::object& o) {
  std::vector<std::pair<std::string, msgpack::object>> out;
  EXPECT_EQ(o.type, msgpack::type::MAP);
  if (o.type != msgpack::type::MAP) return out;
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    out.emplace_back(AsStr(o.via.map.ptr[i].key), o.via.map.ptr[i].val);
  }
  return out;
}

std::vector<std::string> Keys(const msgpack::object& o) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : Entries(o)) keys.push_back(k);
  return keys;
}

msgpack::object Field(const msgpack::object& o, const std::string& name) {
  for (const auto& [k, v] : Entries(o)) {
    if (k == name) return v;
  }
  ADD_FAILURE() << "no field " << name;
  return msgpack::object();
}

// An EventBatch: [ts, [event...], data_parallel_rank]. Returns the events.
std::vector<msgpack::object> BatchEvents(const msgpack::object& batch) {
  std::vector<msgpack::object> events;
  EXPECT_EQ(batch.type, msgpack::type::ARRAY);
  if (batch.type != msgpack::type::ARRAY || batch.via.array.size != 3) {
    ADD_FAILURE() << "not an array of 3";
    return events;
  }
  EXPECT_EQ(batch.via.array.ptr[0].type, msgpack::type::FLOAT64);
  EXPECT_GT(batch.via.array.ptr[0].via.f64, 1.6e9);  // seconds since the epoch
  EXPECT_EQ(UInt(batch.via.array.ptr[2]), 0u);       // data parallel rank 0
  const msgpack::object& list = batch.via.array.ptr[1];
  EXPECT_EQ(list.type, msgpack::type::ARRAY);
  if (list.type != msgpack::type::ARRAY) return events;
  for (uint32_t i = 0; i < list.via.array.size; ++i) events.push_back(list.via.array.ptr[i]);
  return events;
}

KvEvent Stored(std::vector<uint64_t> hashes, std::optional<uint64_t> parent,
               std::vector<uint32_t> tokens, uint32_t block_size, std::string medium) {
  KvEvent e;
  e.kind = KvEvent::Kind::kStored;
  e.block_hashes = std::move(hashes);
  e.parent_hash = parent;
  e.token_ids = std::move(tokens);
  e.block_size = block_size;
  e.medium = std::move(medium);
  return e;
}

KvEvent Removed(std::vector<uint64_t> hashes, std::string medium) {
  KvEvent e;
  e.kind = KvEvent::Kind::kRemoved;
  e.block_hashes = std::move(hashes);
  e.medium = std::move(medium);
  return e;
}

KvEvent Cleared() {
  KvEvent e;
  e.kind = KvEvent::Kind::kAllCleared;
  return e;
}

// Batch i of a test: one removed event naming block i, so a received batch
// says which one it is.
std::vector<KvEvent> Numbered(uint64_t i) { return {Removed({i}, "CPU")}; }

uint64_t NumberOf(const zmq::message_t& payload) {
  auto handle = msgpack::unpack(payload.data<char>(), payload.size());
  auto events = BatchEvents(handle.get());
  if (events.size() != 1) return ~uint64_t{0};
  auto hashes = UInts(Field(events[0], "block_hashes"));
  return hashes.size() == 1 ? hashes[0] : ~uint64_t{0};
}

template <typename Pred>
bool WaitFor(Pred pred) {
  const auto give_up = std::chrono::steady_clock::now() + kPatience;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

class KvEventsTest : public ::testing::Test {
 protected:
  std::string Ipc(const std::string& name) const { return "ipc://" + (dir_ / name); }

  std::unique_ptr<KvEventPublisher> StartOrDie(const KvEventOptions& options) {
    auto p = KvEventPublisher::Start(options);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? std::move(p).value() : nullptr;
  }

  // A SUB socket on `endpoint`, subscribed to every topic.
  zmq::socket_t Subscriber(const std::string& endpoint, int rcvhwm = 1000) {
    zmq::socket_t sub(ctx_, zmq::socket_type::sub);
    sub.set(zmq::sockopt::linger, 0);
    sub.set(zmq::sockopt::rcvhwm, rcvhwm);
    sub.set(zmq::sockopt::subscribe, "");
    sub.connect(endpoint);
    return sub;
  }

  // Publishes probes (topic "probe") until `sub` receives one, so that the
  // subscription has reached the publisher (ZeroMQ's slow joiner). Returns
  // the probe's seq; every batch published after it reaches `sub`.
  static uint64_t Join(KvEventPublisher& publisher, zmq::socket_t& sub) {
    const auto give_up = std::chrono::steady_clock::now() + kPatience;
    while (std::chrono::steady_clock::now() < give_up) {
      publisher.Publish("probe", {Cleared()});
      std::vector<zmq::message_t> frames;
      sub.set(zmq::sockopt::rcvtimeo, 20);
      if (zmq::recv_multipart(sub, std::back_inserter(frames))) {
        sub.set(zmq::sockopt::rcvtimeo, -1);
        EXPECT_EQ(frames.size(), 3u);
        return FromBigEndian(frames[1]);
      }
    }
    ADD_FAILURE() << "the subscriber never joined";
    return 0;
  }

  zmq::context_t ctx_;
  TempDir dir_{"/tmp/kvtier-events"};
};

// The bytes of vLLM's own encoder for this batch: msgspec 0.23.0's
// msgspec.msgpack.encode of vllm.distributed.kv_events.KVEventBatch (vLLM
// 0.32), with
//   BlockStored(block_hashes=[1, 2**64-1, 300], parent_block_hash=2**63,
//               token_ids=[0, 127, 128, 70000], block_size=2, lora_id=None,
//               medium="GPU", lora_name=None),
//   BlockRemoved(block_hashes=[5], medium=None), AllBlocksCleared(),
//   BlockStored(block_hashes=[7], parent_block_hash=None, token_ids=[],
//               block_size=16, lora_id=None, medium=None, lora_name=None),
// ts=1700000000.5, data_parallel_rank=0.
constexpr char kVllmBatchHex[] =
    "93cb41d954fc402000009488a474797065ab426c6f636b53746f726564ac626c6f636b5f686173686573"
    "9301cfffffffffffffffffcd012cb1706172656e745f626c6f636b5f68617368cf8000000000000000a9"
    "746f6b656e5f69647394007fcc80ce00011170aa626c6f636b5f73697a6502a76c6f72615f6964c0a66d"
    "656469756da3475055a96c6f72615f6e616d65c083a474797065ac426c6f636b52656d6f766564ac626c"
    "6f636b5f6861736865739105a66d656469756dc081a474797065b0416c6c426c6f636b73436c65617265"
    "6488a474797065ab426c6f636b53746f726564ac626c6f636b5f6861736865739107b1706172656e745f"
    "626c6f636b5f68617368c0a9746f6b656e5f69647390aa626c6f636b5f73697a6510a76c6f72615f6964"
    "c0a66d656469756dc0a96c6f72615f6e616d65c000";

std::vector<KvEvent> VllmBatchEvents() {
  return {Stored({1, ~uint64_t{0}, 300}, uint64_t{1} << 63, {0, 127, 128, 70000}, 2, "GPU"),
          Removed({5}, ""), Cleared(), Stored({7}, std::nullopt, {}, 16, "")};
}

std::string Hex(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

TEST(KvEventsEncodingTest, BytesAreVllms) {
  EXPECT_EQ(Hex(EncodeKvEventBatch(1700000000.5, VllmBatchEvents())), kVllmBatchHex);
}

TEST(KvEventsEncodingTest, DecodesToVllmsStructure) {
  const std::string payload = EncodeKvEventBatch(1700000000.5, VllmBatchEvents());
  auto handle = msgpack::unpack(payload.data(), payload.size());
  const msgpack::object& batch = handle.get();
  ASSERT_EQ(batch.type, msgpack::type::ARRAY);
  ASSERT_EQ(batch.via.array.size, 3u);
  EXPECT_EQ(batch.via.array.ptr[0].via.f64, 1700000000.5);
  auto events = BatchEvents(batch);
  ASSERT_EQ(events.size(), 4u);

  const std::vector<std::string> stored_keys = {"type",      "block_hashes", "parent_block_hash",
                                                "token_ids", "block_size",   "lora_id",
                                                "medium",    "lora_name"};
  EXPECT_EQ(Keys(events[0]), stored_keys);
  EXPECT_EQ(AsStr(Field(events[0], "type")), "BlockStored");
  EXPECT_EQ(UInts(Field(events[0], "block_hashes")), (std::vector<uint64_t>{1, ~uint64_t{0}, 300}));
  EXPECT_EQ(UInt(Field(events[0], "parent_block_hash")), uint64_t{1} << 63);
  EXPECT_EQ(UInts(Field(events[0], "token_ids")), (std::vector<uint64_t>{0, 127, 128, 70000}));
  EXPECT_EQ(UInt(Field(events[0], "block_size")), 2u);
  EXPECT_TRUE(IsNil(Field(events[0], "lora_id")));
  EXPECT_EQ(AsStr(Field(events[0], "medium")), "GPU");
  EXPECT_TRUE(IsNil(Field(events[0], "lora_name")));

  EXPECT_EQ(Keys(events[1]), (std::vector<std::string>{"type", "block_hashes", "medium"}));
  EXPECT_EQ(AsStr(Field(events[1], "type")), "BlockRemoved");
  EXPECT_EQ(UInts(Field(events[1], "block_hashes")), (std::vector<uint64_t>{5}));
  EXPECT_TRUE(IsNil(Field(events[1], "medium")));

  EXPECT_EQ(Keys(events[2]), (std::vector<std::string>{"type"}));
  EXPECT_EQ(AsStr(Field(events[2], "type")), "AllBlocksCleared");

  EXPECT_EQ(Keys(events[3]), stored_keys);
  EXPECT_TRUE(IsNil(Field(events[3], "parent_block_hash")));
  EXPECT_TRUE(UInts(Field(events[3], "token_ids")).empty());
  EXPECT_TRUE(IsNil(Field(events[3], "medium")));
}

TEST_F(KvEventsTest, SubscriberGetsEveryBatchInOrderWithContiguousSeq) {
  KvEventOptions options;
  options.endpoint = "tcp://127.0.0.1:0";
  auto publisher = StartOrDie(options);
  ASSERT_NE(publisher, nullptr);
  EXPECT_TRUE(publisher->endpoint().starts_with("tcp://127.0.0.1:"));
  EXPECT_NE(publisher->endpoint(), "tcp://127.0.0.1:0");
  EXPECT_EQ(publisher->replay_endpoint(), "");

  zmq::socket_t sub = Subscriber(publisher->endpoint());
  uint64_t expected_seq = Join(*publisher, sub) + 1;

  constexpr uint64_t kBatches = 500;
  for (uint64_t i = 0; i < kBatches; ++i) publisher->Publish("kv", Numbered(i));
  publisher->Publish("kv", {Stored({10, 11}, 9, {1, 2, 3, 4}, 2, "GPU")});

  // Probes still in flight when Join returned come first; then ours.
  uint64_t next = 0;
  sub.set(zmq::sockopt::rcvtimeo, static_cast<int>(milliseconds(kPatience).count()));
  while (next <= kBatches) {
    std::vector<zmq::message_t> frames;
    ASSERT_TRUE(zmq::recv_multipart(sub, std::back_inserter(frames))) << "timed out at " << next;
    ASSERT_EQ(frames.size(), 3u);
    EXPECT_EQ(FromBigEndian(frames[1]), expected_seq++);
    if (frames[0].to_string() == "probe") continue;
    EXPECT_EQ(frames[0].to_string(), "kv");
    if (next < kBatches) {
      EXPECT_EQ(NumberOf(frames[2]), next);
    } else {
      auto handle = msgpack::unpack(frames[2].data<char>(), frames[2].size());
      auto events = BatchEvents(handle.get());
      ASSERT_EQ(events.size(), 1u);
      EXPECT_EQ(AsStr(Field(events[0], "type")), "BlockStored");
      EXPECT_EQ(UInts(Field(events[0], "block_hashes")), (std::vector<uint64_t>{10, 11}));
      EXPECT_EQ(UInt(Field(events[0], "parent_block_hash")), 9u);
      EXPECT_EQ(UInts(Field(events[0], "token_ids")), (std::vector<uint64_t>{1, 2, 3, 4}));
      EXPECT_EQ(UInt(Field(events[0], "block_size")), 2u);
      EXPECT_EQ(AsStr(Field(events[0], "medium")), "GPU");
    }
    ++next;
  }
  const auto stats = publisher->stats();
  EXPECT_EQ(stats.batches_published, expected_seq);
  EXPECT_EQ(stats.batches_dropped, 0u);
}

// Where the endpoint names a peer, the publisher connects to it (vLLM's rule
// for an endpoint without "*").
TEST_F(KvEventsTest, ConnectsToANamedPeer) {
  zmq::socket_t sub(ctx_, zmq::socket_type::sub);
  sub.set(zmq::sockopt::linger, 0);
  sub.set(zmq::sockopt::subscribe, "");
  sub.bind("tcp://127.0.0.1:0");
  const std::string at = sub.get(zmq::sockopt::last_endpoint);

  KvEventOptions options;
  options.endpoint = at;
  auto publisher = StartOrDie(options);
  ASSERT_NE(publisher, nullptr);
  EXPECT_EQ(publisher->endpoint(), at);
  Join(*publisher, sub);
}

class ReplayTest : public KvEventsTest {
 protected:
  void SetUp() override {
    KvEventsTest::SetUp();
    KvEventOptions options;
    options.endpoint = Ipc("pub");
    options.replay_endpoint = Ipc("replay");
    options.buffer_batches = 5;
    publisher_ = StartOrDie(options);
    ASSERT_NE(publisher_, nullptr);
    EXPECT_EQ(publisher_->endpoint(), Ipc("pub"));
    EXPECT_EQ(publisher_->replay_endpoint(), Ipc("replay"));
    // No subscriber: batches are numbered and kept all the same.
    for (uint64_t i = 0; i < 8; ++i) publisher_->Publish("kv", Numbered(i));
    ASSERT_TRUE(WaitFor([&] { return publisher_->stats().batches_published == 8; }));

    dealer_ = zmq::socket_t(ctx_, zmq::socket_type::dealer);
    dealer_.set(zmq::sockopt::linger, 0);
    dealer_.set(zmq::sockopt::rcvtimeo, static_cast<int>(milliseconds(kPatience).count()));
    dealer_.connect(publisher_->replay_endpoint());
  }

  void Ask(const std::string& start_seq_bytes) {
    std::array<zmq::const_buffer, 2> request = {zmq::const_buffer(nullptr, 0),
                                                zmq::buffer(start_seq_bytes)};
    ASSERT_TRUE(zmq::send_multipart(dealer_, request));
  }

  // The answer's seq numbers, checking each batch against its number.
  std::vector<uint64_t> Answer() {
    std::vector<uint64_t> seqs;
    for (;;) {
      std::vector<zmq::message_t> frames;  // DEALER: the identity is gone
      if (!zmq::recv_multipart(dealer_, std::back_inserter(frames))) {
        ADD_FAILURE() << "no end marker";
        return seqs;
      }
      if (frames.size() != 4) {
        ADD_FAILURE() << frames.size() << " frames";
        return seqs;
      }
      EXPECT_EQ(frames[0].size(), 0u);
      if (frames[1].size() == 0) {  // the end marker: "", -1, ""
        EXPECT_EQ(frames[2].to_string(), std::string(8, '\xff'));
        EXPECT_EQ(frames[3].size(), 0u);
        return seqs;
      }
      EXPECT_EQ(frames[1].to_string(), "kv");
      const uint64_t seq = FromBigEndian(frames[2]);
      EXPECT_EQ(NumberOf(frames[3]), seq);  // batch i went out as seq i
      seqs.push_back(seq);
    }
  }

  std::unique_ptr<KvEventPublisher> publisher_;
  zmq::socket_t dealer_;
};

TEST_F(ReplayTest, ResendsFromTheGivenSeqThenTheEndMarker) {
  Ask(BigEndian(5));
  EXPECT_EQ(Answer(), (std::vector<uint64_t>{5, 6, 7}));
  EXPECT_EQ(publisher_->stats().replay_requests, 1u);
}

TEST_F(ReplayTest, KeepsTheLastBufferBatches) {
  Ask(BigEndian(0));  // 0..2 have left the buffer of 5
  EXPECT_EQ(Answer(), (std::vector<uint64_t>{3, 4, 5, 6, 7}));
  Ask(BigEndian(8));  // nothing that new
  EXPECT_EQ(Answer(), (std::vector<uint64_t>{}));
}

TEST_F(ReplayTest, IgnoresAMalformedRequestAndServesTheNext) {
  Ask("abc");
  Ask(BigEndian(7));
  EXPECT_EQ(Answer(), (std::vector<uint64_t>{7}));
  EXPECT_EQ(publisher_->stats().replay_requests, 1u);
}

// A subscriber that never reads fills its queue at the PUB socket's hwm; from
// then on the socket drops its messages, and Publish() goes on returning.
TEST_F(KvEventsTest, ASubscriberThatNeverReadsDoesNotBlockPublish) {
  KvEventOptions options;
  options.endpoint = Ipc("pub");
  options.hwm = 10;
  options.max_queue_batches = 1000;
  auto publisher = StartOrDie(options);
  ASSERT_NE(publisher, nullptr);
  zmq::socket_t sub = Subscriber(publisher->endpoint(), /*rcvhwm=*/10);
  const uint64_t probes = Join(*publisher, sub) + 1;  // seq counts sent batches

  constexpr uint64_t kBatches = 200'000;
  uint64_t returned = 0;
  for (uint64_t i = 0; i < kBatches; ++i) {
    publisher->Publish("kv", Numbered(i));
    ++returned;
  }
  EXPECT_EQ(returned, kBatches);
  // Every batch is accounted for once the thread has taken the queue.
  const uint64_t given = probes + kBatches;
  ASSERT_TRUE(WaitFor([&] {
    const auto s = publisher->stats();
    return s.batches_published + s.batches_dropped >= given;
  }));
  const auto s = publisher->stats();
  EXPECT_EQ(s.batches_published + s.batches_dropped, given);
  EXPECT_LE(s.batches_published, given);
}

TEST_F(KvEventsTest, BadEndpointsAreErrors) {
  auto start = [](std::string endpoint, std::string replay = "") {
    KvEventOptions options;
    options.endpoint = std::move(endpoint);
    options.replay_endpoint = std::move(replay);
    return KvEventPublisher::Start(options).status();
  };
  EXPECT_EQ(start("").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(start("tcp://127.0.0.1").code(), StatusCode::kInvalidArgument);  // no port
  EXPECT_EQ(start("tcp://*:notaport").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(start("nosuch://x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(start("inproc://events").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(start(Ipc("nosuchdir/pub")).code(), StatusCode::kUnavailable);
  EXPECT_EQ(start(Ipc("pub"), "tcp://127.0.0.1:x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(start(Ipc("pub"), Ipc("nosuchdir/replay")).code(), StatusCode::kUnavailable);

  // A port in use.
  KvEventOptions first;
  first.endpoint = "tcp://127.0.0.1:0";
  auto publisher = StartOrDie(first);
  ASSERT_NE(publisher, nullptr);
  const std::string port = publisher->endpoint().substr(publisher->endpoint().rfind(':') + 1);
  const Status in_use = start(Ipc("pub"), "tcp://127.0.0.1:" + port);
  EXPECT_EQ(in_use.code(), StatusCode::kUnavailable) << in_use.ToString();
}

TEST(KvEventOptionsTest, Validation) {
  EXPECT_TRUE(ValidateKvEventOptions(KvEventOptions{}).ok());
  KvEventOptions o;
  o.hwm = -1;
  EXPECT_EQ(ValidateKvEventOptions(o).code(), StatusCode::kInvalidArgument);
  o = KvEventOptions{};
  o.max_queue_batches = 0;
  EXPECT_EQ(ValidateKvEventOptions(o).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::daemon
