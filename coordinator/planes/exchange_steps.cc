// The coordinator's side of the data plane "exchange" (docs/scaling.md).
//
// The workers sum their gradients among themselves (exchange/): every plan
// names the step's round (the step and an attempt), its members in rank
// order with their endpoints, and how long a member may wait. Each member
// reports what it contributed (the contribution without the gradient:
// completed and dropped micro-batches, counts, times, its replica's
// checksum) and whether its round succeeded; the lowest member sends the
// round's sum right after its report, so the coordinator receives one
// gradient per step whatever N. The coordinator decides once for everyone,
// since members can disagree on a round (one that dies after sending its
// sum to some): the round is committed only if every planned member
// reported success and their digests of the sum agree, and it is committed
// on the reports alone, while the sum is still on its way (a forwarded sum
// is taken only with those digests); the step closes (and the next plans
// go out) once the sum is in. Should the lowest member die before its sum arrives, another
// member is asked for it (each holds the sum as summed until its next
// round, which needs the next plans); with no member left, the committed
// step is dropped after all: its micro-batches are requeued and the live
// members, which applied it, get the coordinator's state.
// Otherwise the round is redone among the members that reported (the ones
// blamed, dead or silent are out of the step, their micro-batches requeued),
// on what they computed, under the next attempt, up to
// data_plane.rounds_per_step rounds; past that, or with no member left, the
// step is dropped and every micro-batch of it requeued (or lost, without
// requeue), so the ledger stays exact. The commit carries the
// divisors and the learning rate, no tensors; the coordinator divides and
// applies the sum to its own replica after the commit and the next plans
// are out, off the step's critical path.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "comm/envelope.h"
#include "comm/framing.h"
#include "comm/validation.h"
#include "common/usable_values.h"
#include "coordinator/planes/exchange_blame.h"
#include "coordinator/planes/exchange_plane.h"
#include "exchange/chunk.h"
#include "exchange/schedule.h"
#include "exchange/sum_digest.h"

