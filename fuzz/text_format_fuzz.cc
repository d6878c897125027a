// The run-config reader (runtime/text_format, runtime/run_config): any text
// is either refused with std::runtime_error (a parse error with
// file:line:column) or becomes a config; a config gets its defaults and is
// validated (problems listed, never thrown from validate()); a valid one is
// printed as config.cfg is written. Property: printing is stable, the
// printed text parses back to a config that prints the same.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "runtime/run_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dctrain;
  const std::string text(reinterpret_cast<const char*>(data), size);
  v1::RunConfig config;
  try {
    config = parse_run_config(text, "fuzz.cfg");
  } catch (const std::runtime_error&) {
    return 0;
  }
  const std::string parsed = to_text(config);
  apply_defaults(config);
  const std::vector<std::string> problems = validate(config);
  const std::string printed = to_text(config);
  for (const std::string& origin_text : {parsed, printed}) {
    v1::RunConfig again;
    try {
      again = parse_run_config(origin_text, "config.cfg");
    } catch (const std::runtime_error& e) {
      std::fprintf(stderr, "a printed config does not parse back: %s\n--- text:\n%s\n", e.what(),
                   origin_text.c_str());
      std::abort();
    }
    if (to_text(again) != origin_text) {
      std::fprintf(stderr, "print + parse + print changed the config:\n%s\n--- became:\n%s\n",
                   origin_text.c_str(), to_text(again).c_str());
      std::abort();
    }
  }
  if (problems.empty()) {
    // As the coordinator's flags do on a valid config.
    for (const char* tau : {"auto", "inf", "0.25"}) {
      v1::StepConfig step = config.step();
      apply_tau_option(tau, step);
    }
  }
  return 0;
}
