// Allreduce of one float buffer among W processes on this host, timed: the
// data plane's exchange (exchange/peer.h) on its direct schedule and on
// recursive halving and doubling (--algorithm halving), the star it replaces
// (everyone sends its buffer to rank 0, which sums in rank order and sends
// the sum back) and, for comparison only, a pipelined ring (ring order of
// summation: not bit-identical to the star, so not what the exchange uses).
// bench/exchange_vs_gloo.sh runs it beside torch.distributed's gloo.
//
//   build/release/bench/bench_exchange_allreduce --world 4 --bytes 18350080
//       [--algorithm direct|halving|star|ring] [--iters 30] [--warmup 5]
//       [--piece-kib 1024] [--copy] [--io-threads 2] [--untuned] [--profile] [--digest
//       gmac|sha256|blake2b]
//       [--curve]
//
// The parent forks W ranks (before any ZeroMQ context exists), passes each
// the others' endpoints through pipes and collects every rank's time per
// allreduce. Prints "RESULT algorithm=... median_ms=..." where an
// iteration's time is that of its slowest rank, and the median is over
// iterations. Every rank checks every result against the exact sum (the
// contributions are small multiples of 1/4, so every order gives the same
// exact value) and the run fails if one differs. With --digest KIND, each
// peer digests the sum as its pieces land with that hash, as a worker's does
// for its report (ExchangeOptions::sum_digest, on in the programs); with
// --digest gmac, each peer takes the keyed tags of the sum after the round,
// as a worker does when the coordinator's key comes (the key's round trip
// is not in it): run with and without to see what that costs. With --curve (direct), every link is
// CURVE as a run's is off loopback: each rank has its own key pair (made by the parent before the
// fork), admits exactly the others' keys and encrypts every piece; run with and without to see what
// CURVE costs, and vary
// --io-threads to see how far ZeroMQ's I/O threads spread it.
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "comm/security.h"
#include "comm/transport.h"
#include "common/allocator.h"
#include "exchange/peer.h"
#include "exchange/plan.h"
#include "exchange/zero_copy.h"

