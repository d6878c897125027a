// A test program around settle_blas_core() that can pretend the library
// reported another core, so the re-execution path runs for real on any host:
//
//   blas_reexec_probe [CORE [always]]
//
// CORE replaces what openblas_get_corename() says while OPENBLAS_CORETYPE is
// unset (a library that falls back to CORE when left to itself); with
// "always", also once it is set (a library that ignores the variable). Every
// process image prints an "image" line first, so the test counts them.
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "common/blas_runtime.h"

int main(int argc, char** argv) {
  dctrain::BlasProbe probe = dctrain::probe_blas();
  std::printf("image pid=%d reported=%s coretype=%s\n", static_cast<int>(::getpid()),
              probe.reported_core.c_str(), probe.coretype ? probe.coretype->c_str() : "(unset)");
  const bool always = argc > 2 && std::strcmp(argv[2], "always") == 0;
  if (argc > 1 && (!probe.coretype || always)) probe.reported_core = argv[1];
  const dctrain::BlasReport report = dctrain::settle_blas_core(argv, probe);
  std::printf("BLAS: %s\n", dctrain::describe(report).c_str());
  if (!report.warning.empty()) std::printf("warning: %s\n", report.warning.c_str());
  return 0;
}
