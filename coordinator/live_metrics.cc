#include "coordinator/live_metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace dctrain {

namespace {

constexpr size_t kThroughputWindow = 20;

// A sample value as Prometheus reads it: the shortest text that reads back
// as the same double, and +Inf / -Inf / NaN spelled its way.
std::string value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

// A label value with backslash, double quote and newline escaped.
std::string label(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

class Writer {
 public:
  void family(const char* name, const char* type, const char* help) {
    text_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void sample(const std::string& name, double v, const std::string& labels = "") {
    text_ += labels.empty() ? fmt::format("{} {}\n", name, value(v))
                            : fmt::format("{}{{{}}} {}\n", name, labels, value(v));
  }
  void histogram(const std::string& name, const Histogram& h, const std::string& labels) {
    const std::vector<double>& bounds = Histogram::second_bounds();
    uint64_t cumulative = 0;
    for (size_t i = 0; i < bounds.size(); ++i) {
      cumulative += h.counts[i];
      sample(name + "_bucket", static_cast<double>(cumulative),
             fmt::format("{},le=\"{}\"", labels, value(bounds[i])));
    }
    sample(name + "_bucket", static_cast<double>(h.count), labels + ",le=\"+Inf\"");
    sample(name + "_sum", h.sum, labels);
    sample(name + "_count", static_cast<double>(h.count), labels);
  }
  std::string take() { return std::move(text_); }

 private:
  std::string text_;
};

std::string worker_labels(const WorkerLiveMetrics& w) {
  return fmt::format("worker=\"{}\",rank=\"{}\"", label(w.name), w.rank);
}

}  // namespace

const std::vector<double>& Histogram::second_bounds() {
  static const std::vector<double> bounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                             0.25,  0.5,    1.0,   2.5,  5.0,   10.0, 30.0};
  return bounds;
}

void Histogram::observe(double seconds) {
  const std::vector<double>& bounds = second_bounds();
  // The first bucket whose upper bound (inclusive, as le says) holds it.
  const auto it = std::lower_bound(bounds.begin(), bounds.end(), seconds);
  ++counts[static_cast<size_t>(it - bounds.begin())];
  sum += seconds;
  ++count;
}

void LiveMetrics::step_recorded(const v1::StepRecord& record) {
  for (const v1::WorkerStep& w : record.workers()) {
    WorkerLiveMetrics& m = workers_[w.name()];
    m.name = w.name();
    m.rank = w.rank();
    if (w.contributed()) {
      ++m.steps_contributed;
      m.step_compute.observe(w.compute_seconds());
      for (double s : w.micro_batch_seconds()) m.micro_batch_compute.observe(s);
    }
    if (w.missed()) ++m.steps_missed;
  }
  samples_ += record.samples();
  recent_.emplace_back(record.wall_seconds(), samples_);
  while (recent_.size() > kThroughputWindow + 1) recent_.pop_front();
  last_step_seconds_ = record.step_seconds();
  if (record.samples() > 0) {
    has_loss_ = true;
    loss_ = record.loss();
  }
}

double LiveMetrics::samples_per_second() const {
  if (recent_.empty()) return 0.0;
  // With one step only, its samples over the run's wall time so far.
  const auto& [first_wall, first_samples] =
      recent_.size() == 1 ? std::pair<double, uint64_t>{0.0, 0} : recent_.front();
  const auto& [last_wall, last_samples] = recent_.back();
  const double seconds = last_wall - first_wall;
  return seconds > 0 ? static_cast<double>(last_samples - first_samples) / seconds : 0.0;
}

std::string prometheus_text(const LiveSnapshot& s) {
  Writer out;
  out.family("dctrain_steps_total", "counter", "Steps done.");
  out.sample("dctrain_steps_total", static_cast<double>(s.steps));
  out.family("dctrain_epoch", "gauge", "The epoch in progress (from 0).");
  out.sample("dctrain_epoch", static_cast<double>(s.epoch));
  out.family("dctrain_epochs", "gauge", "Epochs done, fractional.");
  out.sample("dctrain_epochs", s.epochs);
  out.family("dctrain_wall_seconds", "gauge",
             "Training time since the run started (earlier processes of a resumed run included), "
             "at the last step.");
  out.sample("dctrain_wall_seconds", s.wall_seconds);
  out.family("dctrain_samples_total", "counter", "Training samples completed.");
  out.sample("dctrain_samples_total", static_cast<double>(s.samples));
  out.family("dctrain_samples_per_second", "gauge",
             "Samples completed per second of wall time over the last 20 steps.");
  out.sample("dctrain_samples_per_second", s.samples_per_second);
  out.family("dctrain_microbatches_total", "counter",
             "Micro-batches by outcome: completed, dropped at the threshold, orphaned (planned on "
             "a worker that missed the deadline or died).");
  out.sample("dctrain_microbatches_total", static_cast<double>(s.microbatches_completed),
             "outcome=\"completed\"");
  out.sample("dctrain_microbatches_total", static_cast<double>(s.microbatches_dropped),
             "outcome=\"dropped\"");
  out.sample("dctrain_microbatches_total", static_cast<double>(s.microbatches_orphaned),
             "outcome=\"orphaned\"");
  out.family("dctrain_drop_rate_ratio", "gauge",
             "Dropped and orphaned micro-batches over those planned, since the start.");
  out.sample("dctrain_drop_rate_ratio", s.drop_rate);
  out.family("dctrain_tau_seconds", "gauge",
             "The step compute threshold in force (+Inf: none, plain synchronous SGD).");
  out.sample("dctrain_tau_seconds", s.tau);
  out.family("dctrain_step_seconds", "gauge",
             "The last step's time from plans sent to the last contribution (or the deadline).");
  out.sample("dctrain_step_seconds", s.last_step_seconds);
  out.family("dctrain_workers", "gauge", "Workers the run expects.");
  out.sample("dctrain_workers", s.workers_expected);
  out.family("dctrain_workers_alive", "gauge", "Workers alive now.");
  out.sample("dctrain_workers_alive", s.workers_alive);
  out.family("dctrain_loss", "gauge", "The last step's mean training loss (NaN before any).");
  out.sample("dctrain_loss", s.has_loss ? s.loss : std::nan(""));
  out.family("dctrain_eval_accuracy_ratio", "gauge",
             "Accuracy of the last evaluation on the held-out split (NaN before any).");
  out.sample("dctrain_eval_accuracy_ratio", s.has_eval ? s.eval_accuracy : std::nan(""));
  out.family("dctrain_eval_loss", "gauge", "Loss of the last evaluation (NaN before any).");
  out.sample("dctrain_eval_loss", s.has_eval ? s.eval_loss : std::nan(""));
  out.family("dctrain_eval_step", "gauge",
             "Steps done by the model the last evaluation looked at (-1 before any).");
  out.sample("dctrain_eval_step", s.has_eval ? static_cast<double>(s.eval_step) : -1.0);
  out.family("dctrain_evaluations_total", "counter", "Evaluations finished.");
  out.sample("dctrain_evaluations_total", static_cast<double>(s.evaluations));
  out.family("dctrain_evaluations_waited_total", "counter",
             "Evaluations that made the step loop wait for the previous one to finish.");
  out.sample("dctrain_evaluations_waited_total", static_cast<double>(s.evaluations_waited));
  out.family("dctrain_target_step", "gauge",
             "Steps done by the model that first reached the target accuracy (-1: not yet).");
  out.sample("dctrain_target_step", s.reached_target ? static_cast<double>(s.target_step) : -1.0);
  out.family("dctrain_run_finished", "gauge", "1 once the run has ended.");
  out.sample("dctrain_run_finished", s.finished ? 1.0 : 0.0);

  out.family("dctrain_worker_alive", "gauge", "1 while the worker is a live member of the run.");
  for (const WorkerLiveMetrics& w : s.workers)
    out.sample("dctrain_worker_alive", w.alive ? 1.0 : 0.0, worker_labels(w));
  out.family("dctrain_worker_steps_total", "counter",
             "Steps per worker by outcome: contributed, or missed (deadline, death).");
  for (const WorkerLiveMetrics& w : s.workers) {
    out.sample("dctrain_worker_steps_total", static_cast<double>(w.steps_contributed),
               worker_labels(w) + ",outcome=\"contributed\"");
    out.sample("dctrain_worker_steps_total", static_cast<double>(w.steps_missed),
               worker_labels(w) + ",outcome=\"missed\"");
  }
  out.family("dctrain_worker_slow", "gauge",
             "1 for a worker that is slow and why: cause compute (micro-batches 1.5 times the "
             "others' median) or communication (arrival minus its own time, likewise).");
  for (const WorkerLiveMetrics& w : s.workers) {
    if (w.slow_cause.empty()) continue;
    out.sample("dctrain_worker_slow", 1.0,
               fmt::format("{},cause=\"{}\"", worker_labels(w), label(w.slow_cause)));
  }
  out.family("dctrain_worker_step_compute_seconds", "histogram",
             "A worker's compute time in a step it contributed to (injected delay included).");
  for (const WorkerLiveMetrics& w : s.workers)
    out.histogram("dctrain_worker_step_compute_seconds", w.step_compute, worker_labels(w));
  out.family("dctrain_worker_micro_batch_compute_seconds", "histogram",
             "Compute time of each micro-batch a worker completed.");
  for (const WorkerLiveMetrics& w : s.workers) {
    out.histogram("dctrain_worker_micro_batch_compute_seconds", w.micro_batch_compute,
                  worker_labels(w));
  }
  return out.take();
}

}  // namespace dctrain
