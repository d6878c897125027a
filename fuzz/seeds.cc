// dctrain-fuzz-seeds OUT_DIR: writes the fuzz targets' seed corpora, made
// of real messages and files rather than committed binaries. It runs the
// fuzz run (fuzz/harness.h) for real in this process, as
// tests/coordinator/coordinator_test.cc does: a coordinator with a recording
// outbox and three workers running the real session and trainer, messages
// passed between them until the run finishes. From that run:
//   coordinator/   the script of everything the workers sent it (hellos,
//                  readies, contributions with their gradient frames), and
//                  each step's prefix of it; the same of a run on the
//                  exchange, whose workers' side is played by hand (round
//                  reports with digests, sums)
//   session/       the script of everything worker 'a' was sent (welcome,
//                  plans, updates, bye), and a heartbeat / rejoin / refusal
//   envelope/      every kind of message, one per file
//   metrics_json/  the run's metrics.jsonl and summary.json
//   checkpoint/    the run's checkpoint (as is, and for checksum fix-up)
//   text_format/   the repository's run configs and the run's, as config.cfg
//   sweep/         the repository's sweeps
//   safetensors/   the run's model parameters as a safetensors file, with
//                  the run's config as metadata
#include <fmt/format.h>

#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <set>

#include "common/files.h"
#include "coordinator/coordinator.h"
#include "exchange/chunk.h"
#include "exchange/sum_sketch.h"
#include "fuzz/frames.h"
#include "fuzz/harness.h"
#include "runtime/checkpoint.h"
#include "runtime/safetensors.h"
#include "runtime/setup.h"
#include "tests/testing/exchange_script.h"
#include "tests/testing/fake_cluster.h"

