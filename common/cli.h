// What every dctrain program's command line shares: --version text and the
// --log-level option; for those that compute, --blas-info and the help on
// OPENBLAS_CORETYPE.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

namespace dctrain {

// "dctrain-worker 0.1.0+3f2c9a1b7d4e (protocol 9)": the source version
// (common/source_version.h) and the wire protocol.
std::string version_line(const std::string& program);

// Adds --version and --log-level (bound to `level`, default "info").
void add_common_options(CLI::App& app, const std::string& program, std::string& level);

// For the programs that compute: --blas-info (log the BLAS core, how it was
// chosen and a quick sgemm figure, then exit) and the help footer on
// OPENBLAS_CORETYPE.
void add_blas_options(CLI::App& app, bool& blas_info);

// The help text on OPENBLAS_CORETYPE (common/blas_runtime.h).
std::string blas_environment_help();

// Parses the command line. Nothing: go on. Otherwise the status to exit
// with, the message printed: 0 after --help or --version, kExitUsage
// (common/exit_codes.h) for any command-line error (CLI11's own codes,
// 105 and the like, are not the programs'). An unknown flag is named with
// the nearest known ones ("--worker: did you mean --workers?").
std::optional<int> parse_command_line(CLI::App& app, int argc, const char* const* argv);

// Ends the --help text with "Examples:" and `lines` (one command each,
// after what the footer already says).
void add_examples(CLI::App& app, const std::vector<std::string>& lines);

// Applies a validated --log-level to spdlog's default logger.
void apply_log_level(const std::string& level);

}  // namespace dctrain
