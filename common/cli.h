// What every dctrain program's command line shares: --version text and the
// --log-level option.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace dctrain {

// "dctrain-worker 0.1.0 (protocol 1)"
std::string version_line(const std::string& program);

// Adds --version and --log-level (bound to `level`, default "info").
void add_common_options(CLI::App& app, const std::string& program, std::string& level);

// Applies a validated --log-level to spdlog's default logger.
void apply_log_level(const std::string& level);

}  // namespace dctrain
