#include "tiers/internal/cluster_slots.h"

#include <charconv>

namespace kvtier::tiers::internal {
namespace {

constexpr std::array<uint16_t, 256> MakeCrcTable() {
  std::array<uint16_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i << 8;
    for (int b = 0; b < 8; ++b) crc = (crc & 0x8000u) ? (crc << 1) ^ 0x1021u : crc << 1;
    t[i] = static_cast<uint16_t>(crc);
  }
  return t;
}
constexpr std::array<uint16_t, 256> kCrcTable = MakeCrcTable();

template <typename T>
bool ParseNumber(std::string_view text, T* out) {
  if (text.empty()) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

uint16_t Crc16(std::string_view bytes) {
  uint16_t crc = 0;
  for (char c : bytes) {
    const auto i = static_cast<uint8_t>((crc >> 8) ^ static_cast<uint8_t>(c));
    crc = static_cast<uint16_t>((crc << 8) ^ kCrcTable[i]);
  }
  return crc;
}

uint16_t KeySlot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return static_cast<uint16_t>(Crc16(key) % kClusterSlots);
}

std::string Endpoint::ToString() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Result<Endpoint> ParseEndpoint(std::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) {
    return InvalidArgumentError("'" + std::string(text) + "' is not host:port");
  }
  std::string_view host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  Endpoint e;
  if (host.empty() || !ParseNumber(text.substr(colon + 1), &e.port) || e.port == 0) {
    return InvalidArgumentError("'" + std::string(text) + "' is not host:port");
  }
  e.host = std::string(host);
  return e;
}

std::optional<Redirect> ParseRedirect(std::string_view error, const Endpoint& from) {
  Redirect r;
  if (error.starts_with("MOVED ")) {
    r.kind = Redirect::Kind::kMoved;
    error.remove_prefix(6);
  } else if (error.starts_with("ASK ")) {
    r.kind = Redirect::Kind::kAsk;
    error.remove_prefix(4);
  } else {
    return std::nullopt;
  }
  const size_t space = error.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  if (!ParseNumber(error.substr(0, space), &r.slot) || r.slot >= kClusterSlots) return std::nullopt;
  const std::string_view addr = error.substr(space + 1);
  if (addr.starts_with(':')) {  // Redis 7: the host of the node that answered
    uint16_t port = 0;
    if (!ParseNumber(addr.substr(1), &port) || port == 0) return std::nullopt;
    r.to = Endpoint{from.host, port};
    return r;
  }
  Result<Endpoint> to = ParseEndpoint(addr);
  if (!to) return std::nullopt;
  r.to = std::move(to).value();
  return r;
}

Status SlotMap::Reset(std::span<const SlotRange> ranges) {
  for (const SlotRange& r : ranges) {
    if (r.first > r.last || r.last >= kClusterSlots) {
      return InvalidArgumentError("slot range " + std::to_string(r.first) + "-" +
                                  std::to_string(r.last) + " is not within 0-16383");
    }
  }
  nodes_.clear();
  owner_.fill(kNoNode);
  covered_ = 0;
  for (const SlotRange& r : ranges) {
    const uint32_t id = IdOf(r.master);
    for (uint32_t s = r.first; s <= r.last; ++s) {
      if (owner_[s] == kNoNode) ++covered_;
      owner_[s] = id;
    }
  }
  return Status::Ok();
}

uint32_t SlotMap::Move(uint16_t slot, const Endpoint& to) {
  const uint32_t id = IdOf(to);
  if (owner_[slot] == kNoNode) ++covered_;
  owner_[slot] = id;
  return id;
}

uint32_t SlotMap::IdOf(const Endpoint& e) {
  for (uint32_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i] == e) return i;
  }
  nodes_.push_back(e);
  return static_cast<uint32_t>(nodes_.size() - 1);
}

}  // namespace kvtier::tiers::internal
