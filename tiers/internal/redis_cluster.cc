#include "tiers/internal/redis_cluster.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <utility>

#include "tiers/internal/redis_tls.h"

namespace kvtier::tiers::internal {

namespace {

using SteadyClock = std::chrono::steady_clock;

timeval ToTimeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

std::string ContextError(const redisContext* c, const Endpoint& node) {
  std::string why = c == nullptr ? "out of memory" : std::string(c->errstr);
  if (why.empty()) why = "connection lost";
  return "redis " + node.ToString() + ": " + why;
}

// One connection: the socket hiredis opened and, with TLS, its session.
struct Conn {
  redisContext* c = nullptr;
  ssl_st* tls = nullptr;

  Conn(redisContext* context, ssl_st* session) : c(context), tls(session) {}
  ~Conn() {
    TlsClient::Close(tls);  // before the socket goes
    if (c != nullptr) redisFree(c);
  }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
  RedisStream stream() const { return {c->fd, tls}; }
};

// One command and its reply on a connection of its own (connection set-up
// and CLUSTER SLOTS).
Result<RedisReply> Call(const Conn& conn, const RedisCommand& cmd) {
  const RedisCommand* one = &cmd;
  KVTIER_RETURN_IF_ERROR(WriteCommands(conn.stream(), std::span(&one, 1)));
  RespReader reader(conn.stream());
  return reader.Next();
}

// One node's connections. A node that refused a connection is left alone
// for a moment, so that a dead master costs its callers one connect timeout,
// not one each.
class NodePool {
 public:
  NodePool(Endpoint node, const RedisOptions& options, const TlsClient* tls)
      : node_(std::move(node)), opt_(options), tls_(tls) {}
  ~NodePool() {
    for (Conn* c : idle_) delete c;
  }

  const Endpoint& node() const { return node_; }

  Result<Conn*> Take() {
    std::unique_lock lock(mu_);
    const auto deadline = SteadyClock::now() + opt_.command_timeout;
    while (idle_.empty() && live_ >= opt_.connections_per_node) {
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && idle_.empty()) {
        return UnavailableError("redis " + node_.ToString() + ": every connection busy");
      }
    }
    if (!idle_.empty()) {
      Conn* c = idle_.back();
      idle_.pop_back();
      return c;
    }
    if (SteadyClock::now() < down_until_) {
      return UnavailableError("redis " + node_.ToString() + ": " + down_reason_);
    }
    ++live_;
    lock.unlock();
    Result<Conn*> c = Open();
    lock.lock();
    if (!c) {
      --live_;
      down_until_ = SteadyClock::now() + std::chrono::milliseconds(500);
      down_reason_ = c.status().message();
      cv_.notify_one();
    }
    return c;
  }

  // Returns a connection; a broken one (an I/O error or timeout left it
  // mid-reply) is closed.
  void Give(Conn* c, bool healthy) {
    std::lock_guard lock(mu_);
    if (healthy && c->c->err == 0) {
      idle_.push_back(c);
    } else {
      delete c;
      --live_;
    }
    cv_.notify_one();
  }

 private:
  Result<Conn*> Open() {
    redisContext* c =
        redisConnectWithTimeout(node_.host.c_str(), node_.port, ToTimeval(opt_.connect_timeout));
    if (c == nullptr || c->err != 0) {
      Status s = UnavailableError(ContextError(c, node_));
      if (c != nullptr) redisFree(c);
      return s;
    }
    // The handshake is bounded by the connect timeout, the commands after
    // it by the command timeout.
    redisSetTimeout(c, ToTimeval(opt_.connect_timeout));
    redisEnableKeepAlive(c);
    ssl_st* session = nullptr;
    if (tls_ != nullptr) {
      Result<ssl_st*> shaken = tls_->Connect(c->fd, node_.host);
      if (!shaken) {
        redisFree(c);
        return UnavailableError("redis " + node_.ToString() + ": " +
                                std::string(shaken.status().message()));
      }
      session = *shaken;
    }
    redisSetTimeout(c, ToTimeval(opt_.command_timeout));
    auto conn = std::make_unique<Conn>(c, session);
    if (!opt_.password.empty() || !opt_.username.empty()) {
      // AUTH <user> <password> (an ACL user), or AUTH <password>
      // (requirepass: the user "default").
      RedisCommand auth{{"AUTH", opt_.password}, 0};
      if (!opt_.username.empty()) auth = {{"AUTH", opt_.username, opt_.password}, 0};
      Result<RedisReply> r = Call(*conn, auth);
      if (!r || r->type() == RedisReply::Type::kError) {
        return UnavailableError(
            "redis " + node_.ToString() + ": AUTH" +
            (opt_.username.empty() ? std::string() : " as " + opt_.username) +
            " failed: " + (r ? std::string(r->str()) : std::string(r.status().message())));
      }
    }
    return conn.release();
  }

