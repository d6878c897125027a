#include "tools/runs/run_folder.h"

#include <fmt/format.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "common/files.h"
#include "runtime/run_config.h"

namespace dctrain {

namespace fs = std::filesystem;
using google::protobuf::Struct;
using google::protobuf::Value;

namespace {

Struct parse_object(const std::string& json, const std::string& origin) {
  Struct object;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &object);
  if (!status.ok()) {
    throw std::runtime_error(fmt::format("{}: not a JSON object: {} (was the file cut short?)",
                                         origin, status.ToString()));
  }
  return object;
}

const Value* field(const Struct& object, const std::string& key) {
  const auto it = object.fields().find(key);
  return it == object.fields().end() ? nullptr : &it->second;
}

// A number, or nothing for null / absent.
std::optional<double> maybe_number(const Struct& object, const std::string& key) {
  const Value* v = field(object, key);
  if (v == nullptr || v->kind_case() != Value::kNumberValue) return std::nullopt;
  return v->number_value();
}

double number(const Struct& object, const std::string& key, double fallback = 0.0) {
  return maybe_number(object, key).value_or(fallback);
}

uint64_t count(const Struct& object, const std::string& key) {
  return static_cast<uint64_t>(std::llround(number(object, key)));
}

std::string text(const Struct& object, const std::string& key) {
  const Value* v = field(object, key);
  return v != nullptr && v->kind_case() == Value::kStringValue ? v->string_value() : std::string();
}

bool boolean(const Struct& object, const std::string& key, bool fallback) {
  const Value* v = field(object, key);
  return v != nullptr && v->kind_case() == Value::kBoolValue ? v->bool_value() : fallback;
}

// tau is a number, or the string "inf".
double tau_value(const Struct& object) {
  const Value* v = field(object, "tau");
  if (v != nullptr && v->kind_case() == Value::kNumberValue) return v->number_value();
  return std::numeric_limits<double>::infinity();
}

}  // namespace

bool run_finished(const fs::path& dir) {
  return fs::is_regular_file(dir / "summary.json");
}

RunSummary parse_summary(const std::string& json, const std::string& origin) {
  const Struct o = parse_object(json, origin);
  RunSummary s;
  s.name = text(o, "name");
  s.final_eval_accuracy = maybe_number(o, "final_eval_accuracy");
  s.final_eval_loss = maybe_number(o, "final_eval_loss");
  s.time_to_target_seconds = maybe_number(o, "time_to_target_seconds");
  s.target_accuracy = maybe_number(o, "target_accuracy");
  s.wall_seconds = number(o, "wall_seconds");
  s.samples_per_second = number(o, "samples_per_second");
  s.drop_rate = number(o, "drop_rate");
  s.mean_step_seconds = number(o, "mean_step_seconds");
  s.mean_max_compute_seconds = number(o, "mean_max_compute_seconds");
  s.epochs = number(o, "epochs");
  s.steps = count(o, "steps");
  s.samples = count(o, "samples");
  s.samples_lost = count(o, "samples_lost");
  s.microbatches_completed = count(o, "microbatches_completed");
  s.microbatches_dropped = count(o, "microbatches_dropped");
  s.microbatches_orphaned = count(o, "microbatches_orphaned");
  s.workers = static_cast<uint32_t>(count(o, "workers"));
  s.tau = tau_value(o);
  s.requeue = boolean(o, "requeue", true);
  s.delay = text(o, "delay");
  s.stop_reason = text(o, "stop_reason");
  return s;
}

void parse_metrics(const std::string& jsonl, const std::string& origin,
                   std::vector<StepPoint>& steps, std::vector<EvalPoint>& evals) {
  std::istringstream in(jsonl);
  size_t line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.empty()) continue;
    // A run killed mid-write may leave a partial last line; every other line
    // must parse.
    if (in.peek() == std::char_traits<char>::eof() && line.back() != '}') break;
    const Struct o = parse_object(line, fmt::format("{}:{}", origin, line_number));
    const std::string type = text(o, "type");
    if (type == "step") {
      StepPoint p;
      p.step = count(o, "step");
      p.wall_seconds = number(o, "wall_seconds");
      p.step_seconds = number(o, "step_seconds");
      p.apply_seconds = number(o, "apply_seconds");
      p.tau = tau_value(o);
      p.samples = count(o, "samples");
      p.planned = count(o, "planned");
      p.completed = count(o, "completed");
      p.dropped = count(o, "dropped");
      p.orphaned = count(o, "orphaned");
      p.lost_samples = count(o, "lost_samples");
      const Value* workers = field(o, "workers");
      if (workers != nullptr && workers->kind_case() == Value::kListValue) {
        for (const Value& w : workers->list_value().values()) {
          if (w.kind_case() != Value::kStructValue) continue;
          const Struct& ws = w.struct_value();
          WorkerStepPoint wp;
          wp.rank = static_cast<uint32_t>(count(ws, "rank"));
          wp.contributed = boolean(ws, "contributed", false);
          wp.compute_seconds = number(ws, "compute_seconds");
          wp.completed = count(ws, "completed");
          wp.dropped = count(ws, "dropped");
          const Value* times = field(ws, "micro_batch_seconds");
          if (times != nullptr && times->kind_case() == Value::kListValue) {
            for (const Value& t : times->list_value().values()) {
              if (t.kind_case() == Value::kNumberValue)
                wp.micro_batch_seconds.push_back(t.number_value());
            }
          }
          p.workers.push_back(std::move(wp));
        }
      }
      steps.push_back(std::move(p));
    } else if (type == "eval") {
      EvalPoint e;
      e.step = count(o, "step");
      e.wall_seconds = number(o, "wall_seconds");
      e.accuracy = number(o, "eval_accuracy");
      e.loss = number(o, "eval_loss");
      evals.push_back(e);
    }
  }
}

