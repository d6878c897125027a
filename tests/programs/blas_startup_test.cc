// The BLAS core check at start-up, in real processes: a user's
// OPENBLAS_CORETYPE is respected and said so, a program left alone runs once
// on the core the decision names, the re-execution onto a wider core happens
// once and only once (also when the library ignores the variable), and
// summary.json records every process's core and sgemm figure.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "common/blas_runtime.h"
#include "common/child_process.h"
#include "common/files.h"
#include "metrics/metrics_json.h"
#include "tests/testing/paths.h"

namespace dctrain {
namespace {

const std::string kProbe = DCTRAIN_BLAS_PROBE;

struct Result {
  int status = -1;  // the shell's number; 124 when it ran out of time
  std::string output;
};

// Runs `argv` (stdout and stderr together), at most 120 s, in an
// environment without OPENBLAS_CORETYPE and DCTRAIN_BLAS_DETECTED_CORE, or
// with OPENBLAS_CORETYPE set to `coretype`.
Result run(std::vector<std::string> argv, const std::string& coretype = "") {
  ChildOptions options;
  options.argv = std::move(argv);
  options.unset_environment = {"OPENBLAS_CORETYPE", "DCTRAIN_BLAS_DETECTED_CORE"};
  if (!coretype.empty()) options.set_environment = {{"OPENBLAS_CORETYPE", coretype}};
  const CommandResult r = run_command(std::move(options), std::chrono::seconds(120));
  Result result{r.timed_out ? 124 : r.status.shell_code(), r.output};
  if (r.timed_out) result.output += "\n(killed: still running after 120 s)";
  return result;
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

std::vector<std::string> lines_with(const std::string& text, const std::string& part) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find(part) != std::string::npos) out.push_back(line);
  }
  return out;
}

