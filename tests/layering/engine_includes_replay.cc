// Must not compile: engine/ may not know the replay simulator that drives it (DESIGN.md §2).
#include "replay/simulator.h"
