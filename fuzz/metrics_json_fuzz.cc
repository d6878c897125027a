// The run folder's JSON readers (metrics/metrics_json): metrics.jsonl lines
// and summary.json. Any text is either read or refused with
// std::runtime_error naming the origin. Property: the records read print
// and read back to as many records of each kind.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "metrics/metrics_json.h"

namespace dctrain::fuzz {
namespace {

void check_reprint(const MetricsRecords& records) {
  std::string text;
  for (const auto& r : records.steps) text += metrics_line(r);
  for (const auto& r : records.evals) text += metrics_line(r);
  for (const auto& r : records.epochs) text += metrics_line(r);
  for (const auto& r : records.taus) text += metrics_line(r);
  MetricsRecords again;
  try {
    again = parse_metrics(text, "reprinted.jsonl");
  } catch (const std::runtime_error& e) {
    std::fprintf(stderr, "reprinted records do not read back: %s\n%s\n", e.what(), text.c_str());
    std::abort();
  }
  if (again.steps.size() != records.steps.size() || again.evals.size() != records.evals.size() ||
      again.epochs.size() != records.epochs.size() || again.taus.size() != records.taus.size()) {
    std::fprintf(stderr, "reprinted records read back as other records:\n%s\n", text.c_str());
    std::abort();
  }
}

}  // namespace
}  // namespace dctrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dctrain;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    fuzz::check_reprint(parse_metrics(text, "metrics.jsonl"));
  } catch (const std::runtime_error&) {
  }
  // Each line on its own, as resume trims a metrics.jsonl.
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    (void)parse_record_header(text.substr(begin, end - begin));
    begin = end + 1;
  }
  v1::RunSummary summary;
  try {
    summary = parse_summary(text, "summary.json");
  } catch (const std::runtime_error&) {
    return 0;
  }
  const std::string printed = summary_text(summary);
  try {
    (void)parse_summary(printed, "reprinted summary.json");
  } catch (const std::runtime_error& e) {
    std::fprintf(stderr, "a reprinted summary does not read back: %s\n%s\n", e.what(),
                 printed.c_str());
    std::abort();
  }
  return 0;
}