namespace {

using Clock = std::chrono::steady_clock;
using dctrain::ExchangePeer;
using dctrain::ExchangePlan;
using dctrain::PieceRange;
using dctrain::ReleaseTracker;

struct Args {
  int world = 4;
  size_t bytes = size_t{18350080};
  std::string algorithm = "direct";
  int iters = 30;
  int warmup = 5;
  size_t piece_kib = 1024;
  bool copy = false;
  std::string digest;  // "": none
  bool profile = false;
  bool curve = false;
  std::vector<dctrain::CurveKeyPair> keys;  // by rank, with --curve
  int io_threads = 2;
  bool untuned = false;
  std::string bind = "tcp://127.0.0.1:*";
};

constexpr auto kDeadline = std::chrono::seconds(60);

// One rank's side of an allreduce algorithm.
class Allreduce {
 public:
  virtual ~Allreduce() = default;
  // What the other ranks connect to ("-" when nothing binds).
  virtual std::string endpoint() = 0;
  virtual void connect(const std::vector<std::string>& endpoints) = 0;
  // out = sum of every rank's `in`; false (with `error`) on failure.
  virtual bool run(uint64_t iteration, std::span<const float> in, std::span<float> out,
                   std::string& error) = 0;
  // Where the time went, averaged over the timed iterations ("" if unknown).
  virtual std::string profile(int /*iterations*/) { return ""; }
  virtual void reset_profile() {}
};

// The data plane's exchange.
class Direct : public Allreduce {
 public:
  Direct(int rank, int world, const Args& args)
      : peer_(static_cast<uint32_t>(rank), args.bind, options(rank, args)),
        tagged_(args.digest == "gmac") {
    for (int r = 0; r < world; ++r) members_.push_back(static_cast<uint32_t>(r));
  }
  static dctrain::ExchangeOptions options(int rank, const Args& args) {
    dctrain::ExchangeOptions o;
    o.piece_bytes = args.piece_kib * 1024;
    o.copy_sends = args.copy;
    o.io_threads = args.io_threads;
    const auto digest = dctrain::digest_from_name(args.digest);
    o.sum_digest = digest && !dctrain::keyed(*digest) ? digest : std::nullopt;
    o.halving_from = args.algorithm == "halving" ? 1 : 0;
    if (args.curve) {
      o.security.curve = true;
      o.security.own = args.keys[static_cast<size_t>(rank)];
      for (const dctrain::CurveKeyPair& k : args.keys) {
        o.allowed_keys.insert(k.public_key);
        o.member_keys.push_back(k.public_key);
      }
    }
    return o;
  }
  std::string endpoint() override { return peer_.endpoint(); }
  void connect(const std::vector<std::string>& endpoints) override { peer_.connect(endpoints); }
  bool run(uint64_t iteration, std::span<const float> in, std::span<float> out,
           std::string& error) override {
    const auto o = peer_.exchange({iteration, 0}, members_, in, 1, out, Clock::now() + kDeadline);
    error = o.error;
    if (o.ok && tagged_) {
      // A keyed check's tags, taken after the round as a worker takes them
      // when the coordinator's key comes (without the key's round trip).
      std::array<uint64_t, 4> key{iteration, iteration * 3 + 1, ~iteration, 7};
      const auto tags = dctrain::shard_tags(out, members_.size(), std::as_bytes(std::span(key)));
      if (tags.size() != members_.size()) error = "no tags";
    }
    summing_ += o.stats.summing;
    reduced_ += o.stats.reduced_after;
    gathered_ += o.stats.gathered_after;
    elapsed_ += o.elapsed;
    return o.ok;
  }
  std::string profile(int iterations) override {
    auto ms = [iterations](std::chrono::nanoseconds t) {
      return std::chrono::duration<double, std::milli>(t).count() / iterations;
    };
    return fmt::format(
        "summing_ms={:.2f} shard_summed_ms={:.2f} sums_in_ms={:.2f} returned_ms={:.2f}",
        ms(summing_), ms(reduced_), ms(gathered_), ms(elapsed_));
  }
  void reset_profile() override { summing_ = reduced_ = gathered_ = elapsed_ = {}; }

 private:
  ExchangePeer peer_;
  bool tagged_;  // --digest gmac
  std::vector<uint32_t> members_;
  std::chrono::nanoseconds summing_{0}, reduced_{0}, gathered_{0}, elapsed_{0};
};

float load(const void* base, size_t i) {
  float v;
  std::memcpy(&v, static_cast<const char*>(base) + i * sizeof(float), sizeof v);
  return v;
}

// Frames of at most 16 MiB, as comm/framing.h cuts tensors today.
constexpr size_t kFrameFloats = (size_t{16} << 20) / sizeof(float);

bool receive_until(zmq::socket_t& socket, std::vector<zmq::message_t>& parts,
                   Clock::time_point deadline) {
  while (!dctrain::receive_parts(socket, parts, false)) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    zmq::pollitem_t item{static_cast<void*>(socket), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, left);
  }
  return true;
}

