// What a run records: metrics.jsonl (one JSON object per line: a "step"
// record per step, an "eval" record per evaluation, an "epoch" record with
// the ledger's audit per epoch, a "tau" record per automatic threshold
// estimate; schema in proto/metrics.proto), the totals behind summary.json,
// and the progress line.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/files.h"
#include "coordinator/ledger.h"
#include "coordinator/step/step_book.h"
#include "metrics/metrics_json.h"
#include "proto/config.pb.h"
#include "proto/metrics.pb.h"

namespace dctrain {

class RunMetrics {
 public:
  // Opens `run_dir`/metrics.jsonl afresh, or, resuming at step
  // `resume_step`, keeps only the records of the steps before it (those
  // written after the checkpoint by a process that crashed are removed,
  // so every step appears once) and appends. Every record carries
  // `run_id`.
  RunMetrics(const std::filesystem::path& run_dir, std::string run_id,
             std::optional<uint64_t> resume_step);
  // Records removed when resuming.
  uint64_t records_superseded() const { return superseded_; }

  // Each appends one line to metrics.jsonl; the record's type is set here.
  // A write that fails (a full disk) throws FileWriteError and leaves no
  // part of the line in the file.
  void record_step(const v1::StepRecord& record);
  void record_eval(const v1::EvalRecord& record);
  // `steps`: steps done when the epoch ended.
  void record_epoch(const EpochAudit& audit, uint64_t steps, double wall_seconds);
  void record_tau(const v1::TauRecord& record);
  // Makes the records so far durable (fsync): before a checkpoint that
  // covers them is put in place, so that a crash never leaves a checkpoint
  // past a record that is lost.
  void sync();

  v1::RunTotals& totals() { return totals_; }
  const v1::RunTotals& totals() const { return totals_; }

  // summary.json's figures from the totals and the config; the BLAS and the
  // per-worker lists are the caller's to add.
  v1::RunSummary summary(const v1::RunConfig& config, double wall_seconds, double epochs,
                         const std::string& stop_reason) const;

 private:
  template <typename Record>
  void append(Record record, const char* type);

  std::string run_id_;
  std::unique_ptr<AppendFile> out_;
  uint64_t superseded_ = 0;
  v1::RunTotals totals_;
};

// Writes summary.json (metrics/metrics_json.h) to `path` atomically.
void write_summary(const std::filesystem::path& path, const v1::RunSummary& summary);

}  // namespace dctrain
