// TLS for the remote tier's connections (OpenSSL; hiredis 0.14, Debian 12's,
// has none): one client context per cluster, a session per connection,
// opened on the socket hiredis connected and then read and written through
// RedisStream (resp.h).
//
// Verification is on unless the options turn it off: each node's
// certificate must chain to the configured CA (or the system's store) and
// name the host the slot map gives for it, as a DNS name or an IP address
// (or RemoteTls::server_name when set), so that redirections to other nodes
// are checked as carefully as the seeds. TLS 1.2 at least.
//
// OpenSSL writes with write(2), not send(MSG_NOSIGNAL): a node that closes
// its end under a write raises SIGPIPE, which the process must ignore (as
// kvtierd does at start) to see it as the error it is.
//
// Thread-safety: a TlsClient is immutable once made; Connect may be called
// from any thread.
#pragma once

#include <memory>
#include <string>

#include "common/result.h"
#include "tiers/remote_tier.h"

struct ssl_st;
struct ssl_ctx_st;

namespace kvtier::tiers::internal {

class TlsClient {
 public:
  // InvalidArgument, naming the file and OpenSSL's reason, for a CA,
  // certificate or key file that cannot be loaded (or a key that does not
  // match its certificate).
  static Result<std::unique_ptr<TlsClient>> Create(const tiers::RemoteTls& options);
  ~TlsClient();
  TlsClient(const TlsClient&) = delete;
  TlsClient& operator=(const TlsClient&) = delete;

  // The TLS handshake on the connected socket `fd` (blocking, bounded by
  // its SO_RCVTIMEO/SO_SNDTIMEO) with the node `host` (name or address).
  // Unavailable, saying why (the verification error, if that was it),
  // when it fails. The session is the caller's: Close it before the socket.
  Result<ssl_st*> Connect(int fd, const std::string& host) const;
  static void Close(ssl_st* tls);

 private:
  TlsClient(ssl_ctx_st* ctx, tiers::RemoteTls options);
  ssl_ctx_st* ctx_;
  const tiers::RemoteTls opt_;
};

}  // namespace kvtier::tiers::internal
