#include "tiers/tier.h"

namespace kvtier::tiers {

std::string_view TierKindName(TierKind kind) {
  switch (kind) {
    case TierKind::kDevice:
      return "device";
    case TierKind::kHost:
      return "host";
    case TierKind::kSsd:
      return "ssd";
    case TierKind::kRemote:
      return "remote";
  }
  return "unknown";
}

}  // namespace kvtier::tiers
