// How much any one peer may cost the coordinator: the socket's limits from
// the model's size, and logs that stay bounded whatever a peer sends. A
// peer's bad messages are counted and the first few logged, then one line per
// period with the count since (at most kNewPeersPerPeriod new names a period
// get lines of their own; the rest share one); hellos that are refused are answered for at
// most guard.max_refused_peers peers per period, each once, and the rest
// only counted, so a flood of hellos from fresh names queues no replies and
// writes no more log lines than that.
#pragma once

#include <spdlog/logger.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "comm/transport_limits.h"
#include "proto/config.pb.h"
#include "runtime/replica.h"

namespace dctrain {

// The ROUTER's limits for a run: frames no larger than the model's largest
// tensor frame (or a header), a queue per peer from guard.max_queued_messages
// or the model's size, and ZMTP heartbeats at the run's heartbeat period with
// its silence as the timeout.
TransportLimits transport_limits(const v1::RunConfig& config, Replica& replica);

class PeerLog {
 public:
  // Bad messages a peer may have logged one by one before the lines turn
  // into one per period.
  static constexpr uint64_t kBurst = 5;
  // Peers remembered; beyond, bad messages from new peers share one entry.
  static constexpr size_t kMaxPeers = 1024;
  // New peers given lines of their own per period; beyond, they share the
  // entry of other peers, so that rotating names costs the log no more.
  static constexpr size_t kNewPeersPerPeriod = 8;

  // `config`: finalized (runtime/run_config.h sets its defaults).
  PeerLog(const v1::GuardConfig& config, std::shared_ptr<spdlog::logger> log);

  // A bad message from `peer`, `line` saying what it was.
  void bad_message(const std::string& peer, const std::string& line, double now);
  // A line that carries text `peer` wrote (an error it reports, the reason
  // it gives for leaving, why its exchange failed), cut to
  // kPeerTextLimit by the caller: logged like bad messages, the first
  // kBurst one by one and then one line per period, so a peer that repeats
  // itself costs the log a bounded number of lines whatever it sends.
  void peer_says(const std::string& peer, const std::string& line, double now);
  // A hello from `peer` that is refused (`line` says so, for the log):
  // whether to answer (and log) it.
  bool answer_refusal(const std::string& peer, const std::string& line, double now);

  uint64_t bad_messages() const { return bad_messages_; }
  uint64_t refusals_unanswered() const { return refusals_unanswered_; }

 private:
  struct Entry {
    uint64_t count = 0;  // since the peer was first seen
    uint64_t since = 0;  // not logged yet
    double logged = -1e300;
    double heard = 0.0;
  };
  using Entries = std::map<std::string, Entry>;
  // One line of `kind` from `peer`, logged or counted for the next line.
  void limited(Entries& entries, const char* kind, const std::string& peer, const std::string& line,
               double now);
  void prune(Entries& entries, double now);

  double period_;
  size_t max_refused_;
  double new_peers_since_ = -1e300;  // the period in which new_peers_ were first seen
  size_t new_peers_ = 0;
  std::shared_ptr<spdlog::logger> log_;
  Entries bad_;   // bad messages, by peer
  Entries said_;  // lines of the peer's own text, by peer
  uint64_t bad_messages_ = 0;
  // Refused hellos in the current period.
  double window_start_ = -1e300;
  std::set<std::string> answered_;
  uint64_t refusals_unanswered_ = 0;
  uint64_t window_unanswered_ = 0;
};

}  // namespace dctrain
