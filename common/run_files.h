// The files of a run folder, named in one place: what the coordinator and
// the simulator write, and what the launcher, the tools and the benchmarks
// read (docs/running.md lists what each holds).
#pragma once

namespace dctrain::run_files {

inline constexpr const char* kConfig = "config.cfg";          // the run config, finalized
inline constexpr const char* kMetrics = "metrics.jsonl";      // one record per step and evaluation
inline constexpr const char* kSummary = "summary.json";       // the run's figures at its end
inline constexpr const char* kCheckpoint = "checkpoint.bin";  // the state to resume from
inline constexpr const char* kModel = "model.safetensors";    // the trained model, at the end
inline constexpr const char* kTrace = "trace.json";           // the timeline
inline constexpr const char* kLog = "coordinator.log";        // the coordinator's log
inline constexpr const char* kEndpoint = "endpoint";          // where the coordinator listens
inline constexpr const char* kMetricsEndpoint = "metrics_endpoint";  // its live metrics' URL
inline constexpr const char* kSlowness = "slowness.txt";             // the real slowness applied
inline constexpr const char* kSlownessLog = "slowness.log";  // its bursts of co-located load

}  // namespace dctrain::run_files
