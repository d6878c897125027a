// The live metrics: the Prometheus text of a snapshot, and the HTTP server
// that answers it (a real socket on 127.0.0.1, an ephemeral port).
#include "coordinator/program/metrics_server.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <regex>
#include <set>
#include <sstream>

#include "coordinator/live_metrics.h"
#include "tests/testing/http_get.h"

namespace dctrain {
namespace {

using testing::http_get;

LiveSnapshot sample_snapshot() {
  LiveSnapshot s;
  s.steps = 12;
  s.samples = 1234;
  s.tau = std::numeric_limits<double>::infinity();
  s.has_eval = true;
  s.eval_accuracy = 0.8125;
  s.eval_step = 10;
  WorkerLiveMetrics w;
  w.name = "w\"0";
  w.rank = 0;
  w.alive = true;
  w.slow_cause = "compute";
  for (double t : {0.0005, 0.003, 0.003, 0.7, 100.0}) w.micro_batch_compute.observe(t);
  w.step_compute.observe(0.25);  // on a bound: le is inclusive
  s.workers.push_back(w);
  return s;
}

TEST(LiveMetrics, HistogramsAreCumulativeWithInclusiveBoundsAndEveryFamilyIsDeclared) {
  const std::string text = prometheus_text(sample_snapshot());
  const std::string labels = "worker=\"w\\\"0\",rank=\"0\"";
  auto has = [&](const std::string& line) { return text.find(line + "\n") != std::string::npos; };
  EXPECT_TRUE(has("dctrain_steps_total 12")) << text;
  EXPECT_TRUE(has("dctrain_samples_total 1234")) << text;
  EXPECT_TRUE(has("dctrain_tau_seconds +Inf")) << text;
  EXPECT_TRUE(has("dctrain_eval_accuracy_ratio 0.8125")) << text;
  EXPECT_TRUE(has("dctrain_loss NaN")) << "no step yet\n" << text;
  EXPECT_TRUE(has("dctrain_worker_slow{" + labels + ",cause=\"compute\"} 1")) << text;
  const std::string mb = "dctrain_worker_micro_batch_compute_seconds";
  EXPECT_TRUE(has(mb + "_bucket{" + labels + ",le=\"0.001\"} 1")) << text;
  EXPECT_TRUE(has(mb + "_bucket{" + labels + ",le=\"0.0025\"} 1")) << text;
  EXPECT_TRUE(has(mb + "_bucket{" + labels + ",le=\"0.005\"} 3")) << text;
  EXPECT_TRUE(has(mb + "_bucket{" + labels + ",le=\"1\"} 4")) << text;
  EXPECT_TRUE(has(mb + "_bucket{" + labels + ",le=\"30\"} 4")) << text;
  EXPECT_TRUE(has(mb + "_bucket{" + labels + ",le=\"+Inf\"} 5")) << text;
  EXPECT_TRUE(has(mb + "_count{" + labels + "} 5")) << text;
  EXPECT_TRUE(has(mb + "_sum{" + labels + "} 100.7065")) << text;
  EXPECT_TRUE(has("dctrain_worker_step_compute_seconds_bucket{" + labels + ",le=\"0.25\"} 1"))
      << text;
  // Every sample belongs to a family declared before it with HELP and TYPE,
  // and every name has the dctrain_ prefix.
  std::set<std::string> declared;
  const std::regex help(R"(# HELP (dctrain_[a-z_]+) .+)"), type(R"(# TYPE (\S+) (\S+))");
  const std::regex sample(R"((dctrain_[a-z_]+)(\{[^}]*\})? (\S+))");
  std::istringstream lines(text);
  std::string line, last_help;
  while (std::getline(lines, line)) {
    std::smatch m;
    if (std::regex_match(line, m, help)) {
      last_help = m[1];
    } else if (std::regex_match(line, m, type)) {
      EXPECT_EQ(m[1], last_help) << line;
      EXPECT_TRUE(m[2] == "counter" || m[2] == "gauge" || m[2] == "histogram") << line;
      declared.insert(m[1]);
    } else {
      ASSERT_TRUE(std::regex_match(line, m, sample)) << line;
      std::string family = m[1];
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        if (!declared.contains(family) && family.ends_with(suffix))
          family.resize(family.size() - std::strlen(suffix));
      }
      EXPECT_TRUE(declared.contains(family)) << line;
    }
  }
  EXPECT_GE(declared.size(), 20u);
}

TEST(MetricsServer, ServesTheLatestSnapshotOnAnEphemeralLoopbackPort) {
  auto log =
      std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  MetricsServer server("127.0.0.1", 0, log);
  ASSERT_GT(server.port(), 0);
  EXPECT_EQ(server.url(), "http://127.0.0.1:" + std::to_string(server.port()) + "/metrics");

  auto before = http_get(server.port(), "/metrics");
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(before->status, 200);
  EXPECT_NE(before->body.find("dctrain_steps_total 0\n"), std::string::npos) << before->body;

  auto snapshot = std::make_shared<const LiveSnapshot>(sample_snapshot());
  server.publish(snapshot);
  auto after = http_get(server.port(), "/metrics");
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->status, 200);
  EXPECT_NE(after->headers.find("text/plain; version=0.0.4"), std::string::npos) << after->headers;
  EXPECT_EQ(after->body, prometheus_text(*snapshot));

  auto elsewhere = http_get(server.port(), "/");
  ASSERT_TRUE(elsewhere.has_value());
  EXPECT_EQ(elsewhere->status, 404);
  EXPECT_NE(elsewhere->body.find("scrape /metrics"), std::string::npos);
  auto post = http_get(server.port(), "/metrics", "POST");
  ASSERT_TRUE(post.has_value());
  EXPECT_EQ(post->status, 405);
}

TEST(MetricsServer, APortInUseOrABadAddressIsRefusedSayingHowToFix) {
  auto log =
      std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  MetricsServer first("127.0.0.1", 0, log);
  try {
    MetricsServer second("127.0.0.1", first.port(), log);
    FAIL() << "a second server on port " << first.port();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("--metrics-port"), std::string::npos) << e.what();
  }
  try {
    MetricsServer bad("localhost", 0, log);
    FAIL() << "a name, not a numeric address";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("numeric"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dctrain