  const Endpoint node_;
  const RedisOptions& opt_;
  const TlsClient* const tls_;  // null: no TLS
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Conn*> idle_;
  int live_ = 0;
  SteadyClock::time_point down_until_{};
  std::string down_reason_;
};

// CLUSTER SLOTS' answer: [[first, last, [host, port, id...], [replica]...]...].
Result<std::vector<SlotRange>> ParseSlots(const RedisReply& reply, const Endpoint& asked) {
  if (reply.type() != RedisReply::Type::kArray) {
    return InvalidArgumentError("CLUSTER SLOTS: not an array");
  }
  using Type = RedisReply::Type;
  auto endpoint = [&](const RedisReply& e) -> Result<Endpoint> {
    if (e.type() != Type::kArray || e.elements() < 2 || e.element(0).type() != Type::kString ||
        e.element(1).type() != Type::kInteger || e.element(1).integer() <= 0 ||
        e.element(1).integer() > 65535) {
      return InvalidArgumentError("CLUSTER SLOTS: a malformed node");
    }
    Endpoint ep;
    ep.host.assign(e.element(0).str());
    // An empty or "?" host: the node we asked knows no better name for it.
    if (ep.host.empty() || ep.host == "?") ep.host = asked.host;
    ep.port = static_cast<uint16_t>(e.element(1).integer());
    return ep;
  };
  std::vector<SlotRange> ranges;
  for (size_t i = 0; i < reply.elements(); ++i) {
    const RedisReply& r = reply.element(i);
    if (r.type() != Type::kArray || r.elements() < 3 || r.element(0).type() != Type::kInteger ||
        r.element(1).type() != Type::kInteger || r.element(0).integer() < 0 ||
        r.element(1).integer() >= kClusterSlots ||
        r.element(0).integer() > r.element(1).integer()) {
      return InvalidArgumentError("CLUSTER SLOTS: a malformed range");
    }
    SlotRange range;
    range.first = static_cast<uint16_t>(r.element(0).integer());
    range.last = static_cast<uint16_t>(r.element(1).integer());
    KVTIER_ASSIGN_OR_RETURN(range.master, endpoint(r.element(2)));
    for (size_t k = 3; k < r.elements(); ++k) {
      KVTIER_ASSIGN_OR_RETURN(Endpoint replica, endpoint(r.element(k)));
      range.replicas.push_back(std::move(replica));
    }
    ranges.push_back(std::move(range));
  }
  return ranges;
}

}  // namespace

class RedisCluster::Impl {
 public:
  Impl(RedisOptions options, std::unique_ptr<TlsClient> tls)
      : opt_(std::move(options)), tls_(std::move(tls)) {}

  Status Refresh() {
    std::lock_guard refresh_lock(refresh_mu_);
    std::vector<Endpoint> candidates;
    {
      std::shared_lock lock(map_mu_);
      for (size_t i = 0; i < map_.nodes(); ++i)
        candidates.push_back(map_.node(static_cast<uint32_t>(i)));
    }
    for (const Endpoint& s : opt_.seeds) {
      if (std::find(candidates.begin(), candidates.end(), s) == candidates.end()) {
        candidates.push_back(s);
      }
    }
    Status last = UnavailableError("no redis node to ask");
    for (const Endpoint& node : candidates) {
      Result<std::vector<SlotRange>> ranges = ReadSlots(node);
      if (!ranges) {
        last = ranges.status();
        continue;
      }
      std::unique_lock lock(map_mu_);
      SlotMap fresh;
      KVTIER_RETURN_IF_ERROR(fresh.Reset(*ranges));
      if (fresh.covered() == 0) {
        last = UnavailableError("redis " + node.ToString() + ": no slot is served");
        continue;
      }
      map_ = fresh;
      stale_.store(false);
      return Status::Ok();
    }
    return last;
  }

