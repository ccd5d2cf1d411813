#include "tiers/internal/resp.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>

namespace kvtier::tiers::internal {

// ---- RedisReply --------------------------------------------------------------

RedisReply RedisReply::Text(Type type, std::string text) {
  RedisReply r;
  r.type_ = type;
  r.text_ = std::move(text);
  return r;
}

RedisReply RedisReply::Integer(int64_t value) {
  RedisReply r;
  r.type_ = Type::kInteger;
  r.integer_ = value;
  return r;
}

RedisReply RedisReply::Array(std::vector<RedisReply> elements) {
  RedisReply r;
  r.type_ = Type::kArray;
  r.elements_ = std::move(elements);
  return r;
}

RedisReply RedisReply::Landed(size_t bytes) {
  RedisReply r;
  r.type_ = Type::kString;
  r.landed_ = true;
  r.landed_bytes_ = bytes;
  return r;
}

namespace {

std::string SocketError(const char* what, int err) {
  if (err == EAGAIN || err == EWOULDBLOCK) return std::string("") + what + " timed out";
  return std::string(what) + ": " + std::strerror(err);
}

// What went wrong in a TLS read or write that returned `ret`.
std::string TlsError(const char* what, ssl_st* tls, int ret) {
  const int err = errno;
  switch (SSL_get_error(tls, ret)) {
    case SSL_ERROR_ZERO_RETURN:
      return "connection closed by the server (TLS)";
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
      return std::string(what) + " timed out (TLS)";
    case SSL_ERROR_SYSCALL:
      if (err == 0) return "connection closed by the server (TLS)";
      return SocketError(what, err) + " (TLS)";
    default: {
      char text[256];
      ERR_error_string_n(ERR_get_error(), text, sizeof(text));
      return std::string(what) + ": TLS: " + text;
    }
  }
}

// An argument up to this size is copied into the framing text; a larger
// one is sent from its own memory.
constexpr size_t kInlineArgBytes = 512;
// A tail with a filler is filled and sent in parts of this size. Sealed
// 2 MiB writes, one thread (bench/remote_vs_redis.sh SEAL=1, sealed / clear,
// two runs each): 0.74x, 0.75x sealed whole before sending; 0.83x, 0.96x in
// parts of 512 KiB; parts of 64 KiB cost more in sends than they overlap
// (0.57-0.67x).
constexpr size_t kFillPartBytes = 512 * 1024;

}  // namespace

// ---- writing -----------------------------------------------------------------

Status WriteCommands(RedisStream stream, std::span<const RedisCommand* const> commands) {
  // The pieces to send, in order: a run of the framing text or an
  // argument's own bytes. Text offsets are resolved once the text is whole
  // (it may move while it grows).
  struct Piece {
    bool text = false;
    const char* at = nullptr;  // own bytes
    size_t off = 0;            // text; a tail part: its offset in the tail
    size_t len = 0;
    TailFiller* fill = nullptr;  // a tail part to fill just before it is sent
  };
  std::string text;
  std::vector<Piece> pieces;
  auto add_text = [&](std::string_view s) {
    if (pieces.empty() || !pieces.back().text) pieces.push_back({true, nullptr, text.size(), 0});
    text.append(s);
    pieces.back().len += s.size();
  };
  auto add_bytes = [&](std::string_view s) {
    if (s.size() <= kInlineArgBytes) {
      add_text(s);
    } else {
      pieces.push_back({false, s.data(), 0, s.size()});
    }
  };
  char num[24];
  auto add_count = [&](char tag, size_t n) {
    const auto [end, ec] = std::to_chars(num, num + sizeof(num), n);
    add_text(std::string_view(&tag, 1));
    add_text(std::string_view(num, static_cast<size_t>(end - num)));
    add_text("\r\n");
  };
  for (const RedisCommand* cmd : commands) {
    add_count('*', cmd->args.size());
    for (size_t i = 0; i < cmd->args.size(); ++i) {
      const bool last = i + 1 == cmd->args.size();
      const std::string_view tail = last ? cmd->last_arg_tail : std::string_view();
      const std::string_view trailer = last ? cmd->last_arg_trailer : std::string_view();
      add_count('$', cmd->args[i].size() + tail.size() + trailer.size());
      add_bytes(cmd->args[i]);
      if (cmd->fill != nullptr && !tail.empty()) {
        // Filled part by part as the parts go out.
        for (size_t off = 0; off < tail.size(); off += kFillPartBytes) {
          const size_t len = std::min(kFillPartBytes, tail.size() - off);
          pieces.push_back({false, tail.data() + off, off, len, cmd->fill});
        }
      } else if (!tail.empty()) {
        add_bytes(tail);
      }
      // Never copied into the text: it may be written only once the tail is.
      if (!trailer.empty()) pieces.push_back({false, trailer.data(), 0, trailer.size()});
      add_text("\r\n");
    }
  }
  std::vector<iovec> iov(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    iov[i].iov_base = const_cast<char*>(p.text ? text.data() + p.off : p.at);
    iov[i].iov_len = p.len;
  }
  // Everything before a part to fill goes out first, then the part is
  // filled (while the earlier bytes travel) and joins the next send.
  size_t sent = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].fill == nullptr) continue;
    if (i > sent) KVTIER_RETURN_IF_ERROR(stream.WriteAll(iov.data() + sent, i - sent));
    sent = i;
    KVTIER_RETURN_IF_ERROR(pieces[i].fill->Fill(pieces[i].off, pieces[i].len));
  }
  return stream.WriteAll(iov.data() + sent, iov.size() - sent);
}

