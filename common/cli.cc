#include "common/cli.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "common/exit_codes.h"
#include "common/source_version.h"
#include "common/suggest.h"
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

std::optional<int> parse_command_line(CLI::App& app, int argc, const char* const* argv) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ExtrasError& e) {
    std::vector<std::string> flags;
    for (const CLI::Option* option : app.get_options()) {
      for (const std::string& name : option->get_lnames()) flags.push_back("--" + name);
    }
    std::string text = e.what();
    for (int i = 1; i < argc; ++i) {
      std::string given = argv[i];
      if (!given.starts_with("--")) continue;
      given = given.substr(0, given.find('='));
      if (std::find(flags.begin(), flags.end(), given) != flags.end()) continue;
      const std::string near = did_you_mean(given, flags, "");
      if (!near.empty()) text += fmt::format("\n{}: no such flag{}", given, near);
    }
    std::fprintf(stderr, "%s\nRun with --help for the flags.\n", text.c_str());
    return kExitUsage;
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitDone : kExitUsage;
  }
}

void add_examples(CLI::App& app, const std::vector<std::string>& lines) {
  std::string text = app.get_footer();
  text += std::string(text.empty() ? "" : "\n\n") + "Examples:";
  for (const std::string& line : lines) text += "\n  " + line;
  app.footer(text);
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
