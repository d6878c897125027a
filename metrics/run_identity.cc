#include "metrics/run_identity.h"

#include <fmt/format.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <time.h>

#include <algorithm>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>

#include "common/run_files.h"
#include "metrics/metrics_json.h"
#include "proto/config.pb.h"

namespace dctrain {

namespace {

// The files that show a folder holds a run; then those a run writes too
// that on their own are no sign of one (a coordinator that stopped before
// training leaves a log and an endpoint).
constexpr const char* kRunFiles[] = {run_files::kConfig, run_files::kMetrics,
                                     run_files::kCheckpoint, run_files::kSummary};
constexpr const char* kOtherRunFiles[] = {run_files::kTrace, run_files::kLog, run_files::kEndpoint,
                                          run_files::kMetricsEndpoint};

// Swallows a text-format parser's errors: a config.cfg this build does not
// read (another build's, or one in the run's own text dialect) only leaves
// the run's id to the records.
class Quiet : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
};

// Calls `visit` with the header of each metrics.jsonl record that parses.
template <typename Visit>
void for_each_record(const std::filesystem::path& dir, Visit visit) {
  std::ifstream in(dir / run_files::kMetrics);
  for (std::string line; std::getline(in, line);) {
    if (const std::optional<v1::RecordHeader> header = parse_record_header(line)) visit(*header);
  }
}

// Removes from `dir` every run file (both lists) with `suffix` appended to its name.
void remove_all_of(const std::filesystem::path& dir, const std::string& suffix) {
  std::error_code ignored;
  for (const char* name : kRunFiles)
    std::filesystem::remove(dir / (std::string(name) + suffix), ignored);
  for (const char* name : kOtherRunFiles)
    std::filesystem::remove(dir / (std::string(name) + suffix), ignored);
}

}  // namespace

std::string new_run_id() {
  std::random_device source;
  const uint64_t high = source(), low = source();
  return fmt::format("{:016x}", (high << 32) ^ low);
}

std::vector<std::string> recorded_run_ids(const std::filesystem::path& dir) {
  std::vector<std::string> ids;
  for_each_record(dir, [&](const v1::RecordHeader& header) {
    if (!header.run_id().empty() &&
        std::find(ids.begin(), ids.end(), header.run_id()) == ids.end()) {
      ids.push_back(header.run_id());
    }
  });
  return ids;
}

std::optional<FolderRun> run_in_folder(const std::filesystem::path& dir) {
  FolderRun run;
  for (const char* name : kRunFiles) {
    if (std::filesystem::exists(dir / name)) run.files.push_back(name);
  }
  if (run.files.empty()) return std::nullopt;
  if (std::ifstream config(dir / run_files::kConfig); config) {
    std::stringstream text;
    text << config.rdbuf();
    v1::RunConfig parsed;
    // A config this build does not read leaves it to the records to say.
    Quiet quiet;
    google::protobuf::TextFormat::Parser parser;
    parser.RecordErrorsTo(&quiet);
    if (parser.ParseFromString(text.str(), &parsed)) run.run_id = parsed.run_id();
  }
  for_each_record(dir, [&](const v1::RecordHeader& header) {
    if (run.run_id.empty()) run.run_id = header.run_id();
    if (header.type() == kStepRecordType) ++run.step_records;
  });
  return run;
}

std::optional<std::string> new_run_refusal(const std::filesystem::path& dir) {
  const std::optional<FolderRun> held = run_in_folder(dir);
  if (!held) return std::nullopt;
  std::string files;
  for (const std::string& f : held->files) files += (files.empty() ? "" : ", ") + f;
  // Only a run with a checkpoint can be continued.
  const bool resumable = std::find(held->files.begin(), held->files.end(),
                                   std::string(run_files::kCheckpoint)) != held->files.end();
  return fmt::format(
      "'{}' holds a run already ({}{}, {} step records): {}pass another --out folder, or pass "
      "--overwrite to replace it",
      dir.string(), held->run_id.empty() ? "" : "run " + held->run_id + ": ", files,
      held->step_records,
      resumable ? fmt::format("continue it with --resume {}, ", dir.string())
                : std::string("it has no checkpoint to continue from (checkpoint.every_steps); "));
}

void remove_temporary_files(const std::filesystem::path& dir) {
  remove_all_of(dir, ".tmp");
}

void remove_run_files(const std::filesystem::path& dir) {
  remove_all_of(dir, "");
  remove_all_of(dir, ".tmp");
}

std::filesystem::path new_run_folder(const std::filesystem::path& root, const std::string& name) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  ::localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &local);
  const std::string base = fmt::format("{}-{}", name.empty() ? "run" : name, stamp);
  std::filesystem::path dir = root / base;
  for (int n = 2; std::filesystem::exists(dir); ++n) dir = root / fmt::format("{}-{}", base, n);
  return dir;
}

}  // namespace dctrain
