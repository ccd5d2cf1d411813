// The Redis protocol (RESP2) on a connected socket, for the remote tier's
// data path: commands framed and written with one sendmsg per batch, the
// arguments' bytes sent from where they lie (a block's payload is never
// copied into an output buffer), and replies parsed from the socket, a
// value's bytes read straight into the memory its command names (a host
// slot), never into a reply object first.
//
// hiredis opens the connections (connect timeout, keep-alive, socket
// timeouts); its own writer and reader copy a value two or three times
// (argument formatting, output buffer, reader buffer, reply object), which
// cost the tier a fifth of raw Redis' bandwidth (bench/bench_remote.cc).
//
// Errors: a socket that fails, closes or times out (the socket's own
// SO_RCVTIMEO / SO_SNDTIMEO) and a reply that is not RESP are Unavailable;
// the connection is then unusable (part of a reply may be unread).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

struct ssl_st;  // OpenSSL's SSL

namespace kvtier::tiers::internal {

// The byte stream of one connection: the socket itself, or a TLS session on
// it (redis_tls.h). Not owning either. The socket's timeouts (SO_RCVTIMEO,
// SO_SNDTIMEO) bound every call, through TLS too.
struct RedisStream {
  int fd = -1;
  ssl_st* tls = nullptr;

  // Some bytes into `buf` (at least one): Unavailable when the connection
  // fails, closes or times out.
  Result<size_t> ReadSome(void* buf, size_t n) const;
  // All of `iov`'s bytes, in order (the iovecs are consumed).
  Status WriteAll(iovec* iov, size_t count) const;
};

// One reply, owned.
class RedisReply {
 public:
  enum class Type : uint8_t { kNil, kString, kInteger, kStatus, kError, kArray };

  RedisReply() = default;
  static RedisReply Text(Type type, std::string text);
  static RedisReply Integer(int64_t value);
  static RedisReply Array(std::vector<RedisReply> elements);
  // A bulk string read into its command's `reply_into`: its bytes are there.
  static RedisReply Landed(size_t bytes);

  Type type() const { return type_; }
  // kString, kStatus, kError: the bytes (empty for a landed string).
  std::string_view str() const { return text_; }
  // kInteger: the value; otherwise 0.
  int64_t integer() const { return integer_; }
  // kArray: the elements.
  size_t elements() const { return elements_.size(); }
  const RedisReply& element(size_t i) const { return elements_[i]; }
  // kString whose bytes went to the command's `reply_into`.
  bool landed() const { return landed_; }
  // kString: its length (landed or not).
  size_t size() const { return landed_ ? landed_bytes_ : text_.size(); }

 private:
  Type type_ = Type::kNil;
  bool landed_ = false;
  int64_t integer_ = 0;
  size_t landed_bytes_ = 0;
  std::string text_;
  std::vector<RedisReply> elements_;
};

// Sees a landed bulk string's bytes as they arrive from the socket
// (RedisCommand::sink), before the reply is whole: Part is called for each
// piece read into the command's `reply_into` spans, in order, with the
// index of the span it belongs to. A caller can then work on each piece
// while the next is still on the wire (the remote tier decrypts a sealed
// value so). Not called for a reply that does not land.
class LandingSink {
 public:
  virtual ~LandingSink() = default;
  virtual void Part(size_t span, std::span<std::byte> bytes) = 0;
};

// Fills a command's tail just before its bytes are sent (RedisCommand::
// fill): Fill(offset, len) is called for each part of the tail in order, so
// a caller can make each part (encrypt it) while the earlier ones travel.
// A failure stops the write (the connection is then unusable).
class TailFiller {
 public:
  virtual ~TailFiller() = default;
  virtual Status Fill(size_t offset, size_t len) = 0;
};

// One command: its arguments, viewed (they must outlive the call), and
// which of them is the key that routes it (index 1 for GET/SET/EXISTS/DEL).
struct RedisCommand {
  std::vector<std::string_view> args;
  size_t key_arg = 1;
  // Bytes the last argument goes on with, sent from here: SET's value as a
  // header (the last of `args`) and a payload (this).
  std::string_view last_arg_tail = {};
  // Fills `last_arg_tail` part by part as it is sent; null: it is whole.
  TailFiller* fill = nullptr;
  // Bytes the last argument ends with, after the tail, sent from here and
  // read only once the tail is filled (a sealed value's tag).
  std::string_view last_arg_trailer = {};
  // Where a bulk-string reply of exactly their total size goes, in order
  // (a value's header, then its payload): read there from the socket, the
  // reply then landed(). A string of any other size is an ordinary reply.
  std::span<const std::span<std::byte>> reply_into = {};
  // Sees the landed bytes as they arrive; null: none.
  LandingSink* sink = nullptr;
};

// Writes `commands` to `stream` in RESP, all of them, in as few sendmsg
// calls as the iovec limit allows (through TLS: a record per piece). Small
// arguments are framed into one text buffer; large ones are sent from their
// own memory.
Status WriteCommands(RedisStream stream, std::span<const RedisCommand* const> commands);

// Reads replies from one connection, in order. Holds what it read past a
// reply for the next one; drained() says whether nothing is left over (a
// connection handed back to its pool must be drained).
class RespReader {
 public:
  explicit RespReader(RedisStream stream) : stream_(stream), buf_(kBufferBytes) {}

  // The next reply; a bulk string of exactly the total size of `into` is
  // read into it and returned landed().
  // `sink`, when given, sees the landed bytes as they arrive.
  Result<RedisReply> Next(std::span<const std::span<std::byte>> into = {},
                          LandingSink* sink = nullptr);
  bool drained() const { return pos_ == len_; }

 private:
  static constexpr size_t kBufferBytes = 64 * 1024;
  // Longest bulk string or array accepted: Redis' own default limit.
  static constexpr int64_t kMaxBulkBytes = 512LL << 20;
  static constexpr int64_t kMaxElements = 1LL << 24;

  Result<RedisReply> Parse(std::span<const std::span<std::byte>> into, int depth,
                           LandingSink* sink);
  Result<std::string_view> Line();
  Result<int64_t> Number();
  // Reads exactly out.size() bytes; `sink` sees each piece as span `span`.
  Status Exact(std::span<std::byte> out, LandingSink* sink = nullptr, size_t span = 0);
  Status Fill();

  RedisStream stream_;
  std::vector<char> buf_;
  size_t pos_ = 0, len_ = 0;
};

}  // namespace kvtier::tiers::internal
