// What every dctrain program's command line shares: --version text and the
// --log-level option; for those that compute, --blas-info and the help on
// OPENBLAS_CORETYPE.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

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

// Applies a validated --log-level to spdlog's default logger.
void apply_log_level(const std::string& level);

}  // namespace dctrain
