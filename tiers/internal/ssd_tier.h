// The SSD tier over an SsdStore, for tests that build the store themselves
// (to inject faults through its BlockFileFactory).
#pragma once

#include <memory>

#include "tiers/internal/ssd_store.h"
#include "tiers/tier.h"

namespace kvtier::tiers::internal {

std::unique_ptr<Tier> NewSsdTierOver(std::unique_ptr<SsdStore> store);

}  // namespace kvtier::tiers::internal