  std::vector<Result<RedisReply>> Run(std::span<const RedisCommand> commands,
                                      const RedisCluster::ReplyFn* each = nullptr) {
    std::vector<Result<RedisReply>> results;
    results.reserve(commands.size());
    for (size_t i = 0; i < commands.size(); ++i) {
      results.emplace_back(UnavailableError("redis: not sent"));
    }
    if (stale_.load()) Refresh().IgnoreError();  // the old map may still serve
    std::vector<Send> todo;
    {
      std::shared_lock lock(map_mu_);
      for (size_t i = 0; i < commands.size(); ++i) {
        const uint16_t slot = KeySlot(commands[i].args[commands[i].key_arg]);
        const uint32_t node = map_.NodeOf(slot);
        if (node == SlotMap::kNoNode) {
          results[i] = UnavailableError("redis: slot " + std::to_string(slot) + " is not served");
          stale_.store(true);
          continue;
        }
        todo.push_back({i, map_.node(node), false, 0});
      }
    }
    std::vector<bool> delivered(each != nullptr ? commands.size() : 0, false);
    while (!todo.empty()) todo = Round(commands, todo, results, each, delivered);
    if (each != nullptr) {
      for (size_t i = 0; i < commands.size(); ++i) {
        if (!delivered[i]) (*each)(i, std::move(results[i]));
      }
    }
    return results;
  }

  bool cluster_mode() const {
    std::shared_lock lock(map_mu_);
    return cluster_;
  }

  std::vector<std::string> masters() const {
    std::shared_lock lock(map_mu_);
    std::vector<std::string> out;
    std::vector<bool> serving(map_.nodes(), false);
    for (uint32_t s = 0; s < kClusterSlots; ++s) {
      const uint32_t n = map_.NodeOf(static_cast<uint16_t>(s));
      if (n != SlotMap::kNoNode) serving[n] = true;
    }
    for (size_t i = 0; i < map_.nodes(); ++i) {
      if (serving[i]) out.push_back(map_.node(static_cast<uint32_t>(i)).ToString());
    }
    return out;
  }

 private:
  // A command on its way: where it goes, and whether ASKING precedes it.
  struct Send {
    size_t index = 0;
    Endpoint to;
    bool asking = false;
    int redirects = 0;
  };

  NodePool& Pool(const Endpoint& node) {
    std::lock_guard lock(pools_mu_);
    auto& pool = pools_[node.ToString()];
    if (!pool) pool = std::make_unique<NodePool>(node, opt_, tls_.get());
    return *pool;
  }

  Result<std::vector<SlotRange>> ReadSlots(const Endpoint& node) {
    NodePool& pool = Pool(node);
    KVTIER_ASSIGN_OR_RETURN(Conn * c, pool.Take());
    Result<RedisReply> got = Call(*c, {{"CLUSTER", "SLOTS"}, 0});
    pool.Give(c, got.ok());
    if (!got)
      return UnavailableError("redis " + node.ToString() + ": " +
                              std::string(got.status().message()));
    const RedisReply& reply = *got;
    if (reply.type() == RedisReply::Type::kError) {
      if (reply.str().find("cluster support disabled") != std::string_view::npos) {
        std::unique_lock lock(map_mu_);
        cluster_ = false;
        return std::vector<SlotRange>{{0, kClusterSlots - 1, node, {}}};
      }
      return UnavailableError("redis " + node.ToString() + ": " + std::string(reply.str()));
    }
    {
      std::unique_lock lock(map_mu_);
      cluster_ = true;
    }
    return ParseSlots(reply, node);
  }

