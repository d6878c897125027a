// Which run a run folder holds, so that one folder never mixes two runs: a
// new run gets a random id (RunConfig.run_id) that its config.cfg, its
// checkpoint, every metrics record and its summary carry; a new run is not
// started over another run's files unless asked to replace them, and a
// checkpoint is not resumed into a folder whose records are another run's.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace dctrain {

// 16 hex digits from the system's random source.
std::string new_run_id();

// The files of a run that a folder holds, and the run they belong to.
struct FolderRun {
  std::vector<std::string> files;  // of config.cfg, metrics.jsonl, checkpoint.bin, summary.json
  std::string run_id;              // config.cfg's, else the first record's; empty: none recorded
  size_t step_records = 0;
};

// The run `dir` holds; none when it holds none of a run's files (a new
// folder, or one with only a sweep's case.txt and input.cfg).
std::optional<FolderRun> run_in_folder(const std::filesystem::path& dir);

// When `dir` holds a run: why a new run may not start there, and what to
// do instead (--resume, another folder, --overwrite).
std::optional<std::string> new_run_refusal(const std::filesystem::path& dir);

// Removes a run's files from `dir` (--overwrite): those above, their
// temporary files, trace.json, coordinator.log, endpoint and
// metrics_endpoint. Other files stay.
void remove_run_files(const std::filesystem::path& dir);

// Removes the temporary files (FILE.tmp) of a run's files from `dir`: what
// a process killed while writing one leaves behind.
void remove_temporary_files(const std::filesystem::path& dir);

// The ids (non-empty, first seen first) that `dir`/metrics.jsonl's records
// carry.
std::vector<std::string> recorded_run_ids(const std::filesystem::path& dir);

// A folder for a new run under `root`: NAME-YYYYMMDD-HHMMSS (local time),
// with -2, -3, ... when that exists already.
std::filesystem::path new_run_folder(const std::filesystem::path& root, const std::string& name);

}  // namespace dctrain