// ---- the stream ---------------------------------------------------------------

Result<size_t> RedisStream::ReadSome(void* buf, size_t n) const {
  if (tls != nullptr) {
    ERR_clear_error();
    const int got = SSL_read(tls, buf, static_cast<int>(std::min<size_t>(n, INT_MAX)));
    if (got > 0) return static_cast<size_t>(got);
    return UnavailableError(TlsError("read", tls, got));
  }
  for (;;) {
    const ssize_t got = ::read(fd, buf, n);
    if (got > 0) return static_cast<size_t>(got);
    if (got == 0) return UnavailableError("connection closed by the server");
    if (errno != EINTR) return UnavailableError(SocketError("read", errno));
  }
}

Status RedisStream::WriteAll(iovec* iov, size_t count) const {
  if (tls != nullptr) {
    // A record per piece: the framing text of a whole batch is one piece.
    for (size_t i = 0; i < count; ++i) {
      const auto* p = static_cast<const char*>(iov[i].iov_base);
      size_t left = iov[i].iov_len;
      while (left > 0) {
        ERR_clear_error();
        const int n = SSL_write(tls, p, static_cast<int>(std::min<size_t>(left, INT_MAX)));
        if (n <= 0) return UnavailableError(TlsError("write", tls, n));
        p += n;
        left -= static_cast<size_t>(n);
      }
    }
    return Status::Ok();
  }
  // sendmsg, not writev: MSG_NOSIGNAL (a closed peer is an error, not SIGPIPE).
  size_t first = 0;
  while (first < count) {
    msghdr msg{};
    msg.msg_iov = iov + first;
    msg.msg_iovlen = std::min<size_t>(count - first, IOV_MAX);
    const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return UnavailableError(SocketError("write", errno));
    }
    auto left = static_cast<size_t>(n);
    while (first < count && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (left > 0) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
    while (first < count && iov[first].iov_len == 0) ++first;
  }
  return Status::Ok();
}

// ---- reading -----------------------------------------------------------------

Status RespReader::Fill() {
  if (pos_ == len_) {
    pos_ = len_ = 0;
  } else if (len_ == buf_.size()) {
    if (pos_ == 0) return UnavailableError("a reply line longer than 64 KiB");
    std::memmove(buf_.data(), buf_.data() + pos_, len_ - pos_);
    len_ -= pos_;
    pos_ = 0;
  }
  KVTIER_ASSIGN_OR_RETURN(const size_t n, stream_.ReadSome(buf_.data() + len_, buf_.size() - len_));
  len_ += n;
  return Status::Ok();
}

