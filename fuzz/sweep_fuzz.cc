// The experiment sweep reader (tools/experiment/sweep): any text is either
// refused with std::runtime_error (parse error with line and column, or the
// list of problems) or planned into cases, each a finalized run config.
// The configs a sweep names are read from a scratch folder holding the
// repository's experiments/*.cfg. Properties: every planned case's config
// is valid, and case names are unique.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <string>

#include "fuzz/harness.h"
#include "runtime/run_config.h"
#include "tools/experiment/sweep.h"

namespace dctrain::fuzz {
namespace {

std::filesystem::path sweep_dir() {
  const std::filesystem::path dir = scratch_dir("sweep");
  for (const auto& entry : std::filesystem::directory_iterator(
           std::filesystem::path(DCTRAIN_SOURCE_DIR) / "experiments")) {
    if (entry.path().extension() == ".cfg") {
      std::filesystem::copy_file(entry.path(), dir / entry.path().filename());
    }
  }
  return dir;
}

// Plans only sweeps of a size a person would run, whose configs are files
// of the scratch folder (a path elsewhere, /dev/zero say, reads forever).
bool plannable(const v1::Sweep& sweep) {
  for (const std::string& c : sweep.configs()) {
    if (c.find('/') != std::string::npos || c.empty() || c[0] == '.') return false;
  }
  const auto at_least_one = [](int n) { return static_cast<size_t>(n > 0 ? n : 1); };
  const size_t cases = at_least_one(sweep.configs_size()) * at_least_one(sweep.workers_size()) *
                       at_least_one(sweep.delays_size()) * at_least_one(sweep.seeds_size()) *
                       (1 + at_least_one(sweep.taus_size()) * at_least_one(sweep.requeue_size()));
  return cases <= 512;
}

}  // namespace
}  // namespace dctrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dctrain;
  static const std::filesystem::path dir = fuzz::sweep_dir();  // once per process
  const std::string text(reinterpret_cast<const char*>(data), size);
  v1::Sweep sweep;
  try {
    sweep = parse_sweep(text, "fuzz.sweep");
  } catch (const std::runtime_error&) {
    return 0;
  }
  for (const std::string& t : sweep.taus()) {
    try {
      (void)parse_tau_policy(t);
    } catch (const std::invalid_argument&) {
    }
  }
  if (!fuzz::plannable(sweep)) return 0;
  SweepPlan plan;
  try {
    plan = plan_sweep(sweep, dir, "fuzz");
  } catch (const std::runtime_error&) {
    return 0;
  }
  std::set<std::string> names;
  for (const SweepCase& c : plan.cases) {
    if (!names.insert(c.info.case_name()).second) {
      std::fprintf(stderr, "case '%s' planned twice\n", c.info.case_name().c_str());
      std::abort();
    }
    v1::RunConfig check = c.config;
    try {
      finalize_run_config(check);
    } catch (const std::invalid_argument& e) {
      std::fprintf(stderr, "case '%s' was planned with an invalid config: %s\n",
                   c.info.case_name().c_str(), e.what());
      std::abort();
    }
  }
  return 0;
}