TEST(BlasStartup, ProgramsRespectTheUsersCoretypeAndSaySo) {
  for (const char* program : {"dctrain-worker", "dctrain-coordinator"}) {
    const Result r = run({testing::program(program), "--blas-info"}, "Prescott");
    EXPECT_EQ(r.status, 0) << program << ":\n" << r.output;
    EXPECT_EQ(count(r.output, "BLAS: OpenBLAS "), 1u) << r.output;
    EXPECT_NE(r.output.find("core Prescott (set by OPENBLAS_CORETYPE=Prescott), 1 thread; CPU "),
              std::string::npos)
        << program << ":\n"
        << r.output;
    EXPECT_EQ(r.output.find("chosen"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("BLAS: sgemm 512^3, 1 thread: "), std::string::npos) << r.output;
  }
}

TEST(BlasStartup, LeftAloneTheWorkerRunsOnceOnTheCoreTheDecisionNames) {
  // What the library picks by itself on this host (the probe's first image
  // reports it before anything is decided), and what the decision makes of it.
  const Result probe = run({kProbe});
  ASSERT_EQ(probe.status, 0) << probe.output;
  const std::regex first_image("image pid=[0-9]+ reported=(\\S+) coretype=\\(unset\\)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(probe.output, m, first_image)) << probe.output;
  const std::string reported = m[1];
  const BlasCoreChoice choice = choose_blas_core(reported, cpu_features(), std::nullopt);
  EXPECT_EQ(lines_with(probe.output, "image pid=").size(), choice.override ? 2u : 1u)
      << probe.output;

  const Result r = run({testing::program("dctrain-worker"), "--blas-info"});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count(r.output, "BLAS: OpenBLAS "), 1u) << r.output;
  const std::string expected = choice.override
                                   ? fmt::format("core {} (chosen: {})", choice.core, choice.why)
                                   : fmt::format("core {} (as detected)", reported);
  EXPECT_NE(r.output.find(expected), std::string::npos) << "expected '" << expected << "' in:\n"
                                                        << r.output;
  std::printf("this host, left alone: %s\n", lines_with(r.output, "BLAS:").front().c_str());
}

TEST(BlasStartup, AFallbackCoreIsReplacedByReExecutingOnce) {
  // The library "reports" Prescott while OPENBLAS_CORETYPE is unset.
  const CpuFeatures cpu = cpu_features();
  const BlasCoreChoice choice = choose_blas_core("Prescott", cpu, std::nullopt);
  const Result r = run({kProbe, "Prescott"});
  ASSERT_EQ(r.status, 0) << r.output;
  const std::vector<std::string> images = lines_with(r.output, "image pid=");
  if (!choice.override) {
    // An SSE-only CPU: nothing wider to run.
    EXPECT_EQ(images.size(), 1u) << r.output;
    EXPECT_NE(r.output.find("core Prescott (as detected)"), std::string::npos) << r.output;
    return;
  }
  ASSERT_EQ(images.size(), 2u) << "one re-execution, no more:\n" << r.output;
  // execv keeps the process: same pid, now with the variable set, and the
  // real library runs the core it names.
  const std::string pid = images[0].substr(0, images[0].find(' ', 6));
  EXPECT_EQ(images[1].rfind(pid + " ", 0), 0u) << r.output;
  EXPECT_NE(images[0].find("coretype=(unset)"), std::string::npos) << r.output;
  EXPECT_NE(images[1].find(fmt::format("reported={} coretype={}", choice.core, choice.core)),
            std::string::npos)
      << r.output;
  EXPECT_NE(
      r.output.find(fmt::format("core {} (chosen: the library reported Prescott on an {} CPU)",
                                choice.core, describe(cpu))),
      std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("warning:"), std::string::npos) << r.output;
}

TEST(BlasStartup, ALibraryThatIgnoresTheVariableCannotMakeItLoop) {
  const CpuFeatures cpu = cpu_features();
  const BlasCoreChoice choice = choose_blas_core("Prescott", cpu, std::nullopt);
  if (!choice.override) GTEST_SKIP() << "an SSE-only CPU: no re-execution to guard";
  // The library "reports" Prescott whatever OPENBLAS_CORETYPE says.
  const Result r = run({kProbe, "Prescott", "always"});
  ASSERT_EQ(r.status, 0) << "a loop would have run into the time limit:\n" << r.output;
  EXPECT_EQ(lines_with(r.output, "image pid=").size(), 2u) << r.output;
  EXPECT_NE(r.output.find("core Prescott (chosen: the library reported Prescott"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(fmt::format("warning: OPENBLAS_CORETYPE={} but the library runs its "
                                      "Prescott kernels",
                                      choice.core)),
            std::string::npos)
      << r.output;
}

TEST(BlasStartup, TheUsersValueIsNeverOverriddenEvenOnAFallbackCore) {
  const Result r = run({kProbe, "Prescott", "always"}, "Prescott");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(lines_with(r.output, "image pid=").size(), 1u) << r.output;
  EXPECT_NE(r.output.find("core Prescott (set by OPENBLAS_CORETYPE=Prescott)"), std::string::npos)
      << r.output;
}

TEST(BlasStartup, SummaryRecordsTheCoreAndSgemmFigureOfEveryProcess) {
  const testing::ScratchDir dir("blas");
  std::ofstream(dir / "run.cfg") << R"(
name: "blas"
seed: 3
workers: 2
model { name: "mlp" }
dataset { kind: "synthetic" synthetic_samples: 600 train_limit: 192 test_limit: 64 }
optimizer { kind: "sgd" lr: 0.05 }
step { global_batch: 32 micro_batch: 8 tau: inf }
stop { max_steps: 4 }
eval { every_steps: 4 batch: 64 }
)";
  // The launcher passes the environment on to the coordinator and the workers.
  const Result r = run({testing::program("dctrain-launch"), "--workers", "2", "--config",
                        (dir / "run.cfg").string(), "--out", (dir / "run").string()},
                       "Prescott");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* who : {"[coordinator] ", "[worker 0] ", "[worker 1] "}) {
    const auto lines = lines_with(r.output, std::string(who));
    size_t said = 0;
    for (const std::string& line : lines) {
      said += line.find("core Prescott (set by OPENBLAS_CORETYPE=Prescott)") != std::string::npos;
    }
    EXPECT_EQ(said, 1u) << who << "\n" << r.output;
  }
  const std::string text = read_file_if_present(dir / "run" / "summary.json").value_or("");
  const v1::RunSummary summary = parse_summary(text, "summary.json");
  const auto expect_prescott = [](const v1::BlasInfo& blas) {
    EXPECT_TRUE(std::regex_match(blas.library(), std::regex("OpenBLAS [0-9.]+")))
        << blas.ShortDebugString();
    EXPECT_EQ(blas.core(), "Prescott");
    EXPECT_EQ(blas.how(), "environment");
    EXPECT_EQ(blas.detected_core(), "Prescott");
    EXPECT_EQ(blas.coretype(), "Prescott");
    EXPECT_FALSE(blas.cpu_model().empty());
    EXPECT_FALSE(blas.cpu_features().empty());
    EXPECT_EQ(blas.threads(), 1u);
    EXPECT_EQ(blas.sgemm_size(), 512u);
    EXPECT_EQ(blas.sgemm_threads(), 1u);
    EXPECT_GT(blas.sgemm_gflops(), 0.0) << blas.ShortDebugString();
    EXPECT_EQ(blas.warning(), "") << "no warning";
  };
  // The coordinator's own, at the top level.
  ASSERT_TRUE(summary.has_blas()) << text;
  expect_prescott(summary.blas());
  for (const char* name : {"worker-0", "worker-1"}) {
    // Its per_worker entry (it may be listed again under slow_workers, with a cause).
    std::vector<const v1::PerWorkerTotals*> entries;
    for (const v1::PerWorkerTotals& w : summary.per_worker()) {
      if (w.name() == name) entries.push_back(&w);
    }
    ASSERT_EQ(entries.size(), 1u) << text;
    ASSERT_TRUE(entries.front()->has_blas()) << text;
    expect_prescott(entries.front()->blas());
  }
}

}  // namespace
}  // namespace dctrain
