// Must not compile: tiers/ holds the tier backends only and may not know the engine above it
// (DESIGN.md §2).
#include "engine/cache_engine.h"
