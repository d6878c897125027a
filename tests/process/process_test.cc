// The real programs over tcp://127.0.0.1 with ephemeral ports: equivalence
// with one process at tau = infinity, bit-for-bit reproducibility, drops and
// requeue with an exact ledger, a worker killed with SIGKILL and restarted,
// and garbage on the coordinator's port.
#include "tests/testing/process.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>

#include "comm/envelope.h"
#include "comm/framing.h"
#include "common/version.h"
#include "coordinator/planner.h"
#include "metrics/metrics_json.h"
#include "runtime/checkpoint.h"
#include "runtime/replica.h"
#include "runtime/run_config.h"
#include "runtime/setup.h"
#include "tests/testing/cluster.h"
#include "tests/testing/paths.h"

namespace dctrain {
namespace {

using namespace std::chrono_literals;
using testing::Cluster;
using testing::eventually;
using testing::Process;
using testing::read_text;
using testing::small_config;

TEST(Processes, TauInfinityWithThreeWorkersMatchesOneProcessAndEveryChecksumAgrees) {
  const int steps = 8;
  const std::string text = small_config(
      3, fmt::format("stop {{ max_steps: {} }}\ncheckpoint {{ every_steps: {} }}", steps, steps));
  Cluster cluster("equivalence", text, 3);
  cluster.start_coordinator();
  cluster.start_workers();
  cluster.expect_clean_finish();

  // Every step: three contributions, each from a replica identical to the
  // coordinator's; the final one is checked by each worker (exit code 0).
  const auto step_records = cluster.records().steps;
  ASSERT_EQ(step_records.size(), static_cast<size_t>(steps));
  for (const v1::StepRecord& r : step_records) {
    size_t ok = 0, not_ok = 0;
    for (const v1::WorkerStep& w : r.workers()) ++(w.checksum_ok() ? ok : not_ok);
    EXPECT_EQ(ok, 3u) << r.ShortDebugString();
    EXPECT_EQ(not_ok, 0u) << r.ShortDebugString();
  }
  EXPECT_EQ(cluster.summary().checksum_mismatches(), 0u);

  // One process on the same global batches (the plans are a function of the
  // ledger's seed), gradients accumulated micro-batch by micro-batch.
  v1::RunConfig config = parse_run_config(text, "equivalence");
  finalize_run_config(config);
  auto train = open_dataset(config, Split::kTrain, "");
  Replica single(make_model(model_spec(config, train->shape(), 1)), config.optimizer());
  Ledger ledger(train_samples(config, *train), config.seed(), true);
  const std::vector<uint32_t> ranks = {0, 1, 2};
  Batch batch;
  for (int step = 0; step < steps; ++step) {
    Model& model = single.model();
    model.gradients().zero();
    int64_t terms = 0;
    for (const WorkerPlan& plan : plan_step(ledger, ranks, step, 48, 8)) {
      for (const PlannedMicroBatch& mb : plan.micro_batches) {
        train->fill(mb.samples, SampleContext{config.seed(), mb.epoch, true}, batch);
        terms += model.train_micro_batch(batch).loss_terms;
        ledger.complete(mb.id);
      }
    }
    std::span<float> g = model.gradients().flat();
    for (float& v : g) v /= static_cast<float>(terms);
    single.apply_update(g, {});
  }
  Replica distributed(make_model(model_spec(config, train->shape(), 1)), config.optimizer());
  load_checkpoint_state(checkpoint_path(cluster.run_dir()), distributed);
  const auto a = single.model().parameters().flat();
  const auto b = distributed.model().parameters().flat();
  ASSERT_EQ(a.size(), b.size());
  double max_diff = 0.0, max_abs = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(static_cast<double>(a[i]) - b[i]));
    max_abs = std::max(max_abs, std::abs(static_cast<double>(a[i])));
  }
  EXPECT_LT(max_diff, 1e-5 * std::max(1.0, max_abs)) << "max |single - distributed| = " << max_diff;
  std::printf("max |single - distributed| = %g (largest parameter %g)\n", max_diff, max_abs);
}

