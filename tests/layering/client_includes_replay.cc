// Must not compile: client/ may not know the replay simulator (DESIGN.md §2).
#include "replay/simulator.h"
