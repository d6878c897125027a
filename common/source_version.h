// The code a program was built from: "0.1.0+3f2c9a1b7d4e" (the project
// version and the git commit, "-dirty" when the tree had uncommitted
// changes), or "0.1.0" outside a git checkout. Written into every run's
// summary, so that a report pools only runs of the same code.
#pragma once

namespace dctrain {

const char* source_version();

}  // namespace dctrain
