#include "coordinator/step/peer_limits.h"

#include <fmt/format.h>

namespace dctrain {

TransportLimits transport_limits(const v1::RunConfig& config, Replica& replica) {
  TransportLimits limits;
  limits.max_frame_bytes = max_frame_bytes(replica.parameter_count(), replica.buffer_count());
  const uint32_t queued = config.guard().max_queued_messages();
  limits.max_queued_messages =
      queued > 0 ? static_cast<int>(queued)
                 : queued_messages_for(replica.parameter_count(), replica.buffer_count());
  const auto ms = [](double seconds) {
    return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
  };
  limits.heartbeat = ms(config.liveness().heartbeat_seconds());
  limits.heartbeat_timeout = ms(config.liveness().silence_seconds());
  return limits;
}

PeerLog::PeerLog(const v1::GuardConfig& config, std::shared_ptr<spdlog::logger> log)
    : period_(config.peer_log_seconds()),
      max_refused_(config.max_refused_peers()),
      log_(std::move(log)) {}

void PeerLog::prune(Entries& entries, double now) {
  for (auto it = entries.begin(); it != entries.end();) {
    it = now - it->second.heard > period_ && it->second.since == 0 ? entries.erase(it)
                                                                   : std::next(it);
  }
}

void PeerLog::bad_message(const std::string& peer, const std::string& line, double now) {
  ++bad_messages_;
  limited(bad_, "bad messages", peer, line, now);
}

void PeerLog::peer_says(const std::string& peer, const std::string& line, double now) {
  limited(said_, "lines of its own text", peer, line, now);
}

void PeerLog::limited(Entries& entries, const char* kind, const std::string& peer,
                      const std::string& line, double now) {
  const bool known = entries.contains(peer);
  if (!known && entries.size() >= kMaxPeers) prune(entries, now);
  if (!known && now - new_peers_since_ >= period_) {
    new_peers_since_ = now;
    new_peers_ = 0;
  }
  // Still full, or too many new names this period: the new peer shares the
  // entry of all such peers.
  const bool shared = !known && (entries.size() >= kMaxPeers || new_peers_ >= kNewPeersPerPeriod);
  if (!known && !shared) ++new_peers_;
  Entry& e = entries[shared ? std::string() : peer];
  ++e.count;
  ++e.since;
  e.heard = now;
  if (e.count <= kBurst) {
    log_->warn("{}", line);
    e.since = 0;
    e.logged = now;
    if (e.count == kBurst) {
      log_->warn("peer '{}' sent {} {}: from now on at most one line per {:g} s about it",
                 shared ? std::string("(other peers)") : peer, kBurst, kind, period_);
    }
    return;
  }
  if (now - e.logged < period_) return;
  log_->warn("{} ({} {} from {} in the last {:.0f} s, {} in all)", line, e.since, kind,
             shared ? std::string("other peers") : fmt::format("peer '{}'", peer), now - e.logged,
             e.count);
  e.since = 0;
  e.logged = now;
}

bool PeerLog::answer_refusal(const std::string& peer, const std::string& line, double now) {
  if (now - window_start_ >= period_) {
    if (window_unanswered_ > 0) {
      log_->warn(
          "{} hellos refused without an answer in the last {:.0f} s: more than {} peers "
          "(guard.max_refused_peers) were refused",
          window_unanswered_, now - window_start_, max_refused_);
    }
    window_start_ = now;
    answered_.clear();
    window_unanswered_ = 0;
  }
  if (answered_.contains(peer) || answered_.size() >= max_refused_) {
    ++refusals_unanswered_;
    ++window_unanswered_;
    return false;
  }
  answered_.insert(peer);
  log_->warn("{}", line);
  return true;
}

}  // namespace dctrain