Result<std::string_view> RespReader::Line() {
  size_t scanned = pos_;
  for (;;) {
    const char* begin = buf_.data() + scanned;
    const void* cr = std::memchr(begin, '\r', len_ - scanned);
    if (cr != nullptr) {
      const auto at = static_cast<size_t>(static_cast<const char*>(cr) - buf_.data());
      if (at + 1 < len_) {
        if (buf_[at + 1] != '\n') return UnavailableError("malformed reply (CR without LF)");
        std::string_view line(buf_.data() + pos_, at - pos_);
        pos_ = at + 2;
        return line;
      }
      scanned = at;  // the LF is not here yet
    } else {
      scanned = len_;
    }
    const size_t start = pos_;
    KVTIER_RETURN_IF_ERROR(Fill());
    scanned -= start - pos_;  // Fill may have moved the unread bytes to the front
  }
}

Result<int64_t> RespReader::Number() {
  KVTIER_ASSIGN_OR_RETURN(std::string_view line, Line());
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), v);
  if (ec != std::errc() || end != line.data() + line.size()) {
    return UnavailableError("malformed reply (bad length or integer)");
  }
  return v;
}

Status RespReader::Exact(std::span<std::byte> out, LandingSink* sink, size_t span) {
  const size_t buffered = std::min(out.size(), len_ - pos_);
  if (buffered > 0) {
    std::memcpy(out.data(), buf_.data() + pos_, buffered);
    if (sink != nullptr) sink->Part(span, out.first(buffered));
  }
  pos_ += buffered;
  // The rest straight from the socket into `out`, never through the buffer.
  size_t got = buffered;
  while (got < out.size()) {
    KVTIER_ASSIGN_OR_RETURN(const size_t n, stream_.ReadSome(out.data() + got, out.size() - got));
    if (sink != nullptr) sink->Part(span, out.subspan(got, n));
    got += n;
  }
  return Status::Ok();
}

Result<RedisReply> RespReader::Next(std::span<const std::span<std::byte>> into, LandingSink* sink) {
  return Parse(into, 0, sink);
}

Result<RedisReply> RespReader::Parse(std::span<const std::span<std::byte>> into, int depth,
                                     LandingSink* sink) {
  if (pos_ == len_) KVTIER_RETURN_IF_ERROR(Fill());
  const char tag = buf_[pos_++];
  switch (tag) {
    case '+':
    case '-': {
      KVTIER_ASSIGN_OR_RETURN(std::string_view line, Line());
      return RedisReply::Text(tag == '+' ? RedisReply::Type::kStatus : RedisReply::Type::kError,
                              std::string(line));
    }
    case ':': {
      KVTIER_ASSIGN_OR_RETURN(int64_t v, Number());
      return RedisReply::Integer(v);
    }
    case '$': {
      KVTIER_ASSIGN_OR_RETURN(int64_t n, Number());
      if (n == -1) return RedisReply();
      if (n < 0 || n > kMaxBulkBytes) return UnavailableError("malformed bulk length");
      const auto bytes = static_cast<size_t>(n);
      size_t want = 0;
      for (const std::span<std::byte>& s : into) want += s.size();
      RedisReply reply;
      if (!into.empty() && want == bytes) {
        for (size_t i = 0; i < into.size(); ++i) KVTIER_RETURN_IF_ERROR(Exact(into[i], sink, i));
        reply = RedisReply::Landed(bytes);
      } else {
        std::string text(bytes, '\0');
        KVTIER_RETURN_IF_ERROR(Exact(std::as_writable_bytes(std::span(text))));
        reply = RedisReply::Text(RedisReply::Type::kString, std::move(text));
      }
      std::byte crlf[2];
      KVTIER_RETURN_IF_ERROR(Exact(crlf));
      if (crlf[0] != std::byte{'\r'} || crlf[1] != std::byte{'\n'}) {
        return UnavailableError("malformed reply (bulk string not ended by CRLF)");
      }
      return reply;
    }
    case '*': {
      KVTIER_ASSIGN_OR_RETURN(int64_t n, Number());
      if (n == -1) return RedisReply();
      if (n < 0 || n > kMaxElements || depth >= 8) {
        return UnavailableError("malformed array reply");
      }
      std::vector<RedisReply> elements;
      elements.reserve(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        KVTIER_ASSIGN_OR_RETURN(RedisReply e, Parse({}, depth + 1, nullptr));
        elements.push_back(std::move(e));
      }
      return RedisReply::Array(std::move(elements));
    }
    default:
      return UnavailableError("malformed reply (type byte " +
                              std::to_string(static_cast<uint8_t>(tag)) + ")");
  }
}

}  // namespace kvtier::tiers::internal