namespace dctrain {

namespace {

std::function<uint64_t()> or_random(std::function<uint64_t()> draw) {
  if (draw) return draw;
  return [] {
    std::random_device source;
    return (uint64_t{source()} << 32) ^ source();
  };
}

// What a hello's exchange peer offers; a hello that says nothing offers
// BLAKE2b, the only digest before the choice existed.
std::vector<SumDigestKind> offered_digests(const v1::Hello& hello) {
  std::vector<SumDigestKind> out;
  for (int k : hello.sum_digests()) out.push_back(from_wire(static_cast<v1::SumDigestKind>(k)));
  if (out.empty()) out.push_back(SumDigestKind::kBlake2b);
  return out;
}

std::optional<SumDigestKind> forced_sum_digest(const v1::DataPlaneConfig& data_plane) {
  return digest_from_name(data_plane.sum_digest());  // "" (automatic): none
}

}  // namespace

ExchangePlane::ExchangePlane(PlaneHost& host, PlaneRooms rooms, uint64_t run,
                             std::function<uint64_t()> draw_random)
    : DataPlane(rooms.replica.parameter_count(), rooms.replica.buffer_count()),
      exchange_run_(run),
      round_clock_(rooms.config.data_plane().timeout_seconds()),
      round_deadline_(rooms.config.data_plane()),
      host_(host),
      rooms_(rooms),
      draw_random_(or_random(std::move(draw_random))) {}

std::string_view ExchangePlane::description() const {
  return "exchange (the workers sum among themselves; this process commits each step)";
}

void ExchangePlane::joined(uint32_t rank, const v1::Hello& hello) {
  addresses_[rank] = {hello.exchange_endpoint(), hello.exchange_token(), offered_digests(hello)};
}

void ExchangePlane::open_step(const std::vector<uint32_t>& ranks, double now, double tau) {
  tau_ = tau;
  round_clock_.plan(now, tau, rooms_.config.liveness().grace_seconds(), false);
  exchange_attempt_ = 0;
  exchange_members_ = ranks;
  choose_step_digest(ranks);
  committed_ahead_.reset();
  refused_sums_.clear();
  round_check_.reset();
  round_check_passed_ = false;
  sum_awaited_since_.reset();
  refused_norm_in_step_ = 0;
  silent_after_.reset();
  reducer_.begin(ranks, false);  // the sum waits for apply_pending()
}

void ExchangePlane::add_to_plan(v1::Plan& plan) const {
  plan_round(plan, exchange_members_, 0);
}

std::optional<std::string> ExchangePlane::out_of_round(const v1::Contribution& c) const {
  if (c.exchange().attempt() == exchange_attempt_) return std::nullopt;
  return fmt::format("it reports exchange attempt {}; the step runs attempt {}",
                     c.exchange().attempt(), exchange_attempt_);
}

void ExchangePlane::tick(double now) {
  take_out_stopped_members(now);
  cancel_overdue_members(now);
  take_out_silent_members(now);
  members_lost(now);
  chase_committed_sum(now);
}

bool ExchangePlane::hold_open(double now) {
  if (refuse_disagreeing_sums(now)) return true;   // redone without the shard's owner
  if (check_round(now)) return true;               // waits for the answers, or redone
  if (commit_ahead_of_sum(now)) return true;       // the step closes once its sum is in
  judge_exchange_round();
  return redo_exchange(now);
}

void ExchangePlane::record(v1::StepRecord& record) const {
  record.set_exchange_rounds(exchange_attempt_ + 1);
  record.set_round_deadline_seconds(step_round_deadline_);
  if (rooms_.config.data_plane().check_sums()) {
    record.set_sum_digest(std::string(digest_name(sum_digest_)));
  }
}

std::optional<uint64_t> ExchangePlane::apply(ClosedStep& closed) {
  const double reduce_begin = rooms_.clock();
  const std::optional<uint64_t> checksum = commit_exchange(closed);
  closed.record.set_reduce_seconds(rooms_.clock() - reduce_begin);
  return checksum;
}

std::optional<std::string> ExchangePlane::hello_problem(const v1::Hello& hello) const {
  if (hello.exchange_endpoint().empty()) {
    return std::string(
        "this run's data plane is 'exchange' but the worker advertised no exchange endpoint: "
        "update dctrain-worker, or set data_plane { kind: \"star\" }");
  }
  if (hello.exchange_token().size() != kExchangeTokenBytes) {
    return fmt::format("its exchange token has {} bytes, not {}", hello.exchange_token().size(),
                       kExchangeTokenBytes);
  }
  // Both ends of the sum check must hash alike: a run that forces a digest
  // takes only workers that offer it.
  const std::vector<SumDigestKind> offered = offered_digests(hello);
  if (const auto forced = forced_sum_digest(rooms_.config.data_plane());
      forced && rooms_.config.data_plane().check_sums() &&
      std::find(offered.begin(), offered.end(), *forced) == offered.end()) {
    return fmt::format(
        "its exchange peer offers the sum digests [{}], and this run requires {} "
        "(data_plane.sum_digest): update dctrain-worker, or leave sum_digest unset",
        digest_names(offered), digest_name(*forced));
  }
  return std::nullopt;
}

void ExchangePlane::choose_step_digest(const std::vector<uint32_t>& ranks) {
  std::vector<std::vector<SumDigestKind>> offers{sum_digests_offered()};  // this process's
  for (uint32_t r : ranks) {
    const auto it = addresses_.find(r);
    if (it != addresses_.end()) offers.push_back(it->second.digests);
  }
  const std::optional<SumDigestKind> forced = forced_sum_digest(rooms_.config.data_plane());
  sum_digest_ = choose_sum_digest(forced, offers);
  const std::string name(digest_name(sum_digest_));
  if (!rooms_.config.data_plane().check_sums() || rooms_.totals.sum_digest() == name) return;
  rooms_.log->info(
      "sum checks: the members check each round's sum with {} from step {} ({}; "
      "data_plane.sum_digest)",
      name, host_.step(),
      forced ? "as the config says"
             : (sum_digest_ == SumDigestKind::kBlake2b
                    ? "the processes' fastest kinds differ, or none has SHA instructions or a "
                      "carry-less multiply"
                    : "the fastest on this process's and every member's CPU"));
  rooms_.totals.set_sum_digest(name);
}

bool ExchangePlane::halving_round(size_t members) const {
  const uint32_t from = rooms_.config.data_plane().halving_from_members();
  return schedule_for(members, from == 0 ? kHalvingFromMembers : from) ==
         ExchangeSchedule::kHalving;
}

void ExchangePlane::plan_round(v1::Plan& plan, std::vector<uint32_t> ranks,
                               uint32_t attempt) const {
  v1::ExchangePlan& x = *plan.mutable_exchange();
  x.set_attempt(attempt);
  x.set_run(exchange_run_);
  std::sort(ranks.begin(), ranks.end());
  bool curve = false;
  for (uint32_t r : ranks) {
    x.add_member_ranks(r);
    const auto it = addresses_.find(r);
    const bool known = it != addresses_.end();
    x.add_member_endpoints(known ? it->second.endpoint : std::string());
    x.add_member_tokens(known ? it->second.token : std::string());
    curve = curve || !rooms_.membership.at(r).key.empty();
  }
  // CURVE on the control plane: every member's authenticated key, so the
  // members' links are CURVE too (a member's key is "" only on plain links).
  if (curve) {
    for (uint32_t r : ranks) x.add_member_keys(rooms_.membership.at(r).key);
  }
  x.set_schedule(halving_round(ranks.size()) ? v1::EXCHANGE_HALVING : v1::EXCHANGE_DIRECT);
  x.set_sum_digest(to_wire(sum_digest_));
  // Once every member was heard from, a member waits this long for the rest
  // of the round (measured rounds; none before the first).
  if (round_deadline_.observed() > 0) {
    x.set_round_seconds(round_deadline_.seconds());
  }
  if (attempt > 0) {
    // A redo: the members computed already (or finish their compute first);
    // each waits the timeout from the start of its round.
    x.set_deadline_seconds(0.0);
    x.set_checksum_follows(true);
    return;
  }
  const double tau = plan.tau();
  const v1::LivenessConfig& live = rooms_.config.liveness();
  // Counted from the plan's arrival: a member waits for the others until
  // every one of them had its compute time (tau + grace) and then the
  // timeout; with tau = inf, the timeout from the end of its own compute.
  x.set_deadline_seconds(std::isinf(tau) ? 0.0 : tau + live.grace_seconds());
  x.set_checksum_follows(pending_apply_.has_value());
}

double ExchangePlane::deadline(double now, double tau) const {
  if (std::isinf(tau)) {
    // The members' reports (naming whom they blame, within the timeout of
    // the slowest compute) and the liveness checks close such a step.
    return std::numeric_limits<double>::infinity();
  }
  const v1::LivenessConfig& live = rooms_.config.liveness();
  return now + tau + live.grace_seconds() + rooms_.config.data_plane().timeout_seconds() +
         live.grace_seconds();
}

std::optional<std::string> ExchangePlane::contribution_problem(const Message& report) const {
  const v1::Contribution& c = report.envelope.contribution();
  if (!c.has_exchange()) {
    return std::string("it has no exchange report, but this run's data plane is 'exchange'");
  }
  // Whom it names must be other members of the round, each once: the blame
  // looks them up, and its work grows with what a report names.
  const v1::ExchangeReport& x = c.exchange();
  const auto named =
      [&](const char* field,
          const google::protobuf::RepeatedField<uint32_t>& ranks) -> std::optional<std::string> {
    if (ranks.size() > static_cast<int>(exchange_members_.size())) {
      return fmt::format("its exchange report names {} {} in a round of {} members", ranks.size(),
                         field, exchange_members_.size());
    }
    std::set<uint32_t> seen;
    for (uint32_t r : ranks) {
      if (!std::binary_search(exchange_members_.begin(), exchange_members_.end(), r)) {
        return fmt::format(
            "its exchange report names rank {} in {}, which is no member of the "
            "round (ranks {})",
            r, field, fmt::join(exchange_members_, ", "));
      }
      if (!seen.insert(r).second) {
        return fmt::format("its exchange report names rank {} twice in {}", r, field);
      }
    }
    return std::nullopt;
  };
  if (x.ok() && rooms_.config.data_plane().check_sums()) {
    // One digest per shard of the round: what the agreement compares (a
    // keyed check's tags come later, with the round check).
    const size_t digests = keyed(sum_digest_) ? 0 : exchange_members_.size();
    if (x.sum_digests_size() != static_cast<int>(digests)) {
      return fmt::format(
          "its exchange report says ok with {} sum digests in a round of {} shards checked by {}",
          x.sum_digests_size(), exchange_members_.size(), digest_name(sum_digest_));
    }
    for (const std::string& d : x.sum_digests()) {
      if (d.size() != kSumDigestBytes) {
        return fmt::format("its exchange report carries a sum digest of {} bytes, not {}", d.size(),
                           kSumDigestBytes);
      }
    }
  }
  if (auto p = named("suspects", x.suspects())) return p;
  if (auto p = named("missing_contributions", x.missing_contributions())) return p;
  if (auto p = named("missing_sums", x.missing_sums())) return p;
  if (report.envelope.tensors_size() != 0) {
    return fmt::format(
        "it carries {} tensors, but a report of the exchange carries none (the sum "
        "comes in an exchange sum of its own)",
        report.envelope.tensors_size());
  }
  return std::nullopt;
}

bool ExchangePlane::refuse_disagreeing_sums(double now) {
  if (committed_ahead_ || !exchange_reports_ok() || !rooms_.config.data_plane().check_sums() ||
      keyed(sum_digest_)) {
    return false;  // a keyed check's tags come with the round check (check_round)
  }
  std::map<uint32_t, std::vector<std::string>> digests;
  for (uint32_t rank : exchange_members_) {
    const v1::ExchangeReport& x = rooms_.book.at(rank).contribution->exchange();
    digests[rank].assign(x.sum_digests().begin(), x.sum_digests().end());
  }
  return refuse_disagreement(now, digests, "digest");
}

bool ExchangePlane::refuse_disagreement(double now,
                                        const std::map<uint32_t, std::vector<std::string>>& digests,
                                        std::string_view what) {
  // Every member holds the sum of every shard as its owner sent it: the
  // members' digests agree unless an owner sent different sums to different
  // members (or a member misreports what it holds). For each shard on which
  // they differ, its owner and the members whose digest differs from the
  // owner's own are out of the step, as both ends of a failed link are: one
  // member's word cannot tell which of the two lies. Two or more members
  // against the owner count as a failed round of the owner's.
  std::map<uint32_t, std::set<uint32_t>> accused;  // owner -> members that differ from it
  for (size_t shard = 0; shard < exchange_members_.size(); ++shard) {
    const uint32_t owner = exchange_members_[shard];
    const std::vector<std::string>& own = digests.at(owner);
    for (uint32_t rank : exchange_members_) {
      const std::vector<std::string>& theirs = digests.at(rank);
      // A report without digests (or too few) differs on every shard.
      if (shard >= own.size() || shard >= theirs.size() || theirs[shard] != own[shard]) {
        if (rank != owner) accused[owner].insert(rank);
      }
    }
  }
  if (accused.empty()) return false;
  std::set<uint32_t> out;
  for (const auto& [owner, differing] : accused) {
    out.insert(owner);
    out.insert(differing.begin(), differing.end());
    rooms_.log->error(
        "step {}: the members do not hold the same sum: the {} of the shard of worker '{}' "
        "(rank {}) differs on ranks {}; it is not committed",
        host_.step(), what, rooms_.membership.at(owner).name, owner, fmt::join(differing, ", "));
  }
  for (uint32_t rank : out) {
    host_.remove(rank, Removal::kLost,
                 fmt::format("the members' {}s of the round's sum disagree on its part", what));
  }
  for (const auto& [owner, differing] : accused) {
    if (differing.size() >= 2) {
      strike(owner, fmt::format("{} members hold another sum of its shard", differing.size()));
    }
  }
  return redo_among_the_rest(now, "the members' sums disagree");
}

void ExchangePlane::accept(uint32_t rank, Message report, double now) {
  Planned& p = rooms_.book.at(rank);
  const v1::Contribution& c = report.envelope.contribution();
  const v1::ExchangeReport& x = c.exchange();
  p.contribution = c;
  p.contribution->mutable_exchange()->clear_error();
  reducer_.settle(rank);
  // The others report about now, or once their compute is done: past the
  // round deadline after the later of the two (this clock's, whatever the
  // report says of the round), the ones left are asked to end it
  // (cancel_overdue_members). A member that reports early (failed, or
  // lying) asks nothing of those still inside the plan's compute bound.
  round_clock_.arrived(rank, now, c.compute_seconds(), x.heard_from_all());
  if (x.ok()) return;
  if (x.cancelled()) {
    rooms_.log->info("worker '{}' (rank {}) ended the round of step {} when asked",
                     rooms_.membership.at(rank).name, rank, host_.step());
    return;
  }
  // Whom it blames is weighed with the other members' reports (one report
  // alone can blame an innocent member: judge_exchange_round).
  const std::string& name = rooms_.membership.at(rank).name;
  rooms_.peer_log.peer_says(name,
                            fmt::format("worker '{}' (rank {}): exchange of step {} failed: {}",
                                        name, rank, host_.step(), peer_text(x.error())),
                            now);
}

void ExchangePlane::judge_exchange_round() {
  silent_after_.reset();
  std::vector<RoundReport> reports;
  std::set<uint32_t> silent;
  for (uint32_t rank : exchange_members_) {
    const Planned& p = rooms_.book.at(rank);
    if (!p.contribution || p.out()) {
      silent.insert(rank);
      continue;
    }
    const v1::ExchangeReport& x = p.contribution->exchange();
    RoundReport r;
    r.rank = rank;
    r.ok = x.ok();
    r.suspects.assign(x.suspects().begin(), x.suspects().end());
    r.missing_contributions.assign(x.missing_contributions().begin(),
                                   x.missing_contributions().end());
    r.missing_sums.assign(x.missing_sums().begin(), x.missing_sums().end());
    reports.push_back(std::move(r));
  }
  const RoundBlame blame = blame_exchange_round(
      reports, silent,
      halving_round(exchange_members_.size()) ? exchange_members_ : std::vector<uint32_t>{});
  const auto name = [&](uint32_t rank) {
    return fmt::format("worker '{}' (rank {})", rooms_.membership.at(rank).name, rank);
  };
  for (uint32_t rank : blame.out) {
    const bool unfounded = std::binary_search(blame.unfounded.begin(), blame.unfounded.end(), rank);
    // Why: a member that complained about it, else the one it complained
    // about (then neither report can say which end of their link failed,
    // unless others contradict its complaint).
    std::string why;
    for (const auto& [from, to] : blame.links) {
      if (unfounded || to != rank) continue;
      why = fmt::format("{} did not get its part of the exchange", name(from));
      break;
    }
    if (why.empty()) {
      for (const auto& [from, to] : blame.links) {
        if (from != rank) continue;
        why = unfounded
                  ? fmt::format(
                        "it blamed {}, whom another member heard from in full and who does not "
                        "blame it",
                        name(to))
                  : fmt::format(
                        "it did not get the part of {}, and nothing tells which end of "
                        "their link failed",
                        name(to));
        break;
      }
    }
    host_.remove(rank, Removal::kLost, why);
    // Presumed dead, as a silent member: a live one is asked to say hello
    // again when next heard, and is welcomed afresh, so the next round does
    // not wait for it again.
    host_.declare_dead(rank, why);
    // A failed round counts towards its release only when others
    // corroborate it and none contradicts it, or when its own complaint was
    // contradicted (exchange_blame.h): one member's word never gets another
    // released, nor two members' against a third that heard from it.
    if (std::binary_search(blame.struck.begin(), blame.struck.end(), rank)) {
      strike(rank, why);
    } else {
      rooms_.log->info(
          "worker '{}' (rank {}): not counted as a failed round (its failed links are one "
          "member's word, or another member heard from it in full)",
          rooms_.membership.at(rank).name, rank);
    }
  }
}

bool ExchangePlane::exchange_reports_ok() const {
  if (exchange_members_.empty()) return false;
  for (uint32_t rank : exchange_members_) {
    const Planned& p = rooms_.book.at(rank);
    if (!p.contribution || !p.contribution->exchange().ok()) return false;
  }
  return rooms_.book.at(exchange_members_.front()).contribution->exchange().sends_sum();
}

bool ExchangePlane::exchange_succeeded() const {
  // A round in which no member computed a sample has nothing to apply: it
  // succeeds on the reports alone, its sum not needed (the commit says
  // "nothing applied"; the micro-batches are dropped, as on the star).
  return exchange_reports_ok() && (exchange_sum_.has_value() || !exchange_commit().applied());
}

bool ExchangePlane::redo_exchange(double now) {
  // A committed round is never redone: its members applied it.
  if (exchange_succeeded() || exchange_sum_unusable() || committed_ahead_) return false;
  return redo_among_the_rest(now, "the exchange failed");
}

bool ExchangePlane::redo_among_the_rest(double now, const std::string& why) {
  std::vector<uint32_t> left;
  for (const auto& [rank, p] : rooms_.book) {
    if (p.contribution && !p.out() && rooms_.membership.at(rank).live) left.push_back(rank);
  }
  return plan_next_attempt(now, std::move(left), why);
}

bool ExchangePlane::plan_next_attempt(double now, std::vector<uint32_t> left,
                                      const std::string& why) {
  const uint32_t rounds = rooms_.config.data_plane().rounds_per_step();
  if (left.empty() || exchange_attempt_ + 1 >= rounds) return false;
  // A member of the old round left out of the new one (it died after it
  // reported): what it reported is not in the new sum.
  for (uint32_t rank : exchange_members_) {
    if (std::find(left.begin(), left.end(), rank) == left.end()) {
      host_.remove(rank, Removal::kLost,
                   "it is not in the round that is redone (it died or left after its report)");
    }
  }
  // Members still computing the step (a member died while they computed)
  // take the new plan after their compute, within the step's deadline.
  bool computing = false;
  for (uint32_t rank : left) computing = computing || !rooms_.book.at(rank).contribution;
  ++exchange_attempt_;
  silent_after_.reset();
  v1::RunTotals& t = rooms_.totals;
  t.set_exchange_rounds_redone(t.exchange_rounds_redone() + 1);
  rooms_.log->warn(
      "step {}: {}; the round is redone among the {} members left (ranks {}) on what they "
      "computed, round {} of at most {}",
      host_.step(), why, left.size(), fmt::join(left, ", "), exchange_attempt_ + 1, rounds);
  exchange_sum_.reset();
  committed_ahead_.reset();
  refused_sums_.clear();
  round_check_.reset();
  round_check_passed_ = false;
  sum_awaited_since_.reset();
  exchange_members_ = left;
  reducer_.begin(left, false);
  const double tau = tau_;
  round_clock_.plan(now, tau, rooms_.config.liveness().grace_seconds(), true);
  for (uint32_t rank : left) {
    rooms_.book.at(rank).contribution.reset();
    Message m;
    m.envelope = make_envelope(host_.step(), kCoordinatorName);
    v1::Plan& body = *m.envelope.mutable_plan();
    body.set_tau(tau);
    body.set_parameter_checksum(host_.start_checksum());
    plan_round(body, left, exchange_attempt_);
    host_.send(rooms_.membership.at(rank).name, std::move(m));
  }
  // The members wait the timeout from the plan's arrival; the liveness
  // checks close the round for one that never reports.
  const v1::LivenessConfig& live = rooms_.config.liveness();
  const double redo_deadline =
      now + rooms_.config.data_plane().timeout_seconds() + 2.0 * live.grace_seconds();
  host_.set_deadline(computing ? std::max(host_.deadline(), redo_deadline) : redo_deadline);
  return true;
}

GuardedStep ExchangePlane::settle() {
  step_round_deadline_ = round_deadline_.seconds();  // this step's, before it is observed
  GuardedStep out;
  out.discarded = exchange_sum_unusable();
  out.refused_norm = refused_norm_in_step_;
  if (exchange_succeeded()) {
    observe_round();
    return out;
  }
  exchange_sum_.reset();
  uint32_t dropped = 0;
  for (auto& [rank, p] : rooms_.book) {
    if (!p.contribution) continue;  // abandoned: already requeued
    host_.drop_from_step(rank);
    dropped += static_cast<uint32_t>(p.micro_batches.size());
  }
  const char* fate = rooms_.config.step().requeue() ? "requeued" : "lost";
  if (committed_ahead_ && committed_ahead_->lost) return out;  // said in ask_next_for_sum
  if (!out.discarded) {
    rooms_.log->warn(
        "step {}: the exchange did not succeed on every member; the step is dropped ({} "
        "more micro-batches {})",
        host_.step(), dropped, fate);
    return out;
  }
  v1::RunTotals& t = rooms_.totals;
  t.set_steps_discarded(t.steps_discarded() + 1);
  rooms_.log->error(
      "step {} discarded: the exchanged sum holds NaN, infinite or overflowing values (|x| >= "
      "2^64); nothing is applied on any replica, the step's {} micro-batches are {}, and the run "
      "goes on from the parameters it had (checksum {:016x}); {} bad steps in a row "
      "(guard.max_bad_steps_in_a_row: {})",
      host_.step(), dropped, fate, host_.start_checksum(), rooms_.guard.bad_in_a_row() + 1,
      rooms_.config.guard().max_bad_steps_in_a_row());
  return out;
}

}  // namespace dctrain
