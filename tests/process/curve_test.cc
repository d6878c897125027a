// The real programs with CURVE over tcp://127.0.0.1 (comm/security.h):
// the same loss curve bit for bit as without it; a worker with an unknown
// key is refused (logged once) while the run finishes with the allowed
// workers and loses nothing; a wiretap between the workers and the
// coordinator reads the run's config strings without CURVE and nothing with
// it; keys readable by others and plain binds reachable from other hosts
// are refused at start with the fix; over the data plane "exchange" the
// workers' links are CURVE too, with the same loss curve bit for bit.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "comm/security.h"
#include "metrics/metrics_json.h"
#include "tests/comm/tcp_tap.h"
#include "tests/testing/paths.h"
#include "tests/testing/process.h"
#include "worker/exit_codes.h"

namespace dctrain {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::eventually;
using testing::Process;
using testing::read_text;

// A string of the run's config that travels in every welcome.
const std::string kRunName = "curve-run-name-visible-in-welcomes";

std::string config_text(int workers, const std::string& stop) {
  return fmt::format(R"(
name: "{}"
seed: 17
workers: {}
model {{ name: "mlp" }}
dataset {{ kind: "synthetic" synthetic_samples: 2000 train_limit: 480 test_limit: 200 }}
optimizer {{ kind: "sgd" lr: 0.05 momentum: 0.9 }}
step {{ global_batch: 48 micro_batch: 8 tau: inf }}
liveness {{ heartbeat_seconds: 0.2 silence_seconds: 3 grace_seconds: 1 join_timeout_seconds: 40 }}
eval {{ every_steps: 5 batch: 100 }}
progress_seconds: 1
{}
)",
                     kRunName, workers, stop);
}

// A run folder, key pairs made with dctrain-keygen, and the processes.
class Job {
 public:
  Job(const std::string& name, const std::string& config) : dir_("curve-" + name) {
    fs::create_directories(dir_ / "allowed");
    std::ofstream(dir_ / "run.cfg") << config;
  }
  ~Job() {
    workers_.clear();
    coordinator_.reset();
  }

  // Runs dctrain-keygen for `names` into dir/keys.
  void keygen(const std::vector<std::string>& names) {
    std::vector<std::string> args = {"--dir", (dir_ / "keys").string()};
    args.insert(args.end(), names.begin(), names.end());
    Process p(testing::program("dctrain-keygen"), args, dir_ / "keygen.out");
    const auto code = p.wait_for(30s);
    ASSERT_TRUE(code.has_value());
    ASSERT_EQ(*code, 0) << p.output();
  }
  // Lets worker `name`'s key in.
  void allow(const std::string& name) {
    fs::copy_file(key(name + ".pub"), dir_ / "allowed" / (name + ".pub"));
  }
  fs::path key(const std::string& file) const { return dir_ / "keys" / file; }
  std::vector<std::string> coordinator_curve() const {
    return {"--secret-key", key("coordinator.key").string(), "--allowed-keys",
            (dir_ / "allowed").string()};
  }
  std::vector<std::string> worker_curve(const std::string& name) const {
    return {"--secret-key", key(name + ".key").string(), "--coordinator-key",
            key("coordinator.pub").string()};
  }

  // Starts the coordinator on 127.0.0.1 and waits for its endpoint (false
  // when it exited first).
  bool start_coordinator(const std::vector<std::string>& extra,
                         const std::string& bind = "tcp://127.0.0.1:*") {
    std::vector<std::string> args = {"--config", (dir_ / "run.cfg").string(), "--bind", bind,
                                     "--out",    run_dir().string()};
    args.insert(args.end(), extra.begin(), extra.end());
    coordinator_ = std::make_unique<Process>(testing::program("dctrain-coordinator"), args,
                                             dir_ / "coordinator.out");
    endpoint_ = testing::wait_for_endpoint(run_dir(), *coordinator_, 60s);
    return !endpoint_.empty();
  }
  uint16_t port() const {
    return static_cast<uint16_t>(std::stoi(endpoint_.substr(endpoint_.rfind(':') + 1)));
  }

  Process& start_worker(const std::string& name, const std::vector<std::string>& extra,
                        const std::string& connect = "", const std::string& timeout = "60") {
    std::vector<std::string> args = {
        "--connect", connect.empty() ? endpoint_ : connect, "--name", name, "--connect-timeout",
        timeout};
    args.insert(args.end(), extra.begin(), extra.end());
    workers_.push_back(std::make_unique<Process>(testing::program("dctrain-worker"), args,
                                                 dir_ / (name + ".out")));
    return *workers_.back();
  }

  // The coordinator and the first `finishing` workers exit 0.
  void expect_clean_finish(size_t finishing) {
    const auto code = coordinator_->wait_for(90s);
    ASSERT_TRUE(code.has_value()) << "coordinator still running:\n" << coordinator_->output();
    EXPECT_EQ(*code, 0) << coordinator_->output();
    for (size_t i = 0; i < finishing; ++i) {
      const auto w = workers_[i]->wait_for(30s);
      ASSERT_TRUE(w.has_value()) << workers_[i]->output();
      EXPECT_EQ(*w, 0) << workers_[i]->output();
    }
  }