TEST(Processes, SameSeedWithoutDelaysGivesTheSameLossCurveBitForBit) {
  auto run = [](const std::string& name) {
    Cluster cluster(name, small_config(2, "stop { max_steps: 10 }\ncheckpoint { every_steps: 10 }"),
                    2);
    cluster.start_coordinator();
    cluster.start_workers();
    cluster.expect_clean_finish();
    std::vector<double> losses;
    const MetricsRecords records = cluster.records();
    for (const v1::StepRecord& r : records.steps) losses.push_back(r.loss());
    for (const v1::EvalRecord& r : records.evals) losses.push_back(r.eval_loss());
    const std::string checkpoint = read_text(checkpoint_path(cluster.run_dir()));
    return std::make_pair(losses, checkpoint.substr(checkpoint.size() - 8));
  };
  const auto first = run("repeat-a");
  const auto second = run("repeat-b");
  ASSERT_EQ(first.first.size(), 12u);  // 10 steps, 2 evaluations
  EXPECT_EQ(first.first, second.first);
  EXPECT_NE(first.first.front(), first.first[9]) << "the loss should move";
}

TEST(Processes, DelaysPastTauDropMicroBatchesThatAreRequeuedAndTheLedgerIsExact) {
  // Each micro-batch sleeps 30 ms on top of its compute; tau 40 ms lets a
  // worker start two of its four micro-batches, so about half are dropped.
  Cluster cluster(
      "drops",
      small_config(3, "delay { kind: \"constant\" seconds: 0.03 }\nstop { max_epochs: 2 }",
                   "step { global_batch: 96 micro_batch: 8 tau: 0.04 }"),
      3);
  cluster.start_coordinator();
  cluster.start_workers();
  cluster.expect_clean_finish();
  const v1::RunSummary summary = cluster.summary();
  EXPECT_GT(summary.microbatches_dropped(), 0u) << summary.ShortDebugString();
  EXPECT_EQ(summary.samples_lost(), 0u);
  EXPECT_EQ(summary.samples(), 960u) << "2 epochs of 480 samples, each exactly once";
  EXPECT_EQ(summary.epochs_audited(), 2u);
  EXPECT_EQ(summary.audits_failed(), 0u);
  const MetricsRecords records = cluster.records();
  ASSERT_EQ(records.epochs.size(), 2u);
  for (const v1::EpochRecord& e : records.epochs) {
    EXPECT_TRUE(e.audit_ok()) << e.ShortDebugString();
    EXPECT_EQ(e.done(), 480u) << e.ShortDebugString();
    EXPECT_EQ(e.duplicated(), 0u) << e.ShortDebugString();
    EXPECT_EQ(e.missing(), 0u) << e.ShortDebugString();
  }
  bool requeued = false;
  for (const v1::StepRecord& r : records.steps) requeued |= r.requeued() != 0;
  EXPECT_TRUE(requeued);
}

