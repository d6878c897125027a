#include "runtime/setup.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/run_config.h"

namespace dctrain {

DatasetSpec dataset_spec(const v1::RunConfig& config, Split split) {
  const v1::DatasetConfig& d = config.dataset();
  DatasetSpec spec;
  spec.split = split;
  spec.seed = d.seed();
  spec.samples = d.synthetic_samples();
  spec.augment = d.augment();
  spec.corpus = d.corpus();
  spec.vocab = d.vocab();
  spec.seq_len = config.model().max_seq_len();
  spec.masked_per_sequence = static_cast<int>(d.masked_per_sequence());
  const auto& files = split == Split::kTrain ? d.train_files() : d.test_files();
  spec.files.assign(files.begin(), files.end());
  if (reads_files(d.kind())) {
    spec.kind = word(d.kind());  // the data library names its readers by the config's words
  } else {
    spec.kind = takes_text(config.model().name()) ? "synthetic-text" : "synthetic-images";
    spec.channels = config.model().image_channels();
    spec.height = config.model().image_height();
    spec.width = config.model().image_width();
  }
  return spec;
}

bool needs_data_root(const v1::RunConfig& config) {
  return reads_files(config.dataset().kind());
}

std::unique_ptr<Dataset> open_dataset(const v1::RunConfig& config, Split split,
                                      const std::filesystem::path& data_root) {
  return make_dataset(dataset_spec(config, split), data_root);
}

uint64_t train_samples(const v1::RunConfig& config, const Dataset& train) {
  const uint64_t limit = config.dataset().train_limit();
  return limit == 0 ? train.size() : std::min(limit, train.size());
}

uint64_t test_samples(const v1::RunConfig& config, const Dataset& test) {
  const uint64_t limit = config.dataset().test_limit();
  return limit == 0 ? test.size() : std::min(limit, test.size());
}

ModelSpec model_spec(const v1::RunConfig& config, const SampleShape& shape, int threads) {
  const v1::ModelConfig& m = config.model();
  ModelSpec spec;
  spec.name = word(m.name());  // the model library's names are the config's words
  spec.seed = config.seed();
  spec.threads = threads;
  spec.dropout = m.dropout();
  spec.max_seq_len = m.max_seq_len();
  if (m.name() == v1::MODEL_RESNET) {
    spec.depth = static_cast<int>(m.depth());
    spec.width = static_cast<int>(m.width());
  }
  if (m.name() == v1::MODEL_BERT) {
    spec.layers = static_cast<int>(m.layers());
    spec.hidden = static_cast<int>(m.hidden());
    spec.heads = static_cast<int>(m.heads());
    spec.intermediate = static_cast<int>(m.intermediate());
  }
  if (shape.kind == BatchKind::kTokens) {
    spec.vocab_size = shape.vocab_size;
    spec.max_seq_len = std::max(spec.max_seq_len, shape.seq_len);
  } else {
    spec.num_classes = shape.classes != 0 ? shape.classes : m.num_classes();
    spec.image_channels = shape.channels;
    spec.image_height = shape.height;
    spec.image_width = shape.width;
  }
  return spec;
}

std::optional<std::string> fit_model_to_data(v1::RunConfig& config, const SampleShape& shape) {
  if (shape.kind == BatchKind::kTokens) return std::nullopt;
  v1::ModelConfig& m = *config.mutable_model();
  std::vector<std::string> changed;
  const bool said_input = m.image_channels() != 0 || m.image_height() != 0 || m.image_width() != 0;
  if (said_input && (m.image_channels() != shape.channels || m.image_height() != shape.height ||
                     m.image_width() != shape.width)) {
    changed.push_back(fmt::format("input {}x{}x{} (the config said {}x{}x{})", shape.channels,
                                  shape.height, shape.width, m.image_channels(), m.image_height(),
                                  m.image_width()));
  }
  if (shape.classes != 0 && m.num_classes() != 0 && m.num_classes() != shape.classes) {
    changed.push_back(
        fmt::format("{} classes (the config said {})", shape.classes, m.num_classes()));
  }
  m.set_image_channels(shape.channels);
  m.set_image_height(shape.height);
  m.set_image_width(shape.width);
  if (shape.classes != 0) m.set_num_classes(shape.classes);
  if (changed.empty()) return std::nullopt;
  return fmt::format("{}", fmt::join(changed, ", "));
}

OptimizerSpec optimizer_spec(const v1::OptimizerConfig& o) {
  OptimizerSpec spec;
  spec.name = word(o.kind());
  spec.weight_decay = o.weight_decay();
  spec.momentum = o.momentum();
  spec.nesterov = o.nesterov();
  spec.beta1 = o.beta1();
  spec.beta2 = o.beta2();
  spec.eps = o.eps();
  return spec;
}

LrScheduleSpec schedule_spec(const v1::OptimizerConfig& o) {
  LrScheduleSpec spec;
  spec.name = word(o.schedule().kind());
  spec.base_lr = o.lr();
  spec.warmup_steps = static_cast<int64_t>(o.schedule().warmup_steps());
  spec.step_size = std::max<int64_t>(1, static_cast<int64_t>(o.schedule().step_every()));
  spec.gamma = o.schedule().gamma() != 0.0 ? o.schedule().gamma() : 0.1;
  spec.total_steps = static_cast<int64_t>(o.schedule().total_steps());
  return spec;
}

LrScheduleSpec run_schedule_spec(const v1::RunConfig& config) {
  LrScheduleSpec spec = schedule_spec(config.optimizer());
  const v1::LrSchedule& s = config.optimizer().schedule();
  if (s.clock() != v1::CLOCK_SAMPLES) return spec;
  const auto batch = static_cast<int64_t>(config.step().global_batch());
  spec.warmup_steps *= batch;
  spec.step_size *= batch;
  spec.total_steps =
      s.total_samples() != 0 ? static_cast<int64_t>(s.total_samples()) : spec.total_steps * batch;
  return spec;
}

const v1::OptimizerConfig& replicated_optimizer(const v1::RunConfig& config) {
  return config.step().policy() == v1::POLICY_LOCAL_SGD ? config.step().outer_optimizer()
                                                        : config.optimizer();
}

double schedule_position(const v1::RunConfig& config, int64_t updates, uint64_t settled_samples) {
  switch (config.optimizer().schedule().clock()) {
    case v1::CLOCK_SAMPLES:
      return static_cast<double>(settled_samples);
    case v1::CLOCK_UPDATES:
    case v1::CLOCK_UNSET:  // validate() refuses it; the optimizer's own count is the safe reading
    case v1::ScheduleClock_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::ScheduleClock_INT_MAX_SENTINEL_DO_NOT_USE_:
      return static_cast<double>(updates);
  }
  return static_cast<double>(updates);
}

void resolve_step_budget(v1::RunConfig& config, uint64_t train_size) {
  v1::LrSchedule& schedule = *config.mutable_optimizer()->mutable_schedule();
  if (schedule.kind() != v1::SCHEDULE_COSINE) return;
  if (schedule.clock() == v1::CLOCK_SAMPLES && schedule.total_samples() == 0 &&
      schedule.total_steps() == 0 && config.stop().max_epochs() > 0.0) {
    const double samples = std::round(config.stop().max_epochs() * static_cast<double>(train_size));
    schedule.set_total_samples(std::max<uint64_t>(
        static_cast<uint64_t>(samples),
        (schedule.warmup_steps() + 1) * static_cast<uint64_t>(config.step().global_batch())));
    // The same budget in updates without requeue, for the optimizer's own view.
    schedule.set_total_steps((schedule.total_samples() + config.step().global_batch() - 1) /
                             config.step().global_batch());
    return;
  }
  if (schedule.total_steps() != 0) return;
  // In gradient steps: a step of a local-sgd run is local_steps of them.
  uint64_t steps =
      config.stop().max_steps() *
      (config.step().policy() == v1::POLICY_LOCAL_SGD ? config.step().local_steps() : 1);
  if (steps == 0) {
    const double per_epoch =
        std::ceil(static_cast<double>(train_size) / config.step().global_batch());
    steps = static_cast<uint64_t>(std::ceil(config.stop().max_epochs() * per_epoch));
  }
  schedule.set_total_steps(std::max<uint64_t>(steps, schedule.warmup_steps() + 1));
}

}  // namespace dctrain
