#include "worker/data_plane.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>

#include "common/exit_codes.h"

namespace dctrain {

std::string default_exchange_bind(const std::string& coordinator) {
  const std::string prefix = "tcp://";
  const size_t colon = coordinator.rfind(':');
  if (!coordinator.starts_with(prefix) || colon == std::string::npos || colon < prefix.size()) {
    throw UsageError(fmt::format(
        "cannot derive the exchange address from --connect '{}': expected tcp://HOST:PORT; pass "
        "--exchange-bind tcp://IP:PORT",
        coordinator));
  }
  std::string host = coordinator.substr(prefix.size(), colon - prefix.size());
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  const std::string port = coordinator.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    // The coordinator's own address does not resolve: the worker could not
    // reach it either, so that is the error to name (not --exchange-bind).
    throw UsageError(
        fmt::format("the coordinator's host '{}' (--connect {}) does not resolve: {}; check the "
                    "name, or give the coordinator's IP address",
                    host, coordinator, ::gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(found, &::freeaddrinfo);
  // A UDP socket "connected" to the coordinator sends nothing; the kernel
  // only picks the route, and getsockname() names the local address on it.
  const int fd = ::socket(found->ai_family, SOCK_DGRAM, 0);
  if (fd < 0) throw std::runtime_error("cannot open a socket to pick the exchange address");
  sockaddr_storage local{};
  socklen_t length = sizeof local;
  const bool ok = ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
  ::close(fd);
  char text[INET6_ADDRSTRLEN] = {};
  if (ok && local.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&local)->sin_addr, text, sizeof text);
    return fmt::format("tcp://{}:*", text);
  }
  if (ok && local.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr, text, sizeof text);
    return fmt::format("tcp://[{}]:*", text);
  }
  throw std::runtime_error(
      fmt::format("no route from this host to the coordinator's '{}' to pick the exchange "
                  "address from; pass --exchange-bind tcp://IP:PORT",
                  host));
}

namespace {

ExchangeOptions exchange_options(const SocketSecurity& security) {
  ExchangeOptions options;
  options.security = security;
  // A data-plane peer connects to several servers, each its own key.
  options.security.server_public_key.clear();
  return options;
}

}  // namespace

WorkerDataPlane::WorkerDataPlane(const std::string& bind_address, const std::string& coordinator,
                                 const SocketSecurity& security,
                                 std::shared_ptr<spdlog::logger> log)
    : peer_(0, bind_address.empty() ? default_exchange_bind(coordinator) : bind_address,
            exchange_options(security)),
      log_(std::move(log)),
      endpoint_(peer_.endpoint()),
      curve_(security.curve) {
  if (curve_) {
    log_->info(
        "exchange: CURVE on the data plane with this worker's key {}; each round admits "
        "exactly its members' keys",
        security.own.public_key);
  }
  // Bound on every interface: advertise the one that reaches the coordinator.
  for (const std::string any : {"tcp://0.0.0.0:", "tcp://[::]:"}) {
    if (endpoint_.starts_with(any)) {
      const std::string host = default_exchange_bind(coordinator);  // tcp://IP:*
      endpoint_ = host.substr(0, host.size() - 1) + endpoint_.substr(any.size());
    }
  }
}

std::optional<std::string> WorkerDataPlane::plan_keys(uint64_t step, const v1::ExchangePlan& plan,
                                                      std::vector<std::string>& keys) const {
  keys.clear();
  if (!curve_) return std::nullopt;
  // Never plain TCP instead: this worker's control plane is CURVE.
  if (plan.member_keys_size() != plan.member_ranks_size()) {
    return fmt::format(
        "step {}: this worker runs CURVE but the plan names {} public keys for {} members, so "
        "its exchange links cannot be secured; the round is refused (run a coordinator that "
        "hands out the members' keys, or run without --secret-key)",
        step, plan.member_keys_size(), plan.member_ranks_size());
  }
  for (int i = 0; i < plan.member_ranks_size(); ++i) {
    if (!is_z85_key(plan.member_keys(i))) {
      return fmt::format(
          "step {}: the plan's public key for rank {} is not a CURVE key; the round is refused",
          step, plan.member_ranks(i));
    }
    const uint32_t r = plan.member_ranks(i);
    if (r >= keys.size()) keys.resize(r + 1);
    keys[r] = plan.member_keys(i);
  }
  return std::nullopt;
}

void WorkerDataPlane::admit(uint64_t step, const v1::ExchangePlan& plan) {
  std::vector<std::string> keys;
  if (!curve_ || plan_keys(step, plan, keys)) return;  // exchange() reports the problem
  peer_.set_member_keys(std::move(keys));
}

