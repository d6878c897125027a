// What a run records: metrics.jsonl (one JSON object per line: a "step"
// record per step, an "eval" record per evaluation, an "epoch" record with
// the ledger's audit per epoch, a "tau" record per automatic threshold
// estimate), the totals behind summary.json, and the
// progress line.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/ledger.h"
#include "proto/config.pb.h"

namespace dctrain {

struct WorkerStepRecord {
  uint32_t rank = 0;
  std::string name;
  bool contributed = false;
  bool missed = false;               // missed the deadline or died during the step
  double compute_seconds = 0.0;
  double overhead_seconds = 0.0;
  uint64_t completed = 0, dropped = 0, samples = 0;
  bool checksum_ok = true;
  std::vector<double> micro_batch_seconds;
  uint64_t planned = 0;               // micro-batches planned for it
  double arrival_seconds = -1.0;      // plan sent -> contribution arrived; -1: none in time
};

struct StepRecord {
  uint64_t step = 0;
  uint64_t epoch = 0;
  double epochs = 0.0;               // fractional epochs done after this step
  double wall_seconds = 0.0;         // since the run started (resumes included)
  double step_seconds = 0.0;         // plans sent to the last contribution (or the deadline)
  double reduce_seconds = 0.0;       // after the last contribution: finishing the sum, dividing
  double apply_seconds = 0.0;        // the coordinator's own optimizer update
  double eval_seconds = 0.0;         // evaluation after this step (0: none); not in step_seconds
  double checkpoint_seconds = 0.0;   // checkpoint after this step (0: none); not in step_seconds
  double tau = 0.0;
  double lr = 0.0;
  bool applied = false;
  uint64_t samples = 0;
  double loss_sum = 0.0;             // over the contributions
  uint64_t loss_terms = 0, correct = 0;
  double loss = 0.0, accuracy = 0.0;
  uint64_t planned = 0, completed = 0, dropped = 0, orphaned = 0, requeued = 0, lost_samples = 0;
  std::vector<WorkerStepRecord> workers;
};

struct EvalRecord {
  uint64_t step = 0;
  double epochs = 0.0;
  double wall_seconds = 0.0;
  double loss = 0.0, accuracy = 0.0;
  uint64_t samples = 0;
  double seconds = 0.0;              // time the evaluation took
};

// An estimate of the automatic threshold (coordinator/threshold.h), recorded
// whether or not it moved tau.
struct TauRecord {
  uint64_t step = 0;                 // estimated after this step; a change applies from the next
  double wall_seconds = 0.0;
  std::string why;                   // "warm-up" or "re-estimate"
  bool changed = false;
  double old_tau = 0.0, new_tau = 0.0;
  double best_tau = 0.0;             // the estimate's argmax
  double drop_rate = 0.0, speedup = 0.0;  // predicted at best_tau
  double step_seconds = 0.0;         // predicted at best_tau, overhead included
  double baseline_step_seconds = 0.0;// predicted at tau = inf
  double overhead_seconds = 0.0;
  uint64_t steps = 0;                // recorded steps used
  double old_drop_rate = 0.0, old_speedup = 0.0;  // predicted at old_tau on the same steps
};

class RunMetrics {
 public:
  // Opens `run_dir`/metrics.jsonl afresh, or, resuming at step
  // `resume_step`, keeps only the records of the steps before it (those
  // written after the checkpoint by a process that crashed are removed,
  // so every step appears once) and appends.
  RunMetrics(const std::filesystem::path& run_dir, std::optional<uint64_t> resume_step);
  // Records removed when resuming.
  uint64_t records_superseded() const { return superseded_; }

  void record_step(const StepRecord& record);
  void record_eval(const EvalRecord& record);
  // `steps`: steps done when the epoch ended.
  void record_epoch(const EpochAudit& audit, uint64_t steps, double wall_seconds);
  void record_tau(const TauRecord& record);

  v1::RunTotals& totals() { return totals_; }
  const v1::RunTotals& totals() const { return totals_; }

  // summary.json, written atomically.
  // Extra members for summary.json (JSON text, e.g. `"a": 1, "b": [2]`),
  // written after the fixed ones.
  void set_summary_members(std::string members) { summary_members_ = std::move(members); }

  void write_summary(const std::filesystem::path& path, const v1::RunConfig& config,
                     double wall_seconds, double epochs, const std::string& stop_reason) const;

 private:
  std::ofstream out_;
  uint64_t superseded_ = 0;
  v1::RunTotals totals_;
  std::string summary_members_;
};

// JSON number: finite values as shortest round-trip text, others as null.
std::string json_number(double value);
// JSON string literal with escapes.
std::string json_string(const std::string& value);

}  // namespace dctrain