namespace dctrain::fuzz {
namespace {

namespace fs = std::filesystem;

class Corpus {
 public:
  explicit Corpus(fs::path root) : root_(std::move(root)) {}
  void add(const std::string& target, const std::string& bytes) {
    const fs::path dir = root_ / target;
    fs::create_directories(dir);
    const size_t n = counts_[target]++;
    std::ofstream out(dir / fmt::format("seed-{:03}", n), std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw std::runtime_error(fmt::format("cannot write a seed under '{}'", dir.string()));
  }
  size_t total() const {
    size_t n = 0;
    for (const auto& [target, count] : counts_) n += count;
    return n;
  }

 private:
  fs::path root_;
  std::map<std::string, size_t> counts_;
};

// One message in the `parts` scheme (the envelope target's input).
std::string as_parts(const Message& message) {
  std::string out;
  write_parts(out, encode(testing::copy_of(message)));
  return out;
}

void add_script_action(std::string& script, const std::string& peer, const Message& message,
                       double advance) {
  const std::vector<zmq::message_t> parts = encode(testing::copy_of(message));
  const uint8_t index = peer == "a" ? 0 : peer == "b" ? 1 : peer == "c" ? 2 : 3;
  write_action(script, Kind::kMessage, index, advance, &parts);
}

// The real run. Returns the coordinator's and worker a's scripts.
struct Recorded {
  std::string coordinator_script;
  std::vector<std::string> coordinator_prefixes;  // up to the end of each step
  std::string session_script;
  std::set<v1::Envelope::BodyCase> kinds;
};

// What a worker answers a message of the coordinator's, into `send`;
// `parameters` is the coordinator's replica's checksum then.
using Answer =
    std::function<void(const std::string& name, testing::FakeWorker& worker, const Message& m,
                       uint64_t parameters, const std::function<void(const Message&)>& send)>;

// Runs `config` for real with workers a, b, c (their hellos from `hello`,
// their answers from `answer`) until the coordinator finishes, recording
// what they sent it and what a was sent.
Recorded record(Corpus& corpus, v1::RunConfig config, const fs::path& run_dir,
                const std::function<Message(testing::FakeWorker&)>& hello, const Answer& answer) {
  const std::unique_ptr<Dataset> train = open_dataset(config, Split::kTrain, "");
  const uint64_t train_size = train_samples(config, *train);
  resolve_step_budget(config, train_size);
  Replica replica(testing::softmax_for(config), config.optimizer());
  testing::RecordingOutbox outbox;
  double now = 0.0;
  CoordinatorSetup setup{config, train_size, run_dir, std::nullopt, std::nullopt};
  setup.draw_round_check = [] { return kSketchSeed; };  // as the fuzzed coordinator's
  setup.wall_clock = [] { return kWallClockMicros; };
  Coordinator coordinator(setup, replica, nullptr, outbox, quiet_logger(), [&now] { return now; });
  std::map<std::string, testing::FakeWorker> workers;
  for (const char* name : {"a", "b", "c"}) workers.emplace(name, testing::FakeWorker(name, *train));

  Recorded r;
  write_action(r.session_script, Kind::kEvent, static_cast<uint8_t>(ConnectionEvent::kConnected),
               0.0);
  const auto to_coordinator = [&](const std::string& peer, const Message& m) {
    if (r.kinds.insert(m.envelope.body_case()).second) corpus.add("envelope", as_parts(m));
    add_script_action(r.coordinator_script, peer, m, 0.01);
    now += 0.01;
    coordinator.handle(testing::as_received(peer, testing::copy_of(m)), now);
  };
  for (const char* name : {"a", "b", "c"}) to_coordinator(name, hello(workers.at(name)));
  uint64_t last_step = 0;
  for (bool moved = true; moved;) {
    moved = false;
    for (auto& [name, worker] : workers) {
      std::deque<Message>& queue = outbox.inbox[name];
      while (!queue.empty()) {
        Message m = std::move(queue.front());
        queue.pop_front();
        moved = true;
        if (r.kinds.insert(m.envelope.body_case()).second) corpus.add("envelope", as_parts(m));
        if (name == "a") add_script_action(r.session_script, "coordinator", m, 0.01);
        if (m.envelope.step() != last_step) {
          r.coordinator_prefixes.push_back(r.coordinator_script);
          last_step = m.envelope.step();
        }
        answer(name, worker, m, replica.parameter_checksum(),
               [&, &peer = name](const Message& a) { to_coordinator(peer, a); });
      }
    }
    write_action(r.coordinator_script, Kind::kTick, 0, 0.01);
    now += 0.01;
    coordinator.tick(now);
  }
  if (!coordinator.finished() || coordinator.exit_code() != 0) {
    throw std::runtime_error(
        fmt::format("the seed run did not finish cleanly: {}", coordinator.stop_reason()));
  }
  return r;
}

// The star run: the workers run the real session and trainer.
Recorded record_run(Corpus& corpus, const fs::path& run_dir) {
  v1::RunConfig config = run_config();
  config.mutable_checkpoint()->set_every_steps(2);  // so the run writes a real checkpoint
  return record(
      corpus, config, run_dir, [](testing::FakeWorker& w) { return w.hello(); },
      [](const std::string&, testing::FakeWorker& worker, const Message& m, uint64_t,
         const auto& send) {
        for (const Message& answer : worker.deliver(m)) send(answer);
      });
}

// The exchange run, the workers' side played by hand as
// tests/coordinator/exchange_commit_test.cc plays it: each says hello with an
// endpoint and a token, answers its welcome (FakeWorker) and every plan with
// its round reported ok (the digests of one fixed sum, computed on the
// coordinator's parameters as they are then); a, the lowest member, sends
// that sum.
// With `guarded`, the exchange's norm guard and the keyed sum check on:
// each member answers its round check with the tags of the sum under the
// key and the sketch of its part, a third of the sum.
Recorded record_exchange_run(Corpus& corpus, const fs::path& run_dir, bool guarded) {
  const v1::RunConfig config = guarded ? guarded_exchange_run_config() : exchange_run_config();
  const Replica shape(testing::softmax_for(config), config.optimizer());
  const size_t parameters = shape.parameter_count();
  std::vector<float> sum(parameters + shape.buffer_count());
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = 0.001f * static_cast<float>(i % 97);
  std::vector<float> part = sum;
  for (float& v : part) v /= 3.0f;
  return record(
      corpus, config, run_dir,
      [guarded](testing::FakeWorker& w) {
        Message hello = w.hello();
        hello.envelope.mutable_hello()->set_exchange_endpoint("tcp://127.0.0.1:9");
        hello.envelope.mutable_hello()->set_exchange_token(std::string(kExchangeTokenBytes, 't'));
        // The guarded run forces the keyed check, which a member must offer.
        if (guarded) hello.envelope.mutable_hello()->add_sum_digests(v1::SUM_DIGEST_GMAC);
        return hello;
      },
      [&](const std::string& name, testing::FakeWorker& worker, const Message& m,
          uint64_t parameters_now, const auto& send) {
        if (m.envelope.body_case() == v1::Envelope::kWelcome) {
          for (const Message& answer : worker.deliver(m)) send(answer);
        } else if (m.envelope.body_case() == v1::Envelope::kPlan) {
          send(testing::round_report(name, m, name == "a", sum, parameters_now));
          if (name == "a") {
            send(testing::round_sum(name, m.envelope.step(), m.envelope.plan().exchange().attempt(),
                                    sum, parameters));
          }
        } else if (m.envelope.body_case() == v1::Envelope::kRoundCheckRequest) {
          const v1::RoundCheckRequest& q = m.envelope.round_check_request();
          Message a = testing::round_check_answer(name, m, sum);  // the tags, if a key came
          if (q.buckets() > 0) {
            const std::vector<double> sketch =
                sketch_shards(part, {parameters, part.size(), q.shards(), q.buckets(), q.seed()});
            a.envelope.mutable_round_check_answer()->mutable_values()->Assign(sketch.begin(),
                                                                              sketch.end());
          }
          send(a);
        }
      });
}

Message from_coordinator() {
  Message m;
  m.envelope = make_envelope(1, "coordinator");
  return m;
}

void add_files(Corpus& corpus, const std::string& target, const fs::path& dir,
               const std::string& extension) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == extension) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) corpus.add(target, read_text_file(f));
}