  // Sends one round: every command to its node, pipelined per node, all
  // nodes written before any is read. Returns the redirected commands.
  std::vector<Send> Round(std::span<const RedisCommand> commands, const std::vector<Send>& todo,
                          std::vector<Result<RedisReply>>& results,
                          const RedisCluster::ReplyFn* each, std::vector<bool>& delivered) {
    std::map<std::string, std::vector<Send>> by_node;
    for (const Send& s : todo) by_node[s.to.ToString()].push_back(s);
    struct Batch {
      NodePool* pool = nullptr;
      Conn* c = nullptr;
      std::vector<Send> sends;
      Status written;
    };
    std::vector<Batch> batches;
    for (auto& [name, sends] : by_node) {
      NodePool& pool = Pool(sends.front().to);
      Result<Conn*> c = pool.Take();
      if (!c) {
        for (const Send& s : sends) results[s.index] = c.status();
        stale_.store(true);
        continue;
      }
      static const RedisCommand kAsking{{"ASKING"}, 0};
      std::vector<const RedisCommand*> frames;
      for (const Send& s : sends) {
        if (s.asking) frames.push_back(&kAsking);
        frames.push_back(&commands[s.index]);
      }
      Batch b{&pool, *c, std::move(sends), WriteCommands((*c)->stream(), frames)};
      batches.push_back(std::move(b));
    }
    std::vector<Send> next;
    for (Batch& b : batches) {
      Status healthy = b.written;
      RespReader reader(b.c->stream());
      for (const Send& s : b.sends) {
        if (healthy.ok() && s.asking) healthy = reader.Next().status();
        Result<RedisReply> got =
            healthy.ok() ? reader.Next(commands[s.index].reply_into, commands[s.index].sink)
                         : Result<RedisReply>(healthy);
        if (!got) {
          if (healthy.ok()) healthy = got.status();
          stale_.store(true);
          results[s.index] =
              UnavailableError("redis " + s.to.ToString() + ": " + std::string(healthy.message()));
          continue;
        }
        RedisReply& reply = *got;
        if (reply.type() == RedisReply::Type::kError) {
          const std::string_view text = reply.str();
          if (std::optional<Redirect> r = ParseRedirect(text, s.to)) {
            if (s.redirects >= opt_.max_redirects) {
              results[s.index] =
                  UnavailableError("redis: more than " + std::to_string(opt_.max_redirects) +
                                   " redirections for one command");
              continue;
            }
            if (r->kind == Redirect::Kind::kMoved) {
              std::unique_lock lock(map_mu_);
              map_.Move(r->slot, r->to);
            }
            next.push_back({s.index, r->to, r->kind == Redirect::Kind::kAsk, s.redirects + 1});
            continue;
          }
          if (text.starts_with("CLUSTERDOWN")) stale_.store(true);
        }
        if (each != nullptr) {
          delivered[s.index] = true;
          (*each)(s.index, std::move(reply));
          continue;
        }
        results[s.index] = std::move(reply);
      }
      b.pool->Give(b.c, healthy.ok() && reader.drained());
    }
    return next;
  }

  const RedisOptions opt_;
  const std::unique_ptr<TlsClient> tls_;  // null: no TLS
  mutable std::shared_mutex map_mu_;
  SlotMap map_;          // guarded by map_mu_
  bool cluster_ = true;  // guarded by map_mu_
  std::atomic<bool> stale_{false};
  std::mutex refresh_mu_;
  std::mutex pools_mu_;
  std::unordered_map<std::string, std::unique_ptr<NodePool>> pools_;  // guarded by pools_mu_
};

Result<std::unique_ptr<RedisCluster>> RedisCluster::Connect(const RedisOptions& options) {
  if (options.seeds.empty()) return InvalidArgumentError("redis: no seed node given");
  if (options.connections_per_node < 1) {
    return InvalidArgumentError("redis: connections_per_node must be at least 1");
  }
  std::unique_ptr<TlsClient> tls;
  if (options.tls.enabled) {
    KVTIER_ASSIGN_OR_RETURN(tls, TlsClient::Create(options.tls));
  }
  auto impl = std::make_unique<Impl>(options, std::move(tls));
  KVTIER_RETURN_IF_ERROR(impl->Refresh());
  return std::unique_ptr<RedisCluster>(new RedisCluster(std::move(impl)));
}

RedisCluster::RedisCluster(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RedisCluster::~RedisCluster() = default;

std::vector<Result<RedisReply>> RedisCluster::Run(std::span<const RedisCommand> commands) {
  return impl_->Run(commands);
}
void RedisCluster::RunEach(std::span<const RedisCommand> commands, const ReplyFn& each) {
  impl_->Run(commands, &each);
}
Status RedisCluster::Refresh() { return impl_->Refresh(); }
bool RedisCluster::cluster_mode() const { return impl_->cluster_mode(); }
std::vector<std::string> RedisCluster::masters() const { return impl_->masters(); }

}  // namespace kvtier::tiers::internal