  std::vector<double> losses() const {
    const MetricsRecords r = parse_metrics(read_text(run_dir() / "metrics.jsonl"), "metrics.jsonl");
    std::vector<double> out;
    for (const v1::StepRecord& s : r.steps) out.push_back(s.loss());
    for (const v1::EvalRecord& e : r.evals) out.push_back(e.eval_loss());
    return out;
  }
  v1::RunSummary summary() const {
    return parse_summary(read_text(run_dir() / "summary.json"), "summary.json");
  }
  std::string log() const { return read_text(run_dir() / "coordinator.log"); }
  fs::path run_dir() const { return dir_ / "run"; }
  Process& coordinator() { return *coordinator_; }
  Process& worker(size_t i) { return *workers_.at(i); }

 private:
  const testing::ScratchDir dir_;  // first: removed after the processes are gone
  std::string endpoint_;
  std::unique_ptr<Process> coordinator_;
  std::vector<std::unique_ptr<Process>> workers_;
};

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// Two workers, 10 steps, through a wiretap: the losses and what the tap saw.
// On the star, so that every gradient and update passes the tap (the
// exchange's links are tapped in tests/exchange/peer_test.cc).
std::pair<std::vector<double>, std::string> tapped_run(const std::string& name, bool curve) {
  Job job(name, config_text(2, "stop { max_steps: 10 }\ndata_plane { kind: \"star\" }"));
  job.keygen({"coordinator", "tapped-worker-0", "tapped-worker-1"});
  job.allow("tapped-worker-0");
  job.allow("tapped-worker-1");
  if (!job.start_coordinator(curve ? job.coordinator_curve() : std::vector<std::string>{})) {
    ADD_FAILURE() << job.coordinator().output();
    return {};
  }
  testing::TcpTap tap(job.port());
  for (const std::string w : {"tapped-worker-0", "tapped-worker-1"}) {
    job.start_worker(w, curve ? job.worker_curve(w) : std::vector<std::string>{}, tap.endpoint());
  }
  job.expect_clean_finish(2);
  if (curve) {
    EXPECT_NE(job.log().find("security: CURVE on every connection"), std::string::npos);
  }
  return {job.losses(), tap.captured()};
}

TEST(Curve, TheSameLossCurveBitForBitAndAWiretapReadsNothingOfIt) {
  const auto plain = tapped_run("plain", false);
  const auto secured = tapped_run("secured", true);
  ASSERT_EQ(plain.first.size(), 12u);  // 10 steps, 2 evaluations
  EXPECT_EQ(plain.first, secured.first);
  // Without CURVE the tap reads the config in the welcomes and the workers'
  // names; with CURVE none of it, though as many bytes went by. (Strings
  // long enough not to turn up by chance in megabytes of ciphertext.)
  EXPECT_GT(secured.second.size(), plain.second.size() / 2);
  for (const std::string& s :
       {kRunName, std::string("tapped-worker-0"), std::string("tapped-worker-1")}) {
    EXPECT_NE(plain.second.find(s), std::string::npos) << "'" << s << "' not in plain traffic";
    EXPECT_EQ(secured.second.find(s), std::string::npos) << "'" << s << "' in CURVE traffic";
  }
}

// Three workers over the data plane "exchange" (they sum among themselves):
// the losses, and whether every step was applied with every worker in.
std::vector<double> exchange_run(const std::string& name, bool curve) {
  Job job(name, config_text(3,
                            "stop { max_steps: 10 }\n"
                            "data_plane { kind: \"exchange\" timeout_seconds: 30 }"));
  const std::vector<std::string> workers = {"x-worker-0", "x-worker-1", "x-worker-2"};
  std::vector<std::string> names = {"coordinator"};
  names.insert(names.end(), workers.begin(), workers.end());
  job.keygen(names);
  for (const std::string& w : workers) job.allow(w);
  if (!job.start_coordinator(curve ? job.coordinator_curve() : std::vector<std::string>{})) {
    ADD_FAILURE() << job.coordinator().output();
    return {};
  }
  for (const std::string& w : workers) {
    job.start_worker(w, curve ? job.worker_curve(w) : std::vector<std::string>{});
  }
  job.expect_clean_finish(workers.size());
  EXPECT_NE(job.log().find("data plane: exchange"), std::string::npos) << job.log();
  for (size_t i = 0; i < workers.size(); ++i) {
    // The workers' exchange links are CURVE exactly when the control plane is.
    EXPECT_EQ(job.worker(i).output().find("exchange: CURVE on the data plane") != std::string::npos,
              curve)
        << job.worker(i).output();
  }
  const MetricsRecords records =
      parse_metrics(read_text(job.run_dir() / "metrics.jsonl"), "metrics.jsonl");
  for (const v1::StepRecord& r : records.steps) {
    EXPECT_TRUE(r.applied()) << r.ShortDebugString();
    EXPECT_EQ(r.orphaned(), 0u) << r.ShortDebugString();
  }
  EXPECT_EQ(job.summary().checksum_mismatches(), 0u);
  return job.losses();
}