// Everyone sends its whole buffer to rank 0, which adds each in rank order as
// soon as the lower ranks are in (as coordinator/step/reducer.cc does) and sends
// the sum back to every rank; sends are zero-copy.
class Star : public Allreduce {
 public:
  Star(zmq::context_t& context, int rank, int world, const Args& args)
      : context_(context), rank_(rank), world_(world), releases_(static_cast<size_t>(world)) {
    if (rank_ == 0) {
      socket_ = zmq::socket_t(context_, zmq::socket_type::router);
      socket_.set(zmq::sockopt::linger, 0);
      socket_.bind(args.bind);
    }
  }
  ~Star() override { socket_.close(); }
  std::string endpoint() override {
    return rank_ == 0 ? socket_.get(zmq::sockopt::last_endpoint) : "-";
  }
  void connect(const std::vector<std::string>& endpoints) override {
    if (rank_ == 0) return;
    socket_ = zmq::socket_t(context_, zmq::socket_type::dealer);
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::routing_id, std::to_string(rank_));
    socket_.connect(endpoints[0]);
  }
  bool run(uint64_t iteration, std::span<const float> in, std::span<float> out,
           std::string& error) override {
    const auto deadline = Clock::now() + kDeadline;
    std::vector<zmq::message_t> parts;
    if (rank_ != 0) {
      send(socket_, nullptr, iteration, in, 0);
      if (!receive_until(socket_, parts, deadline)) {
        error = "no sum from rank 0";
        return false;
      }
      for (size_t f = 1; f < parts.size(); ++f) {
        std::memcpy(out.data() + (f - 1) * kFrameFloats, parts[f].data(), parts[f].size());
      }
      return releases_.wait_all(deadline) || (error = "sends not released", false);
    }
    // Rank 0: its own buffer first, then each rank once every lower one is in.
    for (size_t i = 0; i < out.size(); ++i) out[i] = 0.0f + in[i];
    std::map<int, std::vector<zmq::message_t>> waiting;
    int next = 1;
    while (next < world_) {
      if (!receive_until(socket_, parts, deadline)) {
        error = fmt::format("no contribution from rank {}", next);
        return false;
      }
      waiting[std::stoi(parts[0].to_string())] = std::move(parts);
      for (auto it = waiting.find(next); it != waiting.end(); it = waiting.find(++next)) {
        for (size_t f = 2; f < it->second.size(); ++f) {
          float* acc = out.data() + (f - 2) * kFrameFloats;
          const void* src = it->second[f].data();
          const size_t n = it->second[f].size() / sizeof(float);
          for (size_t i = 0; i < n; ++i) acc[i] += load(src, i);
        }
        waiting.erase(it);
      }
    }
    for (int r = 1; r < world_; ++r) send(socket_, &r, iteration, out, static_cast<size_t>(r));
    return releases_.wait_all(deadline) || (error = "sends not released", false);
  }

 private:
  void send(zmq::socket_t& s, const int* to, uint64_t iteration, std::span<const float> values,
            size_t destination) {
    if (to != nullptr) s.send(zmq::buffer(std::to_string(*to)), zmq::send_flags::sndmore);
    const size_t frames = (values.size() + kFrameFloats - 1) / kFrameFloats;
    s.send(zmq::buffer(&iteration, sizeof iteration),
           frames > 0 ? zmq::send_flags::sndmore : zmq::send_flags::none);
    for (size_t f = 0; f < frames; ++f) {
      const size_t begin = f * kFrameFloats;
      const size_t n = std::min(kFrameFloats, values.size() - begin);
      s.send(releases_.wrap(destination, values.data() + begin, n * sizeof(float)),
             f + 1 < frames ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }

  zmq::context_t& context_;
  int rank_, world_;
  ReleaseTracker releases_;
  zmq::socket_t socket_;
};

// A pipelined ring: each shard travels around the ring as pieces, a piece
// forwarded as soon as it is added to (reduce-scatter) or arrives
// (all-gather). Shard c is summed in ring order c, c+1, ..., c-1: a
// different order per shard, so not the star's bits.
class Ring : public Allreduce {
 public:
  Ring(zmq::context_t& context, int rank, int world, const Args& args)
      : context_(context),
        rank_(rank),
        world_(world),
        piece_floats_(args.piece_kib * 256),
        copy_(args.copy),
        inbox_(context, zmq::socket_type::router),
        releases_(1) {
    inbox_.set(zmq::sockopt::linger, 0);
    inbox_.bind(args.bind);
  }
  ~Ring() override { right_.close(); }
  std::string endpoint() override { return inbox_.get(zmq::sockopt::last_endpoint); }
  void connect(const std::vector<std::string>& endpoints) override {
    right_ = zmq::socket_t(context_, zmq::socket_type::dealer);
    right_.set(zmq::sockopt::linger, 0);
    right_.connect(endpoints[static_cast<size_t>((rank_ + 1) % world_)]);
  }
  bool run(uint64_t iteration, std::span<const float> in, std::span<float> out,
           std::string& error) override {
    if (world_ == 1) {
      for (size_t i = 0; i < out.size(); ++i) out[i] = 0.0f + in[i];
      return true;
    }
    const auto deadline = Clock::now() + kDeadline;
    const ExchangePlan plan(in.size(), static_cast<size_t>(world_), piece_floats_);
    const auto w = static_cast<uint32_t>(world_);
    const auto me = static_cast<uint32_t>(rank_);
    // Pieces still to arrive: every piece of every shard but this rank's own
    // reduce-scatter start; counted down as each is final here.
    size_t missing = 0;
    for (uint32_t c = 0; c < w; ++c) missing += plan.pieces(c);
    for (size_t k = 0; k < plan.pieces(me); ++k) send(iteration, 0, 0, me, k, in.data(), plan);
    std::vector<zmq::message_t> parts;
    while (missing > 0) {
      if (!receive_until(inbox_, parts, deadline)) {
        error = fmt::format("ring: {} pieces missing", missing);
        return false;
      }
      Header h;
      std::memcpy(&h, parts[1].data(), sizeof h);
      if (h.iteration != iteration) {
        error = "ring: a piece of another iteration";
        return false;
      }
      const PieceRange p = plan.piece(h.shard, h.piece);
      float* acc = out.data() + p.offset;
      const void* src = parts[2].data();
      if (h.phase == 0) {
        // The partial sum so far, then this rank's contribution.
        for (size_t i = 0; i < p.count; ++i) acc[i] = load(src, i) + in[p.offset + i];
        if (h.step + 2 < w) {
          send(iteration, 0, h.step + 1, h.shard, h.piece, out.data(), plan);
        } else {
          --missing;  // this rank holds the final sum of this piece
          send(iteration, 1, 0, h.shard, h.piece, out.data(), plan);
        }
      } else {
        if (p.count > 0) std::memcpy(acc, src, p.count * sizeof(float));
        --missing;
        if (h.step + 2 < w) send(iteration, 1, h.step + 1, h.shard, h.piece, out.data(), plan);
      }
    }
    return releases_.wait_all(deadline) || (error = "sends not released", false);
  }

 private:
  struct Header {
    uint64_t iteration;
    uint32_t phase;  // 0 reduce-scatter, 1 all-gather
    uint32_t step;
    uint32_t shard;
    uint32_t piece;
  };
  void send(uint64_t iteration, uint32_t phase, uint32_t step, uint32_t shard, size_t piece,
            const float* base, const ExchangePlan& plan) {
    const Header h{iteration, phase, step, shard, static_cast<uint32_t>(piece)};
    const PieceRange p = plan.piece(shard, piece);
    right_.send(zmq::buffer(&h, sizeof h), zmq::send_flags::sndmore);
    const size_t bytes = p.count * sizeof(float);
    right_.send(copy_ ? releases_.copy(0, base + p.offset, bytes)
                      : releases_.wrap(0, base + p.offset, bytes),
                zmq::send_flags::none);
  }

  zmq::context_t& context_;
  int rank_, world_;
  uint64_t piece_floats_;
  bool copy_;
  zmq::socket_t inbox_;
  ReleaseTracker releases_;
  zmq::socket_t right_;
};

// Reads one line (without the newline) from `fd`; false at end of file.
bool read_line(int fd, std::string& line) {
  line.clear();
  char c;
  while (true) {
    const ssize_t n = read(fd, &c, 1);
    if (n <= 0) return !line.empty();
    if (c == '\n') return true;
    line.push_back(c);
  }
}

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// One rank: writes its endpoint, reads everyone's, runs the iterations and
// writes "TIMES t1 t2 ..." (seconds) or "ERROR why". Returns the exit status.
int run_rank(int rank, const Args& args, int up, int down) {
  if (!args.untuned) dctrain::tune_allocator();
  zmq::context_t context(args.io_threads);
  std::unique_ptr<Allreduce> algorithm;
  if (args.algorithm == "direct" || args.algorithm == "halving") {
    algorithm = std::make_unique<Direct>(rank, args.world, args);
  } else if (args.algorithm == "star") {
    algorithm = std::make_unique<Star>(context, rank, args.world, args);
  } else {
    algorithm = std::make_unique<Ring>(context, rank, args.world, args);
  }
  write_all(up, algorithm->endpoint() + "\n");
  std::vector<std::string> endpoints(static_cast<size_t>(args.world));
  for (auto& e : endpoints) {
    if (!read_line(down, e)) return 1;
  }
  algorithm->connect(endpoints);

  const size_t n = args.bytes / sizeof(float);
  std::vector<float> in(n), out(n), expected(n);
  for (size_t i = 0; i < n; ++i) {
    in[i] = static_cast<float>((i * 7 + static_cast<size_t>(rank) * 13) % 1000) * 0.25f;
    double sum = 0;
    for (int r = 0; r < args.world; ++r) {
      sum += static_cast<double>((i * 7 + static_cast<size_t>(r) * 13) % 1000) * 0.25;
    }
    expected[i] = static_cast<float>(sum);
  }
  std::string times = "TIMES";
  for (int it = 0; it < args.warmup + args.iters; ++it) {
    if (it == args.warmup) algorithm->reset_profile();
    std::fill(out.begin(), out.end(), std::nanf(""));
    std::string error;
    const auto start = Clock::now();
    const bool ok = algorithm->run(static_cast<uint64_t>(it) + 1, in, out, error);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (!ok) {
      write_all(up, fmt::format("ERROR rank {} iteration {}: {}\n", rank, it, error));
      return 1;
    }
    if (std::memcmp(out.data(), expected.data(), n * sizeof(float)) != 0) {
      write_all(up, fmt::format("ERROR rank {} iteration {}: wrong sum\n", rank, it));
      return 1;
    }
    if (it >= args.warmup) times += fmt::format(" {:.9f}", seconds);
  }
  if (const std::string p = algorithm->profile(args.iters); !p.empty()) {
    write_all(up, fmt::format("PROFILE rank={} {}\n", rank, p));
  }
  write_all(up, times + "\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"Allreduce among W processes on this host: direct exchange, star or ring"};
  app.add_option("--world", args.world, "processes")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--bytes", args.bytes, "buffer size in bytes (a multiple of 4)")
      ->capture_default_str();
  app.add_option("--algorithm", args.algorithm,
                 "direct or halving (the exchange's schedules), star or ring")
      ->check(CLI::IsMember({"direct", "halving", "star", "ring"}))
      ->capture_default_str();
  app.add_option("--iters", args.iters, "timed allreduces")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--warmup", args.warmup, "untimed allreduces first")->capture_default_str();
  app.add_option("--piece-kib", args.piece_kib, "largest piece on the wire (direct, ring)")
      ->check(CLI::Range(1, 16384))
      ->capture_default_str();
  app.add_flag("--copy", args.copy, "copy pieces into messages instead of zero-copy sends");
  app.add_option("--digest", args.digest,
                 "check the sum as a worker's peer does: a hash as its pieces land, or "
                 "gmac's keyed tags after the round")
      ->check(CLI::IsMember({"gmac", "sha256", "blake2b"}));
  app.add_flag("--curve", args.curve, "direct: CURVE on every link, a key pair per rank");
  app.add_option("--io-threads", args.io_threads, "ZeroMQ I/O threads per rank")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  app.add_option("--bind", args.bind,
                 "what every rank binds (ipc://* for Unix sockets; the rank's own host)")
      ->capture_default_str();
  app.add_flag("--untuned", args.untuned,
               "leave glibc's malloc thresholds alone (see dctrain::tune_allocator)");
  app.add_flag("--profile", args.profile, "print where each rank's time went (direct)");
  CLI11_PARSE(app, argc, argv);
  if (args.bytes % sizeof(float) != 0) {
    fmt::print(stderr, "bench_exchange_allreduce: --bytes {} is not a multiple of 4\n", args.bytes);
    return 2;
  }
  if (args.curve && args.algorithm != "direct" && args.algorithm != "halving") {
    fmt::print(stderr, "bench_exchange_allreduce: --curve is for the exchange's schedules\n");
    return 2;
  }
  for (int r = 0; args.curve && r < args.world; ++r)
    args.keys.push_back(dctrain::generate_curve_keypair());

  struct Child {
    pid_t pid = -1;
    int up = -1, down = -1;  // read from it, write to it
  };
  std::vector<Child> children(static_cast<size_t>(args.world));
  for (int r = 0; r < args.world; ++r) {
    int up[2], down[2];
    if (pipe(up) != 0 || pipe(down) != 0) {
      std::perror("bench_exchange_allreduce: pipe");
      return 1;
    }
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("bench_exchange_allreduce: fork");
      return 1;
    }
    if (pid == 0) {
      close(up[0]);
      close(down[1]);
      for (int q = 0; q < r; ++q) {
        close(children[static_cast<size_t>(q)].up);
        close(children[static_cast<size_t>(q)].down);
      }
      return run_rank(r, args, up[1], down[0]);
    }
    close(up[1]);
    close(down[0]);
    children[static_cast<size_t>(r)] = Child{pid, up[0], down[1]};
  }
  std::string endpoints;
  for (auto& c : children) {
    std::string e;
    if (!read_line(c.up, e)) {
      fmt::print(stderr, "bench_exchange_allreduce: a rank died before it bound its socket\n");
      return 1;
    }
    endpoints += e + "\n";
  }
  for (auto& c : children) {
    write_all(c.down, endpoints);
    close(c.down);
  }
  std::vector<std::vector<double>> times;
  bool failed = false;
  for (auto& c : children) {
    std::string line;
    bool more = read_line(c.up, line);
    while (more && line.rfind("PROFILE", 0) == 0) {
      if (args.profile) fmt::print("{}\n", line);
      more = read_line(c.up, line);
    }
    if (!more || line.rfind("TIMES", 0) != 0) {
      fmt::print(stderr, "bench_exchange_allreduce: {}\n", line.empty() ? "a rank died" : line);
      failed = true;
    } else {
      std::vector<double> t;
      for (size_t at = 5; at < line.size();) {
        size_t used = 0;
        t.push_back(std::stod(line.substr(at), &used));
        at += used;
      }
      times.push_back(std::move(t));
    }
    close(c.up);
  }
  for (auto& c : children) {
    int status = 0;
    waitpid(c.pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = true;
  }
  if (failed) return 1;
  // An iteration takes as long as its slowest rank.
  std::vector<double> slowest(static_cast<size_t>(args.iters), 0.0);
  for (const auto& t : times) {
    for (size_t i = 0; i < slowest.size() && i < t.size(); ++i)
      slowest[i] = std::max(slowest[i], t[i]);
  }
  std::vector<double> sorted = slowest;
  std::sort(sorted.begin(), sorted.end());
  double mean = 0;
  for (double s : slowest) mean += s;
  mean /= static_cast<double>(slowest.size());
  fmt::print(
      "RESULT algorithm={} world={} bytes={} piece_kib={} copy={} curve={} digest={} "
      "io_threads={} iters={} median_ms={:.3f} mean_ms={:.3f} min_ms={:.3f}\n",
      args.algorithm, args.world, args.bytes, args.piece_kib, args.copy ? 1 : 0, args.curve ? 1 : 0,
      args.digest.empty() ? "none" : args.digest, args.io_threads, args.iters,
      1e3 * sorted[sorted.size() / 2], 1e3 * mean, 1e3 * sorted.front());
  return 0;
}
