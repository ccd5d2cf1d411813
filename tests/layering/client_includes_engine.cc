// Must not compile: client/ may not know the engine (DESIGN.md §2).
#include "engine/cache_engine.h"
