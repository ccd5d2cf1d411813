// Must not compile: client/ may not know the tiers (DESIGN.md §2).
#include "tiers/tier.h"
