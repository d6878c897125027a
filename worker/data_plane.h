// The worker's end of the data plane "exchange": its ExchangePeer, bound at
// start-up so the hello can advertise it, and one step's round over the
// plan's members. The coordinator keeps the control plane: it names the
// members and their endpoints in each plan, and commits (or drops) the sum
// once every member has reported.
#pragma once

#include <spdlog/logger.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "exchange/peer.h"
#include "proto/wire.pb.h"

namespace dctrain {

// The address to bind when --exchange-bind is not given: tcp://IP:* on the
// interface this host uses to reach `coordinator` (tcp://HOST:PORT), so the
// other workers reach it the way this worker reaches the coordinator.
// Throws with the address and the reason when it cannot be found.
std::string default_exchange_bind(const std::string& coordinator);

class WorkerDataPlane {
 public:
  // Binds `bind_address` (tcp://IP:PORT, port may be *; empty: see
  // default_exchange_bind()). Every socket of the data plane is made by
  // ExchangePeer (exchange/peer.cc), in one place. With `security.curve`
  // (the control plane's CURVE), the data plane is CURVE too, with the same
  // key pair: the inbox admits exactly the keys of the round's members and
  // each outbox authenticates its member by the key the plan names.
  WorkerDataPlane(const std::string& bind_address, const std::string& coordinator,
                  const SocketSecurity& security, std::shared_ptr<spdlog::logger> log);

  // The endpoint the other workers connect to, with the real port: the
  // bound one, or, bound on every interface (tcp://*:PORT), the address of
  // the interface that reaches the coordinator with that port.
  const std::string& endpoint() const { return endpoint_; }
  // Whether rounds digest their sums for the report (data_plane.check_sums).
  void set_check_sums(bool check) { check_sums_ = check; }
  // What the hello advertises beside the endpoint (ExchangePeer::token()).
  const std::string& token() const { return peer_.token(); }

  // One round: `result` becomes the rank-order sum of every member's
  // `contribution` (this member's partial sum, [gradient | statistics]) on
  // success. `contribution` is left as it was, so a failed round can be
  // redone with it under the next attempt.
  // `deadline` is on the steady clock. Never throws for a failed round: the
  // report says what failed and whom the member blames. A round is refused
  // (not ok) when this worker runs CURVE and the plan names no keys (never
  // plain TCP instead), and when the sum it got holds NaN, infinity or
  // |x| >= 2^64 (common/usable_values.h; sum_unusable): such a sum is never
  // applied.
  v1::ExchangeReport exchange(uint64_t step, uint32_t rank, const v1::ExchangePlan& plan,
                              std::span<const float> contribution, std::span<float> result,
                              uint64_t samples, std::chrono::steady_clock::time_point deadline);

  // With CURVE: the inbox admits the plan's member keys from now on. Called
  // when the plan arrives, before the compute: the other members connect
  // once their own compute is done. A member that connects before this one
  // has its plan is held by the inbox until the keys are admitted
  // (ExchangeOptions::key_hold), not refused: ZeroMQ never retries a
  // handshake that was refused.
  void admit(uint64_t step, const v1::ExchangePlan& plan);

  // Ends rounds from the session's thread while the compute thread waits in
  // exchange() (exchange/round_cancel.h): the coordinator's word that a
  // round is over.
  RoundCancel& cancel() { return peer_.cancel(); }

 private:
  // The plan's group (its members' endpoints, keys and connection tokens by
  // rank) checked, and the peer connected to it when it changed; why not,
  // if it cannot be.
  std::optional<std::string> join_group(uint64_t step, uint32_t rank,
                                        const v1::ExchangePlan& plan);
  // What the round's outcome tells the coordinator, into `report`.
  void report_outcome(uint64_t step, const v1::ExchangePlan& plan, ExchangeOutcome& out,
                      v1::ExchangeReport& report);
  // With CURVE, the plan's keys by rank; otherwise none. What is wrong with
  // them, if anything.
  std::optional<std::string> plan_keys(uint64_t step, const v1::ExchangePlan& plan,
                                       std::vector<std::string>& keys) const;

  ExchangePeer peer_;
  std::shared_ptr<spdlog::logger> log_;
  std::string endpoint_;
  bool curve_ = false;
  // The schedule of the last round (logged when it changes).
  std::optional<v1::ExchangeScheduleKind> schedule_;
  bool check_sums_ = true;
  std::optional<SumDigestKind> sum_digest_;  // of the last round (logged when it changes)
  std::vector<std::string> endpoints_;  // as last connected, by rank
  std::vector<std::string> keys_;       // with CURVE: as last connected, by rank
  std::vector<std::string> tokens_;     // the members' connection tokens, by rank
  uint32_t connected_rank_ = UINT32_MAX;
};

}  // namespace dctrain
