// Must not compile: eviction/ may not know the tiers (DESIGN.md §2).
#include "tiers/tier.h"
