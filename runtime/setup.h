// From a run config to the objects it names: datasets from the data root,
// the model spec, the optimizer and its learning-rate schedule. The only
// place where the run config meets the model and data libraries.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "data/dataset.h"
#include "data/dataset_factory.h"
#include "model/lr_schedule.h"
#include "model/model.h"
#include "model/optimizer.h"
#include "proto/config.pb.h"

namespace dctrain {

// The dataset factory's spec for `split`: kind "synthetic" becomes
// synthetic-text for bert-tiny and synthetic-images (of the model's image
// shape) for the classifiers.
DatasetSpec dataset_spec(const v1::RunConfig& config, Split split);

// Whether the run's data come from files under a data root.
bool needs_data_root(const v1::RunConfig& config);

// Opens (or generates) the split; throws the factory's errors, which name the
// file and how to fix it.
std::unique_ptr<Dataset> open_dataset(const v1::RunConfig& config, Split split,
                                      const std::filesystem::path& data_root);

// Samples of the training set the run uses (train_limit applied).
uint64_t train_samples(const v1::RunConfig& config, const Dataset& train);
// Held-out samples evaluated (test_limit applied).
uint64_t test_samples(const v1::RunConfig& config, const Dataset& test);

// The model spec: shape from the dataset, seed from the run, threads local.
ModelSpec model_spec(const v1::RunConfig& config, const SampleShape& shape, int threads);

// A classifier takes its data's images and classes (model_spec): this sets
// them in the config's model (so config.cfg, the checkpoint and the export
// say what the model takes) and returns what differs from what the config
// said, e.g. "input 1x28x28 (the config said 3x32x32)"; nothing when the
// config said nothing else (or left them unset) or the data are tokens.
std::optional<std::string> fit_model_to_data(v1::RunConfig& config, const SampleShape& shape);

OptimizerSpec optimizer_spec(const v1::OptimizerConfig& optimizer);
// The optimizer every replica applies the run's updates with, whose state
// checkpoints and welcomes carry: step.outer_optimizer under policy
// "local-sgd" (the run's `optimizer` is then each worker's own), else the
// run's `optimizer`.
const v1::OptimizerConfig& replicated_optimizer(const v1::RunConfig& config);
// The schedule counted in updates (the optimizer's own view).
LrScheduleSpec schedule_spec(const v1::OptimizerConfig& optimizer);
// The run's schedule in the units of its clock: updates, or samples (every
// field scaled by the global batch; a cosine decays over total_samples).
LrScheduleSpec run_schedule_spec(const v1::RunConfig& config);
// Where the run's schedule stands before an update: `updates` applied so
// far, or `settled_samples` (completed, or lost with requeue off).
double schedule_position(const v1::RunConfig& config, int64_t updates, uint64_t settled_samples);

// Resolves what depends on the training set's size: a cosine schedule's
// total left at 0 becomes the run's budget: total_steps from stop.max_steps
// (clock "updates"), total_samples from stop.max_epochs (clock "samples").
void resolve_step_budget(v1::RunConfig& config, uint64_t train_size);

}  // namespace dctrain
