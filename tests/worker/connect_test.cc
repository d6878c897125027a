// A worker and a coordinator that is late, absent or not a coordinator at
// all: the worker keeps retrying with a log line saying what it waits for,
// joins when the coordinator comes, and otherwise ends with exit status 4
// and a clear error after --connect-timeout. Real processes on 127.0.0.1.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <regex>

#include "tests/testing/paths.h"
#include "tests/testing/process.h"
#include "worker/worker.h"

namespace dctrain {
namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::Process;
using testing::read_text;

// A TCP socket on 127.0.0.1 with a port the kernel chose; listening or not.
class LocalPort {
 public:
  explicit LocalPort(bool listen) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);  // not inherited by the processes
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) return;
    socklen_t length = sizeof address;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    if (listen) ::listen(fd_, 16);
  }
  ~LocalPort() { release(); }
  LocalPort(const LocalPort&) = delete;
  LocalPort& operator=(const LocalPort&) = delete;

  int port() const { return port_; }
  std::string endpoint() const { return fmt::format("tcp://127.0.0.1:{}", port_); }
  // Frees the port for another process to bind.
  void release() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
};

std::filesystem::path test_dir(const std::string& name) {
  return testing::fresh_dir(fmt::format("connect-{}", name));
}

using testing::count;

TEST(Connect, WorkerStartedBeforeTheCoordinatorKeepsRetryingThenJoinsAndFinishes) {
  const auto dir = test_dir("late");
  std::ofstream(dir / "run.cfg") << R"(
name: "late-coordinator"
seed: 3
workers: 1
model { name: "mlp" }
dataset { kind: "synthetic" synthetic_samples: 400 train_limit: 96 test_limit: 50 }
optimizer { kind: "sgd" lr: 0.05 }
step { global_batch: 32 micro_batch: 8 tau: inf }
liveness { heartbeat_seconds: 0.2 silence_seconds: 3 grace_seconds: 1 join_timeout_seconds: 30 }
eval { every_steps: 3 batch: 50 }
stop { max_steps: 3 }
)";
  LocalPort port(false);  // reserved, not listening: connections are refused
  ASSERT_GT(port.port(), 0);
  Process worker(testing::program("dctrain-worker"),
                 {"--connect", port.endpoint(), "--name", "early", "--connect-timeout", "60"},
                 dir / "worker.out");
  // At least two retry lines, then the coordinator appears on that port.
  const std::string waiting =
      fmt::format("waiting for the coordinator at {}: no answer yet (attempt ", port.endpoint());
  ASSERT_TRUE(eventually([&] { return count(worker.output(), waiting) >= 2; }, 20s))
      << worker.output();
  EXPECT_FALSE(worker.wait_for(0ms).has_value()) << worker.output();
  EXPECT_TRUE(std::regex_search(worker.output(), std::regex(R"(\(attempt \d+, \d+ s of 60 s\))")))
      << worker.output();

  port.release();
  Process coordinator(testing::program("dctrain-coordinator"),
                      {"--config", (dir / "run.cfg").string(), "--bind", port.endpoint(), "--out",
                       (dir / "run").string()},
                      dir / "coordinator.out");
  const auto code = coordinator.wait_for(60s);
  ASSERT_TRUE(code.has_value()) << coordinator.output();
  EXPECT_EQ(*code, 0) << coordinator.output() << worker.output();
  EXPECT_EQ(worker.wait_for(15s), std::optional<int>(kWorkerDone)) << worker.output();
  const std::string out = worker.output();
  EXPECT_NE(out.find(fmt::format("the coordinator at {} answered after", port.endpoint())),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("final replica identical"), std::string::npos) << out;
  // One hello, one welcome: the retries did not make the coordinator see a restart.
  const std::string log = read_text(dir / "run" / "coordinator.log");
  EXPECT_EQ(count(log, "worker 'early' joined as rank 0"), 1u) << log;
  EXPECT_EQ(log.find("said hello again"), std::string::npos) << log;
  std::filesystem::remove_all(dir);
}

TEST(Connect, AnAddressWhereNothingListensEndsWithExitStatus4AfterTheTimeout) {
  const auto dir = test_dir("absent");
  LocalPort port(false);
  ASSERT_GT(port.port(), 0);
  Process worker(testing::program("dctrain-worker"),
                 {"--connect", port.endpoint(), "--name", "lonely", "--connect-timeout", "3"},
                 dir / "worker.out");
  const auto code = worker.wait_for(60s);
  ASSERT_TRUE(code.has_value()) << "still waiting after 60 s with --connect-timeout 3:\n"
                                << worker.output();
  EXPECT_EQ(*code, kWorkerNoCoordinator) << worker.output();
  const std::string out = worker.output();
  EXPECT_NE(
      out.find(fmt::format("no answer from the coordinator at {} within 3 s", port.endpoint())),
      std::string::npos)
      << out;
  EXPECT_NE(out.find("--connect-timeout"), std::string::npos) << out;
  EXPECT_GE(count(out, "waiting for the coordinator at"), 1u) << out;
  std::filesystem::remove_all(dir);
}

TEST(Connect, APortThatAcceptsButNeverAnswersAlsoEndsWithExitStatus4) {
  const auto dir = test_dir("silent");
  LocalPort port(true);  // the kernel accepts connections; nobody speaks
  ASSERT_GT(port.port(), 0);
  Process worker(testing::program("dctrain-worker"),
                 {"--connect", port.endpoint(), "--name", "ignored", "--connect-timeout", "2"},
                 dir / "worker.out");
  const auto code = worker.wait_for(60s);
  ASSERT_TRUE(code.has_value()) << worker.output();
  EXPECT_EQ(*code, kWorkerNoCoordinator) << worker.output();
  EXPECT_NE(worker.output().find("no answer from the coordinator at"), std::string::npos)
      << worker.output();
  std::filesystem::remove_all(dir);
}

TEST(Connect, ConnectTimeoutIsDocumentedInHelp) {
  const auto dir = test_dir("help");
  Process help(testing::program("dctrain-worker"), {"--help"}, dir / "help.out");
  ASSERT_EQ(help.wait_for(10s), std::optional<int>(0));
  const std::string out = help.output();
  std::filesystem::remove_all(dir);
  EXPECT_NE(out.find("--connect-timeout"), std::string::npos) << out;
  EXPECT_NE(out.find("=60"), std::string::npos) << out;
  EXPECT_NE(out.find("exit status 4"), std::string::npos) << out;
}

}  // namespace
}  // namespace dctrain