TEST(Processes, WorkerKilledMidStepIsNamedNothingIsLostAndItsRestartRejoins) {
  Cluster cluster("sigkill",
                  small_config(3,
                               "delay { kind: \"constant\" seconds: 0.03 }\n"
                               "stop { max_epochs: 3 }"),
                  3);
  cluster.start_coordinator();
  cluster.start_workers();
  ASSERT_TRUE(eventually([&] { return cluster.records().steps.size() >= 3; }, 40s))
      << cluster.log();
  cluster.worker("w2").kill(SIGKILL);
  // Its connection closes with it: it is declared dead at once, not after
  // liveness.silence_seconds.
  const std::regex dead("worker 'w2' \\(rank \\d\\): its connection closed; declared dead now");
  ASSERT_TRUE(eventually([&] { return std::regex_search(cluster.log(), dead); }, 20s))
      << cluster.log();
  EXPECT_TRUE(std::regex_search(
      cluster.log(), std::regex("worker 'w2' \\(rank \\d\\) is out of step \\d+ because it died "
                                "\\(its connection closed\\); its \\d+ micro-batches \\(\\d+ "
                                "samples\\) are requeued")))
      << cluster.log();
  const size_t steps_without = cluster.records().steps.size();
  cluster.start_worker("w2");
  ASSERT_TRUE(eventually(
      [&] {
        const std::string log = cluster.log();
        return log.find("worker 'w2' joined as rank") != log.rfind("worker 'w2' joined as rank");
      },
      20s))
      << cluster.log();
  cluster.expect_clean_finish();
  const v1::RunSummary summary = cluster.summary();
  EXPECT_EQ(summary.samples_lost(), 0u);
  EXPECT_EQ(summary.samples(), 1440u) << "3 epochs of 480, each sample exactly once";
  EXPECT_EQ(summary.audits_failed(), 0u);
  EXPECT_EQ(summary.checksum_mismatches(), 0u);
  EXPECT_GT(summary.microbatches_orphaned(), 0u);
  // After the restart the run went on with three workers again.
  const auto steps = cluster.records().steps;
  ASSERT_GT(steps.size(), steps_without + 1);
  bool w2_contributed = false;
  for (const v1::WorkerStep& w : steps.back().workers()) {
    w2_contributed |= w.name() == "w2" && w.contributed();
  }
  EXPECT_TRUE(w2_contributed) << steps.back().ShortDebugString();
}

