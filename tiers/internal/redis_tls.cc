#include "tiers/internal/redis_tls.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <utility>

namespace kvtier::tiers::internal {
namespace {

// OpenSSL's reason for the last failure (its error queue's first entry).
std::string OpenSslReason() {
  const unsigned long e = ERR_get_error();
  if (e == 0) return "unknown error";
  char text[256];
  ERR_error_string_n(e, text, sizeof(text));
  return text;
}

bool IsAddress(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

}  // namespace

Result<std::unique_ptr<TlsClient>> TlsClient::Create(const tiers::RemoteTls& options) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) return InternalError("TLS: no client context: " + OpenSslReason());
  auto fail = [ctx](const std::string& what) -> Status {
    Status s = InvalidArgumentError("remote tls: " + what + ": " + OpenSslReason());
    SSL_CTX_free(ctx);
    return s;
  };
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_AUTO_RETRY);
  if (options.verify) {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    if (!options.ca_file.empty()) {
      if (SSL_CTX_load_verify_locations(ctx, options.ca_file.c_str(), nullptr) != 1) {
        return fail("CA file " + options.ca_file + " cannot be loaded");
      }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
      return fail("the system's CA store cannot be loaded");
    }
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  }
  if (options.cert_file.empty() != options.key_file.empty()) {
    SSL_CTX_free(ctx);
    return InvalidArgumentError("remote tls: a certificate and its key go together");
  }
  if (!options.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, options.cert_file.c_str()) != 1) {
      return fail("certificate file " + options.cert_file + " cannot be loaded");
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, options.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      return fail("key file " + options.key_file + " cannot be loaded");
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
      return fail("key file " + options.key_file + " does not match " + options.cert_file);
    }
  }
  return std::unique_ptr<TlsClient>(new TlsClient(ctx, options));
}

TlsClient::TlsClient(ssl_ctx_st* ctx, tiers::RemoteTls options)
    : ctx_(ctx), opt_(std::move(options)) {}

TlsClient::~TlsClient() { SSL_CTX_free(ctx_); }

Result<ssl_st*> TlsClient::Connect(int fd, const std::string& host) const {
  ERR_clear_error();
  SSL* tls = SSL_new(ctx_);
  if (tls == nullptr) return UnavailableError("TLS: no session: " + OpenSslReason());
  auto fail = [tls](const std::string& why) -> Status {
    SSL_free(tls);
    return UnavailableError(why);
  };
  const std::string& name = opt_.server_name.empty() ? host : opt_.server_name;
  const bool address = IsAddress(name);
  // SNI only for a name (RFC 6066 forbids addresses there).
  // (SSL_set_tlsext_host_name is a macro with a C cast.)
  if (!address) {
    SSL_ctrl(tls, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
             const_cast<char*>(name.c_str()));
  }
  if (opt_.verify) {
    X509_VERIFY_PARAM* param = SSL_get0_param(tls);
    const int set = address ? X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str())
                            : X509_VERIFY_PARAM_set1_host(param, name.c_str(), 0);
    if (set != 1) return fail("TLS: cannot check the certificate's name against " + name);
  }
  if (SSL_set_fd(tls, fd) != 1) return fail("TLS: " + OpenSslReason());
  if (const int r = SSL_connect(tls); r != 1) {
    const long verified = SSL_get_verify_result(tls);
    if (opt_.verify && verified != X509_V_OK) {
      return fail(
          std::string("TLS handshake: the certificate of ") + host +
          " is refused: " + X509_verify_cert_error_string(verified) +
          (verified == X509_V_ERR_HOSTNAME_MISMATCH || verified == X509_V_ERR_IP_ADDRESS_MISMATCH
               ? " (it does not name " + name + ")"
               : ""));
    }
    const int err = SSL_get_error(tls, r);
    std::string why = err == SSL_ERROR_SYSCALL || err == SSL_ERROR_ZERO_RETURN
                          ? "the connection closed (is it a TLS port?)"
                      : err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE ? "timed out"
                                                                                  : OpenSslReason();
    return fail("TLS handshake with " + host + ": " + why);
  }
  return tls;
}

void TlsClient::Close(ssl_st* tls) {
  if (tls == nullptr) return;
  // No close_notify exchange: the connection goes either way, and a node
  // that stopped answering must not hold the caller.
  SSL_free(tls);
}

}  // namespace kvtier::tiers::internal