void write_seeds(const fs::path& out) {
  Corpus corpus(out);
  const fs::path run_dir = scratch_dir("seeds");
  const Recorded r = record_run(corpus, run_dir);
  // The coordinator target's first byte picks the run (fuzz/harness.h).
  const auto plane = [](Plane p, const std::string& script) {
    return std::string(1, static_cast<char>(p)) + script;
  };
  corpus.add("coordinator", plane(Plane::kStar, r.coordinator_script));
  for (const std::string& prefix : r.coordinator_prefixes) {
    corpus.add("coordinator", plane(Plane::kStar, prefix));
  }
  const Recorded x = record_exchange_run(corpus, scratch_dir("seeds-exchange"), false);
  corpus.add("coordinator", plane(Plane::kExchange, x.coordinator_script));
  for (const std::string& prefix : x.coordinator_prefixes) {
    corpus.add("coordinator", plane(Plane::kExchange, prefix));
  }
  const Recorded g = record_exchange_run(corpus, scratch_dir("seeds-guarded"), true);
  corpus.add("coordinator", plane(Plane::kGuardedExchange, g.coordinator_script));
  for (const std::string& prefix : g.coordinator_prefixes) {
    corpus.add("coordinator", plane(Plane::kGuardedExchange, prefix));
  }
  corpus.add("session", r.session_script);

  // The session's other answers: a heartbeat, a request to rejoin, a refusal.
  Message heartbeat = from_coordinator();
  heartbeat.envelope.mutable_heartbeat()->set_sent_unix_micros(1);
  Message rejoin = from_coordinator();
  rejoin.envelope.mutable_error()->set_message("unknown worker: say hello to rejoin");
  rejoin.envelope.mutable_error()->set_rejoin(true);
  Message refusal = from_coordinator();
  refusal.envelope.mutable_refusal()->set_reason("the run already has its 3 workers");
  for (const Message* m : {&heartbeat, &rejoin, &refusal}) {
    std::string script;
    write_action(script, Kind::kEvent, static_cast<uint8_t>(ConnectionEvent::kConnected), 0.0);
    write_action(script, Kind::kTick, 0, 0.3);
    const std::vector<zmq::message_t> parts = encode(testing::copy_of(*m));
    write_action(script, Kind::kMessage, 0, 0.1, &parts);
    write_action(script, Kind::kTick, 0, 1.0);
    corpus.add("session", script);
    corpus.add("envelope", as_parts(*m));
  }

  corpus.add("metrics_json", read_text_file(run_dir / "metrics.jsonl"));
  corpus.add("metrics_json", read_text_file(run_dir / "summary.json"));
  const std::string checkpoint = read_text_file(checkpoint_path(run_dir));
  corpus.add("checkpoint", std::string(1, '\0') + checkpoint);
  // Odd first byte: the harness appends the checksum to the rest.
  corpus.add("checkpoint", std::string(1, '\1') + checkpoint.substr(0, checkpoint.size() - 8));

  corpus.add("text_format", kRunConfig);
  corpus.add("text_format", to_text(run_config()));  // as config.cfg is written
  const fs::path experiments = fs::path(DCTRAIN_SOURCE_DIR) / "experiments";
  add_files(corpus, "text_format", experiments, ".cfg");
  add_files(corpus, "sweep", experiments, ".sweep");
  Replica model(testing::softmax_for(run_config()), run_config().optimizer());
  const Arena& parameters = model.model().parameters();
  SafeTensors weights;
  weights.metadata["config"] = to_text(run_config());
  for (size_t i = 0; i < parameters.table().size(); ++i) {
    const std::span<const float> values = parameters.view(i);
    weights.tensors.push_back({parameters.table()[i].name, parameters.table()[i].shape,
                               std::vector<float>(values.begin(), values.end())});
  }
  corpus.add("safetensors", encode_safetensors(weights));
  fs::remove_all(run_dir);
  std::cout << fmt::format("dctrain-fuzz-seeds: wrote {} seeds under {}\n", corpus.total(),
                           out.string());
}

}  // namespace
}  // namespace dctrain::fuzz

int main(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]).starts_with("-")) {
    std::cerr << "usage: dctrain-fuzz-seeds OUT_DIR\n"
                 "writes the fuzz targets' seed corpora (one folder per target) under OUT_DIR\n";
    return 2;
  }
  try {
    dctrain::fuzz::write_seeds(argv[1]);
  } catch (const std::exception& e) {
    std::cerr << "dctrain-fuzz-seeds: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
