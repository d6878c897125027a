#include "common/cli.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/source_version.h"
#include "common/version.h"

namespace dctrain {

std::string version_line(const std::string& program) {
  return fmt::format("{} {} (protocol {})", program, source_version(), kProtocolVersion);
}

void add_common_options(CLI::App& app, const std::string& program, std::string& level) {
  app.set_version_flag("--version", version_line(program));
  app.add_option("--log-level", level, "Log verbosity")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
}

std::string blas_environment_help() {
  return "Environment:\n"
         "  OPENBLAS_CORETYPE   OpenBLAS kernels to run (SkylakeX, Haswell, Zen, Sandybridge, "
         "...).\n"
         "                      Unset: the library's own choice is kept, unless it fell back to a\n"
         "                      generic or SSE core (Prescott, Nehalem, ...) on a CPU with AVX or\n"
         "                      better; then the program runs itself once more with SkylakeX\n"
         "                      (AVX-512), Haswell (AVX2) or Sandybridge (AVX). A value set here\n"
         "                      is always kept. The core, how it was chosen and a quick sgemm\n"
         "                      figure are logged at start and recorded in summary.json.";
}

void add_blas_options(CLI::App& app, bool& blas_info) {
  app.add_flag("--blas-info", blas_info,
               "Log the BLAS library, the core it runs (and how it was chosen), the CPU and a "
               "quick sgemm figure, then exit");
  app.footer(blas_environment_help());
}

void apply_log_level(const std::string& level) {
  spdlog::set_level(spdlog::level::from_str(level));
}

}  // namespace dctrain
