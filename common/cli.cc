#include "common/cli.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/version.h"

namespace dctrain {

std::string version_line(const std::string& program) {
  return fmt::format("{} {} (protocol {})", program, kVersion, kProtocolVersion);
}

void add_common_options(CLI::App& app, const std::string& program, std::string& level) {
  app.set_version_flag("--version", version_line(program));
  app.add_option("--log-level", level, "Log verbosity")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
}

void apply_log_level(const std::string& level) {
  spdlog::set_level(spdlog::level::from_str(level));
}

}  // namespace dctrain
