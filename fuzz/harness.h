// What the fuzz targets share: a logger that formats every message (so the
// log lines run too) and drops it, a scratch folder per process, and the
// small run the message-handler targets drive (the unit tests' run: softmax
// regression on 8x8 synthetic images, 3 workers).
#pragma once

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "runtime/run_config.h"

namespace dctrain::fuzz {

inline std::shared_ptr<spdlog::logger> quiet_logger() {
  auto logger =
      std::make_shared<spdlog::logger>("fuzz", std::make_shared<spdlog::sinks::null_sink_mt>());
  logger->set_level(spdlog::level::debug);
  return logger;
}

// A fresh folder for this process (libFuzzer's -jobs run several at once).
inline std::filesystem::path scratch_dir(const std::string& target) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("dctrain-fuzz-" + target + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// The run the coordinator and session targets (and their seeds) use: no
// checkpoints (each would fsync), no evaluation, 4 steps; on the star data
// plane, since the seed run's in-process workers (tests/testing/fake_cluster.h)
// send their gradients to the coordinator and have no exchange endpoint.
inline constexpr char kRunConfig[] = R"(
name: "fuzz"
seed: 5
workers: 3
model { name: "mlp" image_channels: 1 image_height: 8 image_width: 8 }
dataset { kind: "synthetic" synthetic_samples: 600 train_limit: 240 }
optimizer { kind: "sgd" lr: 0.1 momentum: 0.9 }
step { global_batch: 24 micro_batch: 4 tau: inf }
liveness { heartbeat_seconds: 0.5 silence_seconds: 10 grace_seconds: 0.5 join_timeout_seconds: 120 }
checkpoint { every_steps: 0 }
stop { max_steps: 4 }
data_plane { kind: "star" }
)";

inline v1::RunConfig run_config() {
  v1::RunConfig config = parse_run_config(kRunConfig, "fuzz run");
  finalize_run_config(config);
  return config;
}

// The same run on the data plane "exchange", whose workers' side the seeds
// play by hand (fuzz/seeds.cc): reports of the rounds, sums, no gradients.
inline v1::RunConfig exchange_run_config() {
  v1::RunConfig config = parse_run_config(kRunConfig, "fuzz run");
  config.mutable_data_plane()->set_kind(v1::DATA_PLANE_EXCHANGE);
  config.mutable_data_plane()->set_timeout_seconds(2);
  finalize_run_config(config);
  return config;
}

// The same with the exchange's norm guard on and the keyed sum check
// forced (its round check requests, with a key and a sketch seed, the
// answers' tags and sketches, and their judgement).
inline v1::RunConfig guarded_exchange_run_config() {
  v1::RunConfig config = exchange_run_config();
  config.mutable_guard()->set_norm_multiple(4.0);
  config.mutable_data_plane()->set_sum_digest("gmac");
  return config;
}

// The norm guard's seed in the fuzzed coordinator and in the recorded run its
// seeds come from, so that recorded answers replay.
inline constexpr uint64_t kSketchSeed = 0x5eed5eed5eed5eedULL;

// The coordinator's wall clock there too (the exchange's run id in the plans,
// the heartbeats' stamps): an input replays the same bytes out.
inline constexpr uint64_t kWallClockMicros = 1'790'000'000'000'000ULL;

// The coordinator target's first byte: which of the runs the script drives.
enum class Plane : uint8_t { kStar = 0, kExchange = 1, kGuardedExchange = 2 };

// The names of the four peers a script speaks as (the run has three
// workers; the fourth is one too many).
inline std::string peer_name(uint8_t peer) {
  static constexpr const char* kNames[] = {"a", "b", "c", "d"};
  return kNames[peer % 4];
}

}  // namespace dctrain::fuzz
