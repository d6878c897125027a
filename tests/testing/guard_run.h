// The guard's process tests' run: a Cluster (tests/testing/cluster.h) that
// also starts hostile peers (tests/process/hostile_peer.cc).
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "metrics/metrics_json.h"
#include "tests/testing/cluster.h"

namespace dctrain::testing {

using namespace std::chrono_literals;

inline const std::string kPeer = DCTRAIN_HOSTILE_PEER;

// A Cluster that also starts hostile peers (under any key).
class GuardRun : public Cluster {
 public:
  GuardRun(const std::string& name, const std::string& config_text)
      : Cluster("guard-" + name, config_text) {}

  Process& start_peer(const std::string& key, const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"--connect", endpoint()};
    args.insert(args.end(), extra.begin(), extra.end());
    return start(key, kPeer, args);
  }
};

}  // namespace dctrain::testing
