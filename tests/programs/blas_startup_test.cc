// The BLAS core check at start-up, in real processes: a user's
// OPENBLAS_CORETYPE is respected and said so, a program left alone runs once
// on the core the decision names, the re-execution onto a wider core happens
// once and only once (also when the library ignores the variable), and
// summary.json records every process's core and sgemm figure.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "common/blas_runtime.h"
#include "metrics/metrics_json.h"

namespace dctrain {
namespace {

const std::string kBin = DCTRAIN_BIN_DIR;
const std::string kProbe = DCTRAIN_BLAS_PROBE;

struct Result {
  int status = -1;
  std::string output;
};

// Runs a shell command line (stdout and stderr together), at most 120 s.
Result run(const std::string& command) {
  Result result;
  FILE* pipe = popen(("timeout 120 " + command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer{};
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    result.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// The environment of a process the tests start: without either variable, or
// with OPENBLAS_CORETYPE set to `coretype`.
std::string env(const std::string& coretype = "") {
  return "env -u OPENBLAS_CORETYPE -u DCTRAIN_BLAS_DETECTED_CORE" +
         (coretype.empty() ? std::string() : " OPENBLAS_CORETYPE=" + coretype) + " ";
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
    const Result r = run(env("Prescott") + kBin + "/" + program + " --blas-info");
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
  const Result probe = run(env() + kProbe);
  ASSERT_EQ(probe.status, 0) << probe.output;
  const std::regex first_image("image pid=[0-9]+ reported=(\\S+) coretype=\\(unset\\)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(probe.output, m, first_image)) << probe.output;
  const std::string reported = m[1];
  const BlasCoreChoice choice = choose_blas_core(reported, cpu_features(), std::nullopt);
  EXPECT_EQ(lines_with(probe.output, "image pid=").size(), choice.override ? 2u : 1u)
      << probe.output;

  const Result r = run(env() + kBin + "/dctrain-worker --blas-info");
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
  const Result r = run(env() + kProbe + " Prescott");
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
  const Result r = run(env() + kProbe + " Prescott always");
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
  const Result r = run(env("Prescott") + kProbe + " Prescott always");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(lines_with(r.output, "image pid=").size(), 1u) << r.output;
  EXPECT_NE(r.output.find("core Prescott (set by OPENBLAS_CORETYPE=Prescott)"), std::string::npos)
      << r.output;
}

TEST(BlasStartup, SummaryRecordsTheCoreAndSgemmFigureOfEveryProcess) {
  const auto dir =
      std::filesystem::temp_directory_path() / fmt::format("dctrain-blas-{}", ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
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
  const Result r = run(env("Prescott") + kBin + "/dctrain-launch --workers 2 --config " +
                       (dir / "run.cfg").string() + " --out " + (dir / "run").string());
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* who : {"[coordinator] ", "[worker 0] ", "[worker 1] "}) {
    const auto lines = lines_with(r.output, std::string(who));
    size_t said = 0;
    for (const std::string& line : lines) {
      said += line.find("core Prescott (set by OPENBLAS_CORETYPE=Prescott)") != std::string::npos;
    }
    EXPECT_EQ(said, 1u) << who << "\n" << r.output;
  }
  std::ifstream in(dir / "run" / "summary.json");
  std::stringstream text;
  text << in.rdbuf();
  const v1::RunSummary summary = parse_summary(text.str(), "summary.json");
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
  ASSERT_TRUE(summary.has_blas()) << text.str();
  expect_prescott(summary.blas());
  for (const char* name : {"worker-0", "worker-1"}) {
    // Its per_worker entry (it may be listed again under slow_workers, with a cause).
    std::vector<const v1::PerWorkerTotals*> entries;
    for (const v1::PerWorkerTotals& w : summary.per_worker()) {
      if (w.name() == name) entries.push_back(&w);
    }
    ASSERT_EQ(entries.size(), 1u) << text.str();
    ASSERT_TRUE(entries.front()->has_blas()) << text.str();
    expect_prescott(entries.front()->blas());
  }
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dctrain
