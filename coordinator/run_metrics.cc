#include "coordinator/run_metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <iterator>
#include <regex>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "common/files.h"
#include "runtime/text_format.h"

namespace dctrain {

std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";
  return fmt::format("{}", value);
}

std::string json_string(const std::string& value) {
  std::string out;
  out.reserve(value.size() + 2);
  out.push_back('"');
  for (char c : value) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<int>(c));
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

namespace {

// Keeps the records of metrics.jsonl that belong before `next_step`: step
// and tau records of earlier steps, eval and epoch records at most
// `next_step` steps in (they count steps done). A torn last line is dropped;
// a record without a step is kept. Returns how many records were removed.
uint64_t keep_records_before(const std::filesystem::path& path, uint64_t next_step) {
  std::ifstream in(path);
  if (!in) return 0;
  static const std::regex kType("^\\{\"type\":\"([a-z]+)\"");
  static const std::regex kStep("\"step\":([0-9]+)");
  std::string kept, line;
  uint64_t removed = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::smatch type, step;
    bool keep = line.back() == '}' && std::regex_search(line, type, kType);
    if (keep && std::regex_search(line, step, kStep)) {
      const uint64_t n = std::stoull(step[1]);
      const bool counts_steps_done = type[1] == "eval" || type[1] == "epoch";
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

RunMetrics::RunMetrics(const std::filesystem::path& run_dir, std::optional<uint64_t> resume_step) {
  const std::filesystem::path path = run_dir / "metrics.jsonl";
  if (resume_step) superseded_ = keep_records_before(path, *resume_step);
  out_.open(path, resume_step ? std::ios::app : std::ios::trunc);
  if (!out_) {
    throw std::runtime_error(fmt::format("cannot open '{}' for writing (is the run folder writable?)",
                                         (run_dir / "metrics.jsonl").string()));
  }
}

void RunMetrics::record_step(const StepRecord& r) {
  std::string workers;
  for (const WorkerStepRecord& w : r.workers) {
    std::string times;
    for (double t : w.micro_batch_seconds) {
      if (!times.empty()) times.push_back(',');
      times.append(json_number(t));
    }
    workers += fmt::format(
        "{}{{\"rank\":{},\"name\":{},\"contributed\":{},\"missed\":{},\"compute_seconds\":{},"
        "\"overhead_seconds\":{},\"completed\":{},\"dropped\":{},\"samples\":{},\"checksum_ok\":{},"
        "\"micro_batch_seconds\":[{}],\"arrival_seconds\":{}}}",
        workers.empty() ? "" : ",", w.rank, json_string(w.name), w.contributed, w.missed,
        json_number(w.compute_seconds), json_number(w.overhead_seconds), w.completed, w.dropped,
        w.samples, w.checksum_ok, times, w.arrival_seconds >= 0 ? json_number(w.arrival_seconds) : "null");
  }
  out_ << fmt::format(
      "{{\"type\":\"step\",\"step\":{},\"epoch\":{},\"epochs\":{},\"wall_seconds\":{},"
      "\"step_seconds\":{},\"reduce_seconds\":{},\"apply_seconds\":{},\"eval_seconds\":{},"
      "\"checkpoint_seconds\":{},\"tau\":{},\"lr\":{},"
      "\"applied\":{},\"samples\":{},\"loss\":{},\"accuracy\":{},\"planned\":{},\"completed\":{},"
      "\"dropped\":{},\"orphaned\":{},\"requeued\":{},\"lost_samples\":{},\"workers\":[{}]}}\n",
      r.step, r.epoch, json_number(r.epochs), json_number(r.wall_seconds),
      json_number(r.step_seconds), json_number(r.reduce_seconds), json_number(r.apply_seconds),
      json_number(r.eval_seconds), json_number(r.checkpoint_seconds), std::isinf(r.tau) ? std::string("\"inf\"") : json_number(r.tau), json_number(r.lr),
      r.applied, r.samples, json_number(r.loss), json_number(r.accuracy), r.planned, r.completed,
      r.dropped, r.orphaned, r.requeued, r.lost_samples,
      workers);
  out_.flush();
}

void RunMetrics::record_eval(const EvalRecord& r) {
  out_ << fmt::format(
      "{{\"type\":\"eval\",\"step\":{},\"epochs\":{},\"wall_seconds\":{},\"eval_loss\":{},"
      "\"eval_accuracy\":{},\"samples\":{},\"seconds\":{}}}\n",
      r.step, json_number(r.epochs), json_number(r.wall_seconds), json_number(r.loss),
      json_number(r.accuracy), r.samples, json_number(r.seconds));
  out_.flush();
}

void RunMetrics::record_epoch(const EpochAudit& a, uint64_t steps, double wall_seconds) {
  out_ << fmt::format(
      "{{\"type\":\"epoch\",\"step\":{},\"epoch\":{},\"wall_seconds\":{},\"audit_ok\":{},\"complete\":{},"
      "\"done\":{},\"lost\":{},\"duplicated\":{},\"missing\":{}}}\n",
      steps, a.epoch, json_number(wall_seconds), a.ok(), a.complete, a.done, a.lost.size(),
      a.duplicated.size(), a.missing.size());
  out_.flush();
}

namespace {
std::string json_tau(double tau) { return std::isinf(tau) ? std::string("\"inf\"") : json_number(tau); }
}  // namespace

void RunMetrics::record_tau(const TauRecord& r) {
  out_ << fmt::format(
      "{{\"type\":\"tau\",\"step\":{},\"wall_seconds\":{},\"why\":{},\"changed\":{},\"old_tau\":{},"
      "\"new_tau\":{},\"best_tau\":{},\"predicted_drop_rate\":{},\"predicted_speedup\":{},"
      "\"predicted_step_seconds\":{},\"predicted_baseline_step_seconds\":{},"
      "\"overhead_seconds\":{},\"steps\":{},\"old_tau_drop_rate\":{},\"old_tau_speedup\":{}}}\n",
      r.step, json_number(r.wall_seconds), json_string(r.why), r.changed, json_tau(r.old_tau),
      json_tau(r.new_tau), json_tau(r.best_tau), json_number(r.drop_rate), json_number(r.speedup),
      json_number(r.step_seconds), json_number(r.baseline_step_seconds),
      json_number(r.overhead_seconds), r.steps, json_number(r.old_drop_rate),
      json_number(r.old_speedup));
  out_.flush();
}

void RunMetrics::write_summary(const std::filesystem::path& path, const v1::RunConfig& config,
                               double wall_seconds, double epochs,
                               const std::string& stop_reason) const {
  const v1::RunTotals& t = totals_;
  const uint64_t planned = t.microbatches_completed() + t.microbatches_dropped() +
                           t.microbatches_orphaned();
  const double drop_rate =
      planned == 0 ? 0.0 : static_cast<double>(t.microbatches_dropped() + t.microbatches_orphaned()) /
                               static_cast<double>(planned);
  // The threshold in force at the end (a fixed one: the config's).
  const double tau = t.tau() != 0.0 ? t.tau() : config.step().tau();
  const bool estimated = t.has_last_tau_estimate();
  const v1::TauEstimate& e = t.last_tau_estimate();
  const auto predicted = [&](double value) { return estimated ? json_number(value) : std::string("null"); };
  const uint64_t planned_at_tau = t.microbatches_planned_at_tau();
  std::string text = fmt::format(
      "{{\n"
      "  \"name\": {},\n"
      "  \"final_eval_accuracy\": {},\n"
      "  \"final_eval_loss\": {},\n"
      "  \"final_eval_step\": {},\n"
      "  \"wall_seconds\": {},\n"
      "  \"steps\": {},\n"
      "  \"epochs\": {},\n"
      "  \"samples\": {},\n"
      "  \"samples_per_second\": {},\n"
      "  \"microbatches_completed\": {},\n"
      "  \"microbatches_dropped\": {},\n"
      "  \"microbatches_orphaned\": {},\n"
      "  \"drop_rate\": {},\n"
      "  \"samples_lost\": {},\n"
      "  \"time_to_target_seconds\": {},\n"
      "  \"target_accuracy\": {},\n"
      "  \"checksum_mismatches\": {},\n"
      "  \"workers_released\": {},\n"
      "  \"epochs_audited\": {},\n"
      "  \"audits_failed\": {},\n"
      "  \"mean_step_seconds\": {},\n"
      "  \"mean_max_compute_seconds\": {},\n"
      "  \"workers\": {},\n"
      "  \"tau\": {},\n"
      "  \"tau_policy\": {},\n"
      "  \"tau_changes\": {},\n"
      "  \"steps_at_final_tau\": {},\n"
      "  \"mean_step_seconds_at_final_tau\": {},\n"
      "  \"drop_rate_at_final_tau\": {},\n"
      "  \"predicted_at_step\": {},\n"
      "  \"predicted_tau\": {},\n"
      "  \"predicted_speedup\": {},\n"
      "  \"predicted_drop_rate\": {},\n"
      "  \"predicted_step_seconds\": {},\n"
      "  \"predicted_baseline_step_seconds\": {},\n"
      "  \"requeue\": {},\n"
      "  \"normalize\": {},\n"
      "  \"delay\": {},\n"
      "  \"stop_reason\": {}\n"
      "}}\n",
      json_string(config.name()), t.has_eval() ? json_number(t.last_eval_accuracy()) : "null",
      t.has_eval() ? json_number(t.last_eval_loss()) : "null",
      t.has_eval() ? std::to_string(t.last_eval_step()) : "null", json_number(wall_seconds),
      t.steps(), json_number(epochs), t.samples_completed(),
      json_number(wall_seconds > 0 ? static_cast<double>(t.samples_completed()) / wall_seconds : 0.0),
      t.microbatches_completed(), t.microbatches_dropped(), t.microbatches_orphaned(),
      json_number(drop_rate), t.samples_lost(),
      t.reached_target() ? json_number(t.time_to_target_seconds()) : "null",
      config.stop().target_accuracy() > 0 ? json_number(config.stop().target_accuracy()) : "null",
      t.checksum_mismatches(), t.workers_released(), t.epochs_completed(), t.audits_failed(),
      json_number(t.steps() > 0 ? t.step_seconds() / static_cast<double>(t.steps()) : 0.0),
      json_number(t.steps() > 0 ? t.max_compute_seconds() / static_cast<double>(t.steps()) : 0.0),
      config.workers(), json_tau(tau), json_string(word(config.step().tau_policy())),
      t.tau_changes(), t.steps_at_tau(),
      json_number(t.steps_at_tau() > 0 ? t.step_seconds_at_tau() / static_cast<double>(t.steps_at_tau())
                                       : 0.0),
      json_number(planned_at_tau > 0 ? static_cast<double>(t.microbatches_dropped_at_tau()) /
                                           static_cast<double>(planned_at_tau)
                                     : 0.0),
      estimated ? std::to_string(e.step()) : std::string("null"),
      estimated ? json_tau(e.tau()) : std::string("null"), predicted(e.speedup()),
      predicted(e.drop_rate()), predicted(e.step_seconds()), predicted(e.baseline_step_seconds()),
      config.step().requeue(), json_string(word(config.step().normalize())),
      json_string(word(config.delay().kind())), json_string(stop_reason));
  if (!summary_members_.empty()) text.insert(text.rfind("\n}"), ",\n  " + summary_members_);
  write_file_atomically(path, text);
}

}  // namespace dctrain
