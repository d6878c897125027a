// metrics.jsonl's step record at 64, 256 and 1,024 workers: the line
// written straight from the record's fields (metrics_line) against
// protobuf's own JSON printer (printer_metrics_line), the same bytes, side
// by side in this process. The record is filled as the coordinator fills
// it: every worker with its name, times, counts and four micro-batch times.
#include <chrono>
#include <cstdio>
#include <string>

#include "metrics/metrics_json.h"
#include "proto/metrics.pb.h"

namespace {

dctrain::v1::StepRecord step_record(int workers) {
  dctrain::v1::StepRecord r;
  r.set_type("step");
  r.set_run_id("20261127-120000-abcdef");
  r.set_step(41);
  r.set_step_seconds(0.0912345678);
  r.mutable_tau()->set_number_value(0.0431234);
  for (int i = 0; i < workers; ++i) {
    dctrain::v1::WorkerStep& w = *r.add_workers();
    w.set_rank(static_cast<uint32_t>(i));
    w.set_name("sim-" + std::to_string(i));
    w.set_contributed(true);
    w.set_compute_seconds(0.0712345 + 1e-6 * i);
    w.set_overhead_seconds(0.000812345);
    w.set_completed(4);
    w.set_samples(16);
    w.set_checksum_ok(true);
    for (int k = 0; k < 4; ++k) w.add_micro_batch_seconds(0.0171234 + 1e-7 * (i + k));
    w.mutable_arrival_seconds()->set_number_value(0.0801234 + 1e-6 * i);
    w.set_planned(4);
  }
  return r;
}

template <typename Write>
double seconds_per_line(const dctrain::v1::StepRecord& r, Write write, size_t& bytes) {
  const int repeats = 20;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < repeats; ++i) bytes += write(r).size();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / repeats;
}

}  // namespace

int main() {
  std::printf("%8s %14s %14s %8s %12s\n", "workers", "printer ms", "direct ms", "ratio",
              "line bytes");
  for (int workers : {64, 256, 1024}) {
    const dctrain::v1::StepRecord r = step_record(workers);
    if (dctrain::metrics_line(r) != dctrain::printer_metrics_line(r)) {
      std::fprintf(stderr, "metrics_line: the two lines differ at %d workers\n", workers);
      return 1;
    }
    size_t bytes = 0;
    const double printer = seconds_per_line(r, dctrain::printer_metrics_line, bytes);
    const double direct = seconds_per_line(r, dctrain::metrics_line, bytes);
    std::printf("%8d %14.3f %14.3f %7.1fx %12zu\n", workers, 1e3 * printer, 1e3 * direct,
                printer / direct, dctrain::metrics_line(r).size());
  }
  return 0;
}
