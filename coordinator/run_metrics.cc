#include "coordinator/run_metrics.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "common/files.h"
#include "common/run_files.h"
#include "common/source_version.h"
#include "runtime/text_format.h"

namespace dctrain {

namespace {

// Keeps the records of metrics.jsonl that belong before `next_step`: step
// and tau records of earlier steps, eval and epoch records at most
// `next_step` steps in (they count steps done). A torn last line is dropped;
// a record without a step is kept. Returns how many records were removed.
uint64_t keep_records_before(const std::filesystem::path& path, uint64_t next_step) {
  std::ifstream in(path);
  if (!in) return 0;
  std::string kept, line;
  uint64_t removed = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const std::optional<v1::RecordHeader> header = parse_record_header(line);
    bool keep = header.has_value() && !header->type().empty();
    if (keep && header->has_step()) {
      const uint64_t n = header->step();
      const bool counts_steps_done =
          header->type() == kEvalRecordType || header->type() == kEpochRecordType;
      keep = counts_steps_done ? n <= next_step : n < next_step;
    }
    if (keep) {
      kept += line;
      kept += '\n';
    } else {
      ++removed;
    }
  }
  in.close();
  if (removed > 0) write_file_atomically(path, kept);
  return removed;
}

}  // namespace

RunMetrics::RunMetrics(const std::filesystem::path& run_dir, std::string run_id,
                       std::optional<uint64_t> resume_step)
    : run_id_(std::move(run_id)) {
  const std::filesystem::path path = run_dir / run_files::kMetrics;
  if (resume_step) superseded_ = keep_records_before(path, *resume_step);
  out_ = std::make_unique<AppendFile>(path, !resume_step);
}

template <typename Record>
void RunMetrics::append(Record record, const char* type) {
  record.set_type(type);
  record.set_run_id(run_id_);
  out_->append(metrics_line(record));
}

void RunMetrics::sync() {
  out_->sync();
}

void RunMetrics::record_step(const v1::StepRecord& record) {
  append(record, kStepRecordType);
}

void RunMetrics::record_eval(const v1::EvalRecord& record) {
  append(record, kEvalRecordType);
}

void RunMetrics::record_epoch(const EpochAudit& a, uint64_t steps, double wall_seconds) {
  v1::EpochRecord r;
  r.set_step(static_cast<uint32_t>(steps));
  r.set_epoch(static_cast<uint32_t>(a.epoch));
  r.set_wall_seconds(wall_seconds);
  r.set_audit_ok(a.ok());
  r.set_complete(a.complete);
  r.set_done(static_cast<uint32_t>(a.done));
  r.set_lost(static_cast<uint32_t>(a.lost.size()));
  r.set_duplicated(static_cast<uint32_t>(a.duplicated.size()));
  r.set_missing(static_cast<uint32_t>(a.missing.size()));
  append(std::move(r), kEpochRecordType);
}

void RunMetrics::record_tau(const v1::TauRecord& record) {
  append(record, kTauRecordType);
}

