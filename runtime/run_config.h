// The run config (proto/config.proto): read from a text-format file, given
// its defaults, overridden from the command line, and validated before
// anything starts. Every problem is reported at once, naming the field and
// how to fix it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "proto/config.pb.h"

namespace dctrain {

// Parses `text` (Protobuf text format). Throws std::runtime_error naming
// `origin`, the line and column, and the parser's complaint.
v1::RunConfig parse_run_config(const std::string& text, const std::string& origin);

// Reads and parses the file at `path`.
v1::RunConfig load_run_config(const std::string& path);

// Fills every field left at 0 / empty with its documented default, so the
// config printed at start and written to the run folder shows every value.
void apply_defaults(v1::RunConfig& config);

// Every problem with a defaulted config, each a full sentence; empty when fine.
std::vector<std::string> validate(const v1::RunConfig& config);

// apply_defaults + validate; throws std::invalid_argument listing every problem.
void finalize_run_config(v1::RunConfig& config);

// "0.25", "inf" or "infinity" -> seconds; throws std::invalid_argument otherwise.
double parse_tau(const std::string& text);

// Applies a --tau option: "auto" selects the automatic threshold; seconds or
// "inf" a fixed one (and drop any auto_tau settings). Throws
// std::invalid_argument otherwise.
void apply_tau_option(const std::string& text, v1::StepConfig& step);

// Human-readable text format, as written to RUN_DIR/config.cfg.
std::string to_text(const v1::RunConfig& config);

// Whether dropped micro-batches are requeued (the default) or lost.
bool requeue_enabled(const v1::StepConfig& step);

}  // namespace dctrain