TEST(Curve, TheExchangeDataPlaneOverCurveGivesTheSameLossCurveBitForBit) {
  const std::vector<double> plain = exchange_run("exchange-plain", false);
  const std::vector<double> secured = exchange_run("exchange-secured", true);
  ASSERT_EQ(plain.size(), 12u);  // 10 steps, 2 evaluations
  EXPECT_EQ(plain, secured);
}

TEST(Curve, AnUnknownKeyIsRefusedOnceAndTheRunFinishesWithTheAllowedWorkersLosingNothing) {
  Job job("refused", config_text(2, "stop { max_epochs: 2 }"));
  job.keygen({"coordinator", "w0", "w1", "intruder"});
  job.allow("w0");
  job.allow("w1");
  ASSERT_TRUE(job.start_coordinator(job.coordinator_curve())) << job.coordinator().output();
  job.start_worker("w0", job.worker_curve("w0"));
  job.start_worker("w1", job.worker_curve("w1"));
  // The intruder has a key pair and the coordinator's public key, but its
  // key is not in the allow-list.
  Process& intruder = job.start_worker("intruder", job.worker_curve("intruder"));
  const auto code = intruder.wait_for(60s);
  ASSERT_TRUE(code.has_value()) << intruder.output();
  EXPECT_EQ(*code, kWorkerRefused) << intruder.output();
  EXPECT_NE(intruder.output().find("refused this worker's CURVE key"), std::string::npos)
      << intruder.output();
  // A plain worker does not get in either.
  Process& plain = job.start_worker("plain", {}, "", "3");
  job.expect_clean_finish(2);
  const auto plain_code = plain.wait_for(30s);
  ASSERT_TRUE(plain_code.has_value());
  EXPECT_EQ(*plain_code, kWorkerNoCoordinator) << plain.output();

  const std::string log = job.log();
  const std::string intruder_key = load_public_key(job.key("intruder.pub"));
  EXPECT_EQ(count(log, "refused a connection from 127.0.0.1"), 1u) << log;
  EXPECT_EQ(count(log, intruder_key), 1u) << log;
  EXPECT_EQ(log.find("'intruder' joined"), std::string::npos) << log;
  EXPECT_EQ(log.find("'plain' joined"), std::string::npos) << log;
  const v1::RunSummary summary = job.summary();
  EXPECT_EQ(summary.samples_lost(), 0u);
  EXPECT_EQ(summary.samples(), 960u) << "2 epochs of 480 samples, each exactly once";
  EXPECT_EQ(summary.audits_failed(), 0u);
  EXPECT_EQ(summary.checksum_mismatches(), 0u);
}

TEST(Curve, UnsafeSetupsAreRefusedAtStartWithTheFix) {
  Job job("unsafe", config_text(1, "stop { max_steps: 1 }"));
  job.keygen({"coordinator", "w0"});
  job.allow("w0");
  // A secret key others may read.
  ASSERT_EQ(::chmod(job.key("coordinator.key").c_str(), 0644), 0);
  EXPECT_FALSE(job.start_coordinator(job.coordinator_curve()));
  EXPECT_EQ(job.coordinator().wait_for(30s), std::optional<int>(2));
  EXPECT_NE(job.coordinator().output().find("chmod 600"), std::string::npos)
      << job.coordinator().output();
  const std::string secret = read_text(job.key("coordinator.key"));
  const std::string secret_line = secret.substr(secret.rfind('\n', secret.size() - 2) + 1, 40);
  EXPECT_EQ(job.coordinator().output().find(secret_line), std::string::npos);
  ASSERT_EQ(::chmod(job.key("coordinator.key").c_str(), 0600), 0);
  // Plain TCP on every interface needs --insecure.
  EXPECT_FALSE(job.start_coordinator({}, "tcp://0.0.0.0:*"));
  EXPECT_EQ(job.coordinator().wait_for(30s), std::optional<int>(2));
  EXPECT_NE(job.coordinator().output().find("--insecure"), std::string::npos)
      << job.coordinator().output();
  ASSERT_TRUE(job.start_coordinator({"--insecure"}, "tcp://0.0.0.0:*"))
      << job.coordinator().output();
  EXPECT_NE(job.log().find("security: plain TCP on 'tcp://0.0.0.0:*'"), std::string::npos)
      << job.log();
  job.coordinator().kill(SIGTERM);
  EXPECT_TRUE(job.coordinator().wait_for(30s).has_value());
}

}  // namespace
}  // namespace dctrain
