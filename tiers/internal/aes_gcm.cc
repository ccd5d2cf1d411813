#include "tiers/internal/aes_gcm.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cassert>
#include <climits>
#include <cstring>

#if KVTIER_HAS_IPSEC_MB
#include <intel-ipsec-mb.h>
#endif

namespace kvtier::tiers::internal {
namespace {

struct CipherCtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree>;

#if KVTIER_HAS_IPSEC_MB
// ipsec-mb's function table for this CPU, made once; nullptr where the CPU
// lacks VAES and VPCLMULQDQ (OpenSSL is then as fast or faster). The direct
// GCM functions take no manager: the table is only read.
const IMB_MGR* IpsecManager() {
  static const IMB_MGR* const mgr = []() -> const IMB_MGR* {
    IMB_MGR* m = alloc_mb_mgr(0);
    if (m == nullptr) return nullptr;
    IMB_ARCH arch = IMB_ARCH_NONE;
    init_mb_mgr_auto(m, &arch);
    constexpr uint64_t kNeeds = IMB_FEATURE_VAES | IMB_FEATURE_VPCLMULQDQ;
    if (arch != IMB_ARCH_AVX512 || (m->features & kNeeds) != kNeeds) {
      free_mb_mgr(m);
      return nullptr;
    }
    return m;  // kept for the process's life
  }();
  return mgr;
}
#endif

}  // namespace

std::vector<GcmEngine> AvailableGcmEngines() {
  std::vector<GcmEngine> out;
#if KVTIER_HAS_IPSEC_MB
  if (IpsecManager() != nullptr) out.push_back(GcmEngine::kIpsecMb);
#endif
  out.push_back(GcmEngine::kOpenSsl);
  return out;
}

std::string_view GcmEngineName(GcmEngine engine) {
  switch (engine) {
    case GcmEngine::kOpenSsl:
      return "OpenSSL";
    case GcmEngine::kIpsecMb:
      return "Intel ipsec-mb (AVX-512 VAES)";
  }
  return "?";
}

// ---- GcmKey ------------------------------------------------------------------------

struct GcmKey::Ipsec {
#if KVTIER_HAS_IPSEC_MB
  gcm_key_data data;  // 64-byte aligned by its declaration
#endif
};

GcmKey::GcmKey(GcmEngine engine) : engine_(engine) {}

std::shared_ptr<const GcmKey> GcmKey::Make(GcmEngine engine,
                                           std::span<const std::byte, kGcmKeyBytes> key) {
  std::shared_ptr<GcmKey> out(new GcmKey(engine));
  if (engine == GcmEngine::kIpsecMb) {
#if KVTIER_HAS_IPSEC_MB
    assert(IpsecManager() != nullptr);
    out->ipsec_ = std::make_unique<Ipsec>();
    IMB_AES256_GCM_PRE(IpsecManager(), key.data(), &out->ipsec_->data);
#else
    assert(false && "GcmKey::Make: ipsec-mb is not in this build");
#endif
  } else {
    std::memcpy(out->raw_, key.data(), kGcmKeyBytes);
  }
  return out;
}

GcmKey::~GcmKey() {
  OPENSSL_cleanse(raw_, sizeof(raw_));
  if (ipsec_) OPENSSL_cleanse(ipsec_.get(), sizeof(Ipsec));
}

// ---- GcmStream ---------------------------------------------------------------------

struct GcmStream::State {
  std::shared_ptr<const GcmKey> key;
  bool encrypt = false;
  CipherCtx evp;
#if KVTIER_HAS_IPSEC_MB
  gcm_context_data ipsec{};
#endif
};

GcmStream::GcmStream(std::unique_ptr<State> state) : s_(std::move(state)) {}

GcmStream::~GcmStream() {
#if KVTIER_HAS_IPSEC_MB
  // The context holds the last partial block's key stream.
  if (s_) OPENSSL_cleanse(&s_->ipsec, sizeof(s_->ipsec));
#endif
}

std::unique_ptr<GcmStream> GcmStream::Start(std::shared_ptr<const GcmKey> key, bool encrypt,
                                            std::span<const std::byte, kGcmNonceBytes> nonce,
                                            std::span<const std::byte> associated) {
  auto s = std::make_unique<State>();
  s->encrypt = encrypt;
  const auto* iv = reinterpret_cast<const unsigned char*>(nonce.data());
  const auto* ad = reinterpret_cast<const unsigned char*>(associated.data());
  if (key->engine() == GcmEngine::kIpsecMb) {
#if KVTIER_HAS_IPSEC_MB
    IMB_AES256_GCM_INIT_VAR_IV(IpsecManager(), &key->ipsec_->data, &s->ipsec, iv, kGcmNonceBytes,
                               ad, associated.size());
#endif
  } else {
    s->evp.reset(EVP_CIPHER_CTX_new());
    if (!s->evp || associated.size() > INT_MAX) return nullptr;
    const auto* k = reinterpret_cast<const unsigned char*>(key->raw_);
    auto init = encrypt ? EVP_EncryptInit_ex : EVP_DecryptInit_ex;
    auto update = encrypt ? EVP_EncryptUpdate : EVP_DecryptUpdate;
    int len = 0;
    if (init(s->evp.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) != 1 ||
        EVP_CIPHER_CTX_ctrl(s->evp.get(), EVP_CTRL_GCM_SET_IVLEN, kGcmNonceBytes, nullptr) != 1 ||
        init(s->evp.get(), nullptr, nullptr, k, iv) != 1 ||
        update(s->evp.get(), nullptr, &len, ad, static_cast<int>(associated.size())) != 1) {
      return nullptr;
    }
  }
  s->key = std::move(key);
  return std::unique_ptr<GcmStream>(new GcmStream(std::move(s)));
}

bool GcmStream::Update(const std::byte* in, std::byte* out, size_t n) {
  const auto* src = reinterpret_cast<const unsigned char*>(in);
  auto* dst = reinterpret_cast<unsigned char*>(out);
  if (s_->key->engine() == GcmEngine::kIpsecMb) {
#if KVTIER_HAS_IPSEC_MB
    const gcm_key_data* k = &s_->key->ipsec_->data;
    if (s_->encrypt) {
      IMB_AES256_GCM_ENC_UPDATE(IpsecManager(), k, &s_->ipsec, dst, src, n);
    } else {
      IMB_AES256_GCM_DEC_UPDATE(IpsecManager(), k, &s_->ipsec, dst, src, n);
    }
    return true;
#endif
  }
  // EVP's update takes an int length: larger spans go in pieces.
  constexpr size_t kPiece = size_t{1} << 30;
  auto update = s_->encrypt ? EVP_EncryptUpdate : EVP_DecryptUpdate;
  for (size_t at = 0; at < n; at += kPiece) {
    const int piece = static_cast<int>(std::min(kPiece, n - at));
    int got = 0;
    if (update(s_->evp.get(), dst + at, &got, src + at, piece) != 1 || got != piece) return false;
  }
  return true;
}

bool GcmStream::Tag(std::span<std::byte, kGcmTagBytes> tag) {
  auto* t = reinterpret_cast<unsigned char*>(tag.data());
  if (s_->key->engine() == GcmEngine::kIpsecMb) {
#if KVTIER_HAS_IPSEC_MB
    IMB_AES256_GCM_ENC_FINALIZE(IpsecManager(), &s_->key->ipsec_->data, &s_->ipsec, t,
                                kGcmTagBytes);
    return true;
#endif
  }
  int len = 0;
  unsigned char tail[16];
  return EVP_EncryptFinal_ex(s_->evp.get(), tail, &len) == 1 &&
         EVP_CIPHER_CTX_ctrl(s_->evp.get(), EVP_CTRL_GCM_GET_TAG, kGcmTagBytes, t) == 1;
}

bool GcmStream::Verify(std::span<const std::byte, kGcmTagBytes> expected) {
  if (s_->key->engine() == GcmEngine::kIpsecMb) {
#if KVTIER_HAS_IPSEC_MB
    unsigned char computed[kGcmTagBytes];
    IMB_AES256_GCM_DEC_FINALIZE(IpsecManager(), &s_->key->ipsec_->data, &s_->ipsec, computed,
                                kGcmTagBytes);
    return CRYPTO_memcmp(computed, expected.data(), kGcmTagBytes) == 0;
#endif
  }
  int len = 0;
  unsigned char tail[16];
  return EVP_CIPHER_CTX_ctrl(s_->evp.get(), EVP_CTRL_GCM_SET_TAG, kGcmTagBytes,
                             const_cast<std::byte*>(expected.data())) == 1 &&
         EVP_DecryptFinal_ex(s_->evp.get(), tail, &len) == 1;
}

}  // namespace kvtier::tiers::internal