TEST(Processes, GarbageTruncatedAndWrongVersionMessagesAreLoggedAndTrainingGoesOn) {
  Cluster cluster(
      "garbage",
      small_config(2, "delay { kind: \"constant\" seconds: 0.01 }\nstop { max_steps: 25 }"), 2);
  cluster.start_coordinator();
  cluster.start_workers();
  ASSERT_TRUE(eventually([&] { return cluster.records().steps.size() >= 2; }, 40s))
      << cluster.log();

  zmq::context_t context(1);
  zmq::socket_t intruder(context, zmq::socket_type::dealer);
  intruder.set(zmq::sockopt::routing_id, std::string("intruder"));
  intruder.set(zmq::sockopt::linger, 0);
  intruder.connect(cluster.endpoint());
  intruder.send(zmq::buffer(std::string("\xde\xad\xbe\xef garbage")), zmq::send_flags::none);
  // A contribution whose gradient frame is cut short.
  Message contribution;
  contribution.envelope = make_envelope(1, "intruder");
  contribution.envelope.mutable_contribution()->set_samples(8);
  std::vector<float> gradient(1000, 0.5f);
  add_tensor(contribution, "gradient", gradient);
  std::vector<zmq::message_t> parts = encode(std::move(contribution));
  parts[1] = zmq::message_t(parts[1].data(), 100);
  for (size_t i = 0; i < parts.size(); ++i) {
    intruder.send(parts[i],
                  i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
  // A hello from another protocol version: refused with both versions named.
  Message hello;
  hello.envelope = make_envelope(0, "intruder");
  hello.envelope.set_protocol_version(kProtocolVersion + 1);
  hello.envelope.mutable_hello()->set_worker_name("intruder");
  for (zmq::message_t& p : encode(std::move(hello))) intruder.send(p, zmq::send_flags::none);
  zmq::message_t reply;
  intruder.set(zmq::sockopt::rcvtimeo, 10000);
  ASSERT_TRUE(intruder.recv(reply));
  Message refusal;
  std::vector<zmq::message_t> reply_parts;
  reply_parts.push_back(std::move(reply));
  ASSERT_FALSE(decode(std::move(reply_parts), refusal).has_value());
  ASSERT_EQ(refusal.envelope.body_case(), v1::Envelope::kRefusal);
  EXPECT_NE(refusal.envelope.refusal().reason().find(
                fmt::format("protocol version {}", kProtocolVersion + 1)),
            std::string::npos)
      << refusal.envelope.refusal().reason();

  // Raw bytes that are not even ZeroMQ's handshake.
  zmq::socket_t raw(context, zmq::socket_type::stream);
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(cluster.endpoint());
  std::this_thread::sleep_for(100ms);
  const std::string id = raw.get(zmq::sockopt::routing_id);
  raw.send(zmq::buffer(id), zmq::send_flags::sndmore);
  raw.send(zmq::buffer(std::string("GET / HTTP/1.0\r\n\r\n\x01\x02\x03")), zmq::send_flags::none);

  cluster.expect_clean_finish();
  const std::string log = cluster.log();
  EXPECT_NE(log.find("dropped a message from peer 'intruder': header frame"), std::string::npos)
      << log;
  EXPECT_NE(log.find("dropped a message from peer 'intruder': tensor 'gradient'"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("refused peer 'intruder'"), std::string::npos) << log;
  EXPECT_EQ(cluster.summary().steps(), 25u);
}

TEST(Processes, ResumeAfterACrashContinuesFromTheLastCheckpointExactlyAsAnUnbrokenRun) {
  // 30 ms of injected delay per micro-batch makes a step last ~0.1 s, so the
  // coordinator can be killed between checkpoints, with steps recorded after
  // the last one (the delay changes timing only, never the numbers).
  const std::string run =
      "stop { max_steps: 16 }\ncheckpoint { every_steps: 5 }\n"
      "delay { kind: \"constant\" seconds: 0.03 }";
  Cluster broken("resume-broken", small_config(2, run), 2);
  broken.start_coordinator();
  broken.start_workers();
  ASSERT_TRUE(eventually([&] { return broken.records().steps.size() >= 8; }, 60s))
      << broken.coordinator().output();
  broken.coordinator().kill(SIGKILL);
  ASSERT_TRUE(broken.coordinator().wait_for(10s).has_value());
  broken.worker("w0").kill(SIGKILL);
  broken.worker("w1").kill(SIGKILL);
  const size_t before = broken.records().steps.size();
  ASSERT_GE(before, 8u);
  ASSERT_LT(before, 16u) << "killed mid-run";
  ASSERT_TRUE(std::filesystem::exists(checkpoint_path(broken.run_dir())));

  // Resume the same run folder with fresh workers; it runs to step 16.
  testing::resume_run(broken.run_dir());
  const std::string log = broken.log();
  const size_t resumed_at = log.find("resuming at step ");
  ASSERT_NE(resumed_at, std::string::npos) << log;
  EXPECT_NE(log.find("records written after the checkpoint"), std::string::npos) << log;

  Cluster unbroken("resume-unbroken", small_config(2, run), 2);
  unbroken.start_coordinator();
  unbroken.start_workers();
  unbroken.expect_clean_finish();
  auto losses = [](const Cluster& c) {
    std::vector<std::pair<uint32_t, double>> out;
    for (const v1::StepRecord& r : c.records().steps) out.emplace_back(r.step(), r.loss());
    return out;
  };
  // Every step once, in order, with the unbroken run's losses; the evals
  // likewise (every 5 steps, and the final one).
  const auto a = losses(broken), b = losses(unbroken);
  ASSERT_EQ(a.size(), 16u);
  EXPECT_EQ(a, b);
  auto evals = [](const Cluster& c) {
    std::vector<std::pair<uint32_t, double>> out;
    for (const v1::EvalRecord& r : c.records().evals) out.emplace_back(r.step(), r.eval_loss());
    return out;
  };
  EXPECT_EQ(evals(broken), evals(unbroken));
}

TEST(Processes, LauncherRunsTheJobWithPrefixedLogsAndReportsFailure) {
  const testing::ScratchDir dir("launch");
  std::ofstream(dir / "run.cfg") << small_config(2, "stop { max_steps: 6 }");
  Process ok(
      testing::program("dctrain-launch"),
      {"--workers", "2", "--config", (dir / "run.cfg").string(), "--out", (dir / "run").string()},
      dir / "launch.out");
  ASSERT_EQ(ok.wait_for(60s), std::optional<int>(0)) << ok.output();
  const std::string out = ok.output();
  EXPECT_NE(out.find("[coordinator] "), std::string::npos);
  EXPECT_NE(out.find("[worker 0] "), std::string::npos);
  EXPECT_NE(out.find("[worker 1] "), std::string::npos);
  EXPECT_NE(out.find("final replica identical"), std::string::npos) << out;
  EXPECT_EQ(parse_summary(read_text(dir / "run" / "summary.json"), "summary.json").steps(), 6u);

  // A config the coordinator rejects: the launcher fails and says who failed.
  std::ofstream(dir / "bad.cfg") << small_config(2, "stop { max_steps: 6 }",
                                                 "step { global_batch: 48 micro_batch: 7 }");
  Process bad(
      testing::program("dctrain-launch"),
      {"--workers", "2", "--config", (dir / "bad.cfg").string(), "--out", (dir / "bad").string()},
      dir / "bad.out");
  const auto code = bad.wait_for(30s);
  ASSERT_TRUE(code.has_value());
  EXPECT_NE(*code, 0);
  EXPECT_NE(bad.output().find("micro_batch 7 does not divide"), std::string::npos) << bad.output();
  EXPECT_NE(bad.output().find("the coordinator exited with status 2"), std::string::npos)
      << bad.output();
}

TEST(Processes, LauncherStartsTheConfigsWorkersAndRefusesANegativeStepCount) {
  // Without --workers the config's count is started (its own default of 4
  // once won over `workers: 2`); --steps -5 is an error naming the flag,
  // not a silent "keep".
  const testing::ScratchDir dir("launch-workers");
  std::ofstream(dir / "run.cfg") << small_config(2, "stop { max_steps: 3 }");
  Process two(testing::program("dctrain-launch"),
              {"--config", (dir / "run.cfg").string(), "--out", (dir / "run").string()},
              dir / "two.out");
  ASSERT_EQ(two.wait_for(60s), std::optional<int>(0)) << two.output();
  EXPECT_NE(two.output().find("[worker 1] "), std::string::npos) << two.output();
  EXPECT_EQ(two.output().find("[worker 2] "), std::string::npos) << two.output();

  Process negative(
      testing::program("dctrain-launch"),
      {"--config", (dir / "run.cfg").string(), "--out", (dir / "neg").string(), "--steps", "-5"},
      dir / "negative.out");
  const auto code = negative.wait_for(30s);
  ASSERT_TRUE(code.has_value());
  EXPECT_NE(*code, 0);
  EXPECT_NE(negative.output().find("--steps"), std::string::npos) << negative.output();
  EXPECT_FALSE(std::filesystem::exists(dir / "neg")) << "nothing was started";
}

// The flags of a program's --help, "--name" each.
std::set<std::string> help_flags(const std::string& program, const std::filesystem::path& out) {
  Process help(testing::program(program), {"--help"}, out);
  EXPECT_EQ(help.wait_for(30s), std::optional<int>(0)) << help.output();
  std::set<std::string> flags;
  static const std::regex flag(R"(^\s+(?:-\w, )?(--[a-z][a-z-]*))");
  std::istringstream lines(help.output());
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, flag)) flags.insert(m[1].str());
  }
  return flags;
}

TEST(Processes, TheLauncherOffersEveryCoordinatorFlagItDoesNotSetItself) {
  // The launcher's flags were copied from the coordinator's by hand and
  // drifted (--metrics-address was missing). The launcher binds loopback
  // and makes the keys itself (--curve), so those it may leave out.
  const testing::ScratchDir dir("launch-flags");
  const std::set<std::string> coordinator = help_flags("dctrain-coordinator", dir / "c.out");
  const std::set<std::string> launcher = help_flags("dctrain-launch", dir / "l.out");
  ASSERT_GT(coordinator.size(), 8u);
  const std::set<std::string> set_by_the_launcher = {"--bind", "--secret-key", "--allowed-keys",
                                                     "--insecure", "--blas-info"};
  for (const std::string& flag : coordinator) {
    if (set_by_the_launcher.count(flag)) continue;
    EXPECT_TRUE(launcher.count(flag)) << "dctrain-launch has no " << flag;
  }
}

}  // namespace
}  // namespace dctrain