v1::CaseInfo case_info_from_config(const v1::RunConfig& config, const std::string& folder_name) {
  v1::CaseInfo info;
  info.set_case_name(folder_name);
  info.set_model(config.name());
  info.set_workers(config.workers());
  info.set_delay(
      word(config.delay().kind() == v1::DELAY_UNSET ? v1::DELAY_NONE : config.delay().kind()));
  info.set_tau_policy(
      config.step().tau_policy() == v1::TAU_POLICY_AUTO ? "auto" : tau_text(config.step().tau()));
  info.set_tau_seconds(config.step().tau());
  info.set_requeue(requeue_enabled(config.step()));
  info.set_seed(config.seed());
  return info;
}

std::vector<fs::path> find_run_folders(const std::vector<fs::path>& paths) {
  std::vector<fs::path> found;
  for (const fs::path& path : paths) {
    if (!fs::is_directory(path)) {
      throw std::runtime_error(fmt::format(
          "'{}' is not a folder: pass run folders or a sweep's --out folder", path.string()));
    }
    if (run_finished(path)) {
      found.push_back(path);
      continue;
    }
    std::vector<fs::path> inside;
    size_t unfinished = 0;
    for (const fs::directory_entry& entry : fs::directory_iterator(path)) {
      if (!entry.is_directory()) continue;
      if (run_finished(entry.path())) {
        inside.push_back(entry.path());
      } else if (fs::exists(entry.path() / "config.cfg") || fs::exists(entry.path() / "case.txt")) {
        ++unfinished;
      }
    }
    if (inside.empty()) {
      throw std::runtime_error(fmt::format(
          "'{}' holds no finished run (no summary.json in it or in its subfolders{}): did the runs "
          "fail?",
          path.string(), unfinished ? fmt::format("; {} unfinished run folders", unfinished) : ""));
    }
    std::sort(inside.begin(), inside.end());
    found.insert(found.end(), inside.begin(), inside.end());
  }
  return found;
}

RunFolder read_run_folder(const fs::path& dir) {
  if (!run_finished(dir)) {
    throw std::runtime_error(
        fmt::format("'{}' is not a finished run folder: it has no summary.json (did the run fail "
                    "or is it still "
                    "running?)",
                    dir.string()));
  }
  RunFolder run;
  run.dir = dir;
  run.summary =
      parse_summary(read_text_file(dir / "summary.json"), (dir / "summary.json").string());
  run.config = parse_run_config(read_text_file(dir / "config.cfg"), (dir / "config.cfg").string());
  parse_metrics(read_text_file(dir / "metrics.jsonl"), (dir / "metrics.jsonl").string(), run.steps,
                run.evals);
  const fs::path case_file = dir / "case.txt";
  const std::string folder_name = fs::canonical(dir).filename().string();
  if (fs::is_regular_file(case_file)) {
    if (!google::protobuf::TextFormat::ParseFromString(read_text_file(case_file), &run.info)) {
      throw std::runtime_error(
          fmt::format("'{}' is not a dctrain.v1.CaseInfo in text format (proto/sweep.proto); "
                      "delete it to treat "
                      "the folder as a plain run",
                      case_file.string()));
    }
  } else {
    run.info = case_info_from_config(run.config, folder_name);
  }
  return run;
}

std::vector<double> worker_compute_times(const std::vector<StepPoint>& steps, size_t skip_steps) {
  std::vector<double> times;
  for (size_t i = skip_steps; i < steps.size(); ++i) {
    for (const WorkerStepPoint& w : steps[i].workers) {
      if (w.contributed) times.push_back(w.compute_seconds);
    }
  }
  return times;
}

size_t warmup_steps(size_t step_count) {
  return step_count < 5 ? 0 : 1;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) throw std::invalid_argument("percentile of no values");
  std::sort(values.begin(), values.end());
  const double position =
      std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, values.size() - 1);
  const double fraction = position - static_cast<double>(below);
  return values[below] + fraction * (values[above] - values[below]);
}

std::string tau_text(double tau) {
  return std::isfinite(tau) ? fmt::format("{:.4g}", tau) : "inf";
}

}  // namespace dctrain
