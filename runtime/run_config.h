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
#include "runtime/text_format.h"

namespace dctrain {

// Parses `text` (Protobuf text format). Throws std::runtime_error naming
// `origin`, the line and column, and the parser's complaint.
v1::RunConfig parse_run_config(const std::string& text, const std::string& origin);

// Reads and parses the file at `path`.
v1::RunConfig load_run_config(const std::string& path);

// Fills every field left at 0 / empty with its documented default, so the
// config printed at start and written to the run folder shows every value.
void apply_defaults(v1::RunConfig& config);

// guard.norm_multiple where a config leaves it unset (coordinator/
// contribution_record.h), but on the exchange with data_plane.check_sums
// off, where it is 0 (off).
inline constexpr double kDefaultNormMultiple = 3.0;

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

// Switches over a kind name every value and have no `default:`, so that
// -Werror=switch refuses one that leaves a kind out. protoc adds two sentinel
// values to every proto3 enum (Kind_INT_MIN_SENTINEL_DO_NOT_USE_ and
// Kind_INT_MAX_SENTINEL_DO_NOT_USE_) that no config holds; switches list them
// beside the unset value.
//
// What the kinds mean where more than one place asks (false / nullopt for
// an unset kind, which validate() reports).
bool takes_text(v1::ModelKind model);          // bert-tiny: MLM on text; the rest classify images
bool mnist_shaped_model(v1::ModelKind model);  // made for 1 x 28 x 28 images
std::optional<bool> holds_text(v1::DatasetKind dataset);  // synthetic: whatever the model takes
bool reads_files(v1::DatasetKind dataset);      // everything but the generator needs a data root
bool reads_idx_files(v1::DatasetKind dataset);  // MNIST's two files per split (images, labels)

// Whether dropped micro-batches are requeued (the default) or lost.
bool requeue_enabled(const v1::StepConfig& step);

}  // namespace dctrain