v1::RunSummary RunMetrics::summary(const v1::RunConfig& config, double wall_seconds, double epochs,
                                   const std::string& stop_reason) const {
  const v1::RunTotals& t = totals_;
  const uint64_t planned =
      t.microbatches_completed() + t.microbatches_dropped() + t.microbatches_orphaned();
  const auto ratio = [](double part, uint64_t whole) {
    return whole == 0 ? 0.0 : part / static_cast<double>(whole);
  };
  const auto count = [](uint64_t n) { return static_cast<uint32_t>(n); };
  const auto none = std::optional<double>();
  v1::RunSummary s;
  s.set_name(config.name());
  s.set_run_id(config.run_id());
  s.set_code_version(source_version());
  *s.mutable_final_eval_accuracy() =
      number_or_null(t.has_eval() ? std::optional(t.last_eval_accuracy()) : none);
  *s.mutable_final_eval_loss() =
      number_or_null(t.has_eval() ? std::optional(t.last_eval_loss()) : none);
  *s.mutable_final_eval_step() =
      number_or_null(t.has_eval() ? std::optional(static_cast<double>(t.last_eval_step())) : none);
  s.set_wall_seconds(wall_seconds);
  s.set_steps(count(t.steps()));
  s.set_epochs(epochs);
  s.set_samples(count(t.samples_completed()));
  s.set_samples_per_second(
      wall_seconds > 0 ? static_cast<double>(t.samples_completed()) / wall_seconds : 0.0);
  s.set_microbatches_completed(count(t.microbatches_completed()));
  s.set_microbatches_dropped(count(t.microbatches_dropped()));
  s.set_microbatches_orphaned(count(t.microbatches_orphaned()));
  s.set_drop_rate(
      ratio(static_cast<double>(t.microbatches_dropped() + t.microbatches_orphaned()), planned));
  s.set_samples_lost(count(t.samples_lost()));
  *s.mutable_time_to_target_seconds() =
      number_or_null(t.reached_target() ? std::optional(t.time_to_target_seconds()) : none);
  const double target = config.stop().target_accuracy();
  *s.mutable_target_accuracy() = number_or_null(target > 0 ? std::optional(target) : none);
  *s.mutable_target_step() = number_or_null(
      t.reached_target() ? std::optional(static_cast<double>(t.target_step())) : none);
  s.set_evaluations_waited(static_cast<uint32_t>(t.evaluations_waited()));
  s.set_checksum_mismatches(count(t.checksum_mismatches()));
  s.set_workers_released(count(t.workers_released()));
  s.set_steps_discarded(count(t.steps_discarded()));
  s.set_contributions_refused_norm(count(t.contributions_refused_norm()));
  s.set_bad_messages(count(t.bad_messages()));
  s.set_workers_disconnected(count(t.workers_disconnected()));
  s.set_exchange_rounds_redone(count(t.exchange_rounds_redone()));
  s.set_sum_digest(t.sum_digest());
  s.set_epochs_audited(count(t.epochs_completed()));
  s.set_audits_failed(count(t.audits_failed()));
  s.set_mean_step_seconds(ratio(t.step_seconds(), t.steps()));
  s.set_mean_max_compute_seconds(ratio(t.max_compute_seconds(), t.steps()));
  s.set_workers(config.workers());
  // The threshold in force at the end (a fixed one: the config's).
  *s.mutable_tau() = tau_value(t.tau() != 0.0 ? t.tau() : config.step().tau());
  s.set_tau_policy(word(config.step().tau_policy()));
  s.set_policy(word(config.step().policy()));
  s.set_tau_changes(count(t.tau_changes()));
  s.set_steps_at_final_tau(count(t.steps_at_tau()));
  s.set_mean_step_seconds_at_final_tau(ratio(t.step_seconds_at_tau(), t.steps_at_tau()));
  s.set_drop_rate_at_final_tau(
      ratio(static_cast<double>(t.microbatches_dropped_at_tau()), t.microbatches_planned_at_tau()));
  const bool estimated = t.has_last_tau_estimate();
  const v1::TauEstimate& e = t.last_tau_estimate();
  const auto predicted = [&](double value) {
    return number_or_null(estimated ? std::optional(value) : none);
  };
  *s.mutable_predicted_at_step() = predicted(static_cast<double>(e.step()));
  *s.mutable_predicted_tau() = estimated ? tau_value(e.tau()) : number_or_null(none);
  // A ratio against tau = inf, as the report's (the threshold model's is the gain).
  *s.mutable_predicted_speedup() = predicted(1.0 + e.speedup());
  *s.mutable_predicted_drop_rate() = predicted(e.drop_rate());
  *s.mutable_predicted_step_seconds() = predicted(e.step_seconds());
  *s.mutable_predicted_baseline_step_seconds() = predicted(e.baseline_step_seconds());
  s.set_requeue(config.step().requeue());
  s.set_normalize(word(config.step().normalize()));
  s.set_delay(word(config.delay().kind()));
  s.set_stop_reason(stop_reason);
  return s;
}

void write_summary(const std::filesystem::path& path, const v1::RunSummary& summary) {
  write_file_atomically(path, summary_text(summary));
}

}  // namespace dctrain