std::optional<std::string> WorkerDataPlane::join_group(uint64_t step, uint32_t rank,
                                                       const v1::ExchangePlan& plan) {
  if (plan.member_ranks_size() != plan.member_endpoints_size() || plan.member_ranks_size() == 0) {
    return fmt::format("step {}: the plan names {} members and {} endpoints", step,
                       plan.member_ranks_size(), plan.member_endpoints_size());
  }
  std::vector<std::string> endpoints;
  for (int i = 0; i < plan.member_ranks_size(); ++i) {
    const uint32_t r = plan.member_ranks(i);
    if (r >= endpoints.size()) endpoints.resize(r + 1);
    endpoints[r] = plan.member_endpoints(i);
  }
  std::vector<std::string> keys;
  if (auto problem = plan_keys(step, plan, keys)) return problem;
  if (plan.member_tokens_size() != plan.member_ranks_size()) {
    return fmt::format(
        "step {}: the plan names {} connection tokens for {} members; the round is refused (a "
        "coordinator of this protocol version names one per member)",
        step, plan.member_tokens_size(), plan.member_ranks_size());
  }
  std::vector<std::string> tokens;
  for (int i = 0; i < plan.member_ranks_size(); ++i) {
    const uint32_t r = plan.member_ranks(i);
    if (r >= tokens.size()) tokens.resize(r + 1);
    tokens[r] = plan.member_tokens(i);
  }
  if (tokens != tokens_) {
    peer_.set_member_tokens(tokens);
    tokens_ = std::move(tokens);
  }
  // Reconnect only when the group changed: a connect drops what is queued.
  if (rank == connected_rank_ && endpoints == endpoints_ && keys == keys_) return std::nullopt;
  peer_.set_rank(rank);
  peer_.set_member_keys(keys);
  try {
    peer_.connect(endpoints);
  } catch (const std::exception& e) {
    endpoints_.clear();  // connect again next round
    return fmt::format("step {}: {}", step, e.what());
  }
  endpoints_ = std::move(endpoints);
  keys_ = std::move(keys);
  connected_rank_ = rank;
  log_->debug("exchange: rank {} connected to {} members{}", rank, plan.member_ranks_size(),
              curve_ ? " over CURVE" : "");
  return std::nullopt;
}

v1::ExchangeReport WorkerDataPlane::exchange(uint64_t step, uint32_t rank,
                                             const v1::ExchangePlan& plan,
                                             std::span<const float> contribution,
                                             std::span<float> result, uint64_t samples,
                                             std::chrono::steady_clock::time_point deadline) {
  v1::ExchangeReport report;
  report.set_attempt(plan.attempt());
  const auto fail = [&](std::string why) {
    report.set_ok(false);
    report.set_error(std::move(why));
    return report;
  };
  if (auto problem = join_group(step, rank, plan)) return fail(std::move(*problem));
  const std::vector<uint32_t> members(plan.member_ranks().begin(), plan.member_ranks().end());
  const ExchangeRound round{step, plan.attempt(), plan.run()};
  const auto after_all_heard = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(std::max(0.0, plan.round_seconds())));
  // The schedule and the digest the coordinator chose for the round: every
  // member takes them.
  peer_.set_halving_from(plan.schedule() == v1::EXCHANGE_HALVING ? 1 : 0);
  const std::optional<SumDigestKind> digest =
      check_sums_ ? std::optional(from_wire(plan.sum_digest())) : std::nullopt;
  // A keyed check is taken after the round, when the coordinator sends its
  // key (Trainer::on_round_check_request); a hash as the sum lands.
  peer_.set_sum_digest(digest && !keyed(*digest) ? digest : std::nullopt);
  if (digest && digest != sum_digest_) {
    log_->info(
        "exchange: sum checks with {} from step {} (the coordinator's choice; this CPU "
        "offers {}, the faster first)",
        digest_name(*digest), step, digest_names(sum_digests_offered()));
  }
  sum_digest_ = digest;
  if (schedule_ != plan.schedule()) {
    schedule_ = plan.schedule();
    log_->info("exchange: rounds of {} members run the {} schedule from step {}", members.size(),
               plan.schedule() == v1::EXCHANGE_HALVING ? "halving (recursive halving and doubling)"
                                                       : "direct",
               step);
  }
  ExchangeOutcome out;
  try {
    out = peer_.exchange(round, members, contribution, samples, result, deadline, after_all_heard);
  } catch (const std::exception& e) {
    return fail(fmt::format("step {}: {}", step, e.what()));
  }
  report_outcome(step, plan, out, report);
  return report;
}

void WorkerDataPlane::report_outcome(uint64_t step, const v1::ExchangePlan& plan,
                                     ExchangeOutcome& out, v1::ExchangeReport& report) {
  report.set_ok(out.ok);
  report.set_samples(out.samples);
  report.set_exchange_seconds(std::chrono::duration<double>(out.elapsed).count());
  report.set_cancelled(out.cancelled);
  if (out.all_heard_after) {
    report.set_heard_from_all(true);
    report.set_round_seconds(
        std::chrono::duration<double>(out.elapsed - *out.all_heard_after).count());
  }
  // The star's coordinator checks the reduced update before anyone applies
  // it; here each member holds the sum itself, so each checks it (all hold
  // the same bits, so all refuse alike) and the coordinator drops the step.
  // The peer checked it piece by piece as the pieces landed.
  if (out.ok && !out.usable) {
    report.set_ok(false);
    report.set_sum_unusable(true);
    report.set_error(fmt::format(
        "step {}: the exchanged sum holds NaN, infinite or overflowing values (|x| >= 2^64); it is "
        "not applied",
        step));
    log_->error("{}", report.error());
    return;
  }
  if (out.ok) {
    // What this member holds, shard by shard (taken by the peer while the
    // pieces landed), for the coordinator to compare with every other
    // member's and with the sum forwarded to it.
    for (std::string& d : out.shard_digests) report.add_sum_digests(std::move(d));
    return;
  }
  // A member that connected before this peer admitted its key was refused
  // for good (ZeroMQ does not retry a failed handshake): open every link
  // afresh for the next round.
  if (curve_) endpoints_.clear();
  for (uint32_t s : out.suspects()) report.add_suspects(s);
  for (uint32_t m : out.missing_contributions) report.add_missing_contributions(m);
  for (uint32_t m : out.missing_results) report.add_missing_sums(m);
  report.set_error(out.error);
  if (out.cancelled) {
    log_->info("step {} attempt {}: the coordinator ended the round: {}", step, plan.attempt(),
               out.error);
  } else {
    log_->warn("step {}: exchange failed: {}", step, out.error);
  }
}

}  // namespace dctrain
