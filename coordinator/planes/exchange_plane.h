// The data plane "exchange" (coordinator/planes/data_plane.h; the protocol in
// exchange_steps.cc): the workers sum their gradients among themselves; the
// coordinator names each round's members, collects their reports, commits
// or redoes the round for all on the reports alone, and applies the sum
// that one member sends after its report once the commit and the next plans
// are out. Its parts:
//
//   exchange_steps.cc       the rounds: plan, collect the members' reports,
//                           judge, redo or settle
//   exchange_members.cc     liveness in a round: overdue, stopped, lost and
//                           silent members, and the strikes that release one
//   exchange_commit.cc      the commit, its forwarded sum, and the sum's
//                           apply to the coordinator's replica
//   exchange_round_check.cc the round's check before its commit: a keyed sum
//                           check, the norm guard (sketches)
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "coordinator/planes/data_plane.h"
#include "coordinator/planes/plane_host.h"
#include "coordinator/planes/round_check.h"
#include "coordinator/planes/round_clock.h"
#include "coordinator/planes/round_deadline.h"
#include "coordinator/step/step_book.h"
#include "exchange/sum_digest.h"
#include "proto/config.pb.h"

namespace dctrain {

class ExchangePlane final : public DataPlane {
 public:
  // `run`: this process's start (Unix microseconds), the `run` of its
  // rounds, later than any earlier process's of the same run.
  // `draw_random`: the round checks' seeds and keys, 64 bits a call (random
  // when empty).
  ExchangePlane(PlaneHost& host, PlaneRooms rooms, uint64_t run,
                std::function<uint64_t()> draw_random);

  std::string_view description() const override;
  // A worker without an exchange endpoint or with a token of the wrong size.
  std::optional<std::string> hello_problem(const v1::Hello& hello) const override;
  void joined(uint32_t rank, const v1::Hello& hello) override;
  void open_step(const std::vector<uint32_t>& ranks, double now, double tau) override;
  void add_to_plan(v1::Plan& plan) const override;
  double deadline(double now, double tau) const override;
  std::optional<std::string> out_of_round(const v1::Contribution& c) const override;
  // What is wrong with a member's report of its round, if anything: no
  // exchange report, tensors (the sum comes on its own), or ranks it names
  // (suspects, missing contributions and sums) that are not other members
  // of the round, named twice, or more than the round has.
  std::optional<std::string> contribution_problem(const Message& report) const override;
  // A member's report of the round. A failed one names whom it blames; the
  // blame is weighed once every member has reported (judge_exchange_round)
  // or the data plane's timeout has passed since the first failed report.
  void accept(uint32_t rank, Message report, double now) override;
  // The round's sum, from its lowest member or the one asked for it.
  void on_sum(uint32_t rank, Message message, double now) override;
  void on_round_check(uint32_t rank, const Message& message, double now) override;
  // Stopped, overdue and silent members; a committed sum that did not come.
  void tick(double now) override;
  // When a member of the round in flight is out of the step (it died, left,
  // went silent, was rejected) while others still wait in the round for its
  // pieces: the round is ended at once, redone among the members left on
  // what they computed (their plans of the next attempt end the old one),
  // or, with no rounds left, the step is dropped.
  void members_lost(double now) override;
  // Disagreeing sums, the norm guard, the commit ahead of the sum, the
  // blame of a failed round and its redo: true while the step stays open.
  bool hold_open(double now) override;
  // Drops the step unless every member's round succeeded; discarded (as the
  // star guard discards) when a member found the sum unusable.
  GuardedStep settle() override;
  // The rounds the step took and the round deadline it ran under.
  void record(v1::StepRecord& record) const override;
  std::optional<uint64_t> apply(ClosedStep& closed) override;
  // The committed sum into the coordinator's replica, if not done yet.
  std::optional<uint64_t> apply_pending() override;
  bool workers_ahead() const override { return committed_ahead_.has_value(); }

 private:
  // The round of `ranks` under `attempt` (0: the step's first round, after
  // the compute; above: a redo among the members left, on what they computed).
  void plan_round(v1::Plan& plan, std::vector<uint32_t> ranks, uint32_t attempt) const;
  // Whether a round of `members` members runs the halving schedule
  // (data_plane.halving_from_members).
  bool halving_round(size_t members) const;
  // The hash of this step's sum digests, from the config and what the
  // step's members and this process offer; logged when it changes.
  void choose_step_digest(const std::vector<uint32_t>& ranks);
  // The members of a round that have not reported by silent_after_: late
  // by this process's clock, out of the step (a missed step) and presumed
  // dead (welcomed afresh when heard again).
  void take_out_silent_members(double now);
  // Once the round is overdue (the round deadline after the later of its
  // first report and the end of the plan's compute bound, on this
  // process's clock: coordinator/planes/round_clock.h), the members that have not
  // reported are told to end the round and report what they have
  // (ExchangeCancel); those that cannot answer within the round deadline
  // are past every bound of the plan, and are taken out by
  // take_out_silent_members().
  void cancel_overdue_members(double now);
  // A member of the open step that has not reported and whose control plane
  // is silent for 3 heartbeats (a stopped process) is presumed dead then,
  // not after liveness.silence_seconds: a round waits on it.
  void take_out_stopped_members(double now);
  // A member failed a round by its own fault: counted (Member::
  // failed_rounds_in_a_row), and released at the limit.
  void strike(uint32_t rank, const std::string& why);
  // How long this process waits for a member's answer (a committed sum, a
  // sketch) in the current round: the round deadline, or in a run's first
  // round the multiple of that round's own measured time.
  double answer_seconds() const;
  // A committed round's time, as this process's clock measured it
  // (round_clock_), into the round deadline.
  void observe_round();
  // Once every member of a failed round reported or is out: takes out the
  // members coordinator/planes/exchange_blame.h judges at fault, before the redo.
  void judge_exchange_round();
  // Every member of the current round reported it ok, the lowest saying
  // that its sum follows.
  bool exchange_reports_ok() const;
  // That, and the sum is here (or no member computed a sample: nothing to
  // apply, no sum needed).
  bool exchange_succeeded() const;
  // When the round's reports are ok and its sum is not here yet: sends the
  // commit to the members (once), and returns true while the step waits for
  // the sum; false when the step can close (the sum is here, nothing is to
  // be applied, or no member is left to send the sum).
  bool commit_ahead_of_sum(double now);
  // A member's forwarded sum whose digests are not those its report gave
  // (then not those of the sum every member holds): why, after striking it.
  std::optional<std::string> forwarded_sum_problem(uint32_t rank, const Message& sum);
  // Every member reported the round ok, with a hash's digests of the sum
  // (not a keyed check): refuse_disagreement() on the reports' digests.
  bool refuse_disagreeing_sums(double now);
  // When the members' `digests` of the sum (`what`: "digest", "tag"), by
  // rank and shard, disagree: takes out the owners of the shards they disagree on and the
  // members that differ from them, and redoes the round (true), or leaves
  // the step to be dropped (false, also when they agree).
  bool refuse_disagreement(double now, const std::map<uint32_t, std::vector<std::string>>& digests,
                           std::string_view what);
  // The norm guard on the exchange (guard.norm_multiple, sum checks on, at
  // least 3 members, as the star's needs): on for this round.
  bool sketch_guard_on() const;
  // The round's sum check is keyed (exchange/sum_digest.h): its tags come
  // with the round check.
  bool keyed_sum_check_on() const;
  // A keyed check's key (kSumKeyBytes), from draw_random_.
  std::string draw_sum_key() const;
  // Once every member reported the round ok (and their digests agree), with
  // the norm guard or a keyed sum check on: asks them to check the round
  // (once; a keyed check's key only once the forwarded sum is here too), and
  // with the answers and the sum in, takes out the members whose tags or
  // contribution are refused and redoes the round without them
  // (coordinator/planes/round_check.h). True while the step waits for it, or
  // when it redid the round; false when the round may be committed (or no
  // check is on).
  bool check_round(double now);
  // The lowest member's sum did not come within `timeout`: struck, and
  // the entry that takes it out of the step.
  std::pair<uint32_t, std::string> withheld_sum(double timeout);
  // The tags the answers give against the forwarded sum's, as this process
  // takes them: a sender whose sum is not the one it holds, or members
  // that disagree (refuse_disagreement), are out and the round is redone
  // (true).
  bool refuse_differing_tags(double now);
  // The tags of the forwarded sum (here) under the round check's key.
  std::vector<std::string> tags_of_forwarded_sum() const;
  // The norm guard's judgement of the sketches against the round's `sum`:
  // the members it refuses are out and the round is redone (true).
  bool refuse_by_sketches(double now, std::span<const float> sum);
  // Removes the members named (`out`: rank -> why) and redoes the round
  // without them (true), or leaves the step to be dropped (false).
  bool redo_without(double now, Removal removal, const std::map<uint32_t, std::string>& out,
                    const std::string& why);
  // The committed round's sum not received from the member it was awaited
  // from, which died or let the data plane's timeout pass: asks the next.
  void chase_committed_sum(double now);
  // Asks the next member of the committed round that has not failed to send
  // its sum; with none left, the sum is lost (the step is dropped and the
  // members that applied it get the coordinator's state).
  void ask_next_for_sum(double now);
  // The commit of the current round: the divisors, the rate and whether
  // anything is applied, from the members' reports.
  v1::Update exchange_commit() const;
  // A member found the exchanged sum unusable (NaN, infinite, too large).
  bool exchange_sum_unusable() const;
  // When the round failed but members are left who reported, and the step
  // has rounds left (data_plane.rounds_per_step): plans the round again
  // among them under the next attempt and returns true; the step stays open.
  bool redo_exchange(double now);
  // Plans the round again among `members` under the next attempt, if the
  // step has rounds left (false otherwise).
  bool plan_next_attempt(double now, std::vector<uint32_t> members, const std::string& why);
  // The same among the members that reported and are still in the step and
  // alive (false: no rounds left, and close_step() goes on to drop the step).
  bool redo_among_the_rest(double now, const std::string& why);
  // The commit to the members (unless it went out ahead of the sum), the
  // whole update to a live worker outside the round, and the sum kept for
  // apply_pending().
  // Returns the replica's checksum when nothing is applied (apply()).
  std::optional<uint64_t> commit_exchange(ClosedStep& closed);
  // The pending sum into the reducer, checked: false when it is not usable
  // (then nothing is applied, and the workers resync to this replica).
  bool take_pending_sum();

  struct PendingApply {
    double divisor = 0.0;
    double statistics_divisor = 0.0;
    double lr = 0.0;
    uint64_t step = 0;           // the committed step (the open step moves on before the apply)
    std::optional<Message> sum;  // the lowest member's report, until take_pending_sum()
    bool usable = true;
    bool divided = false;
  };
  // A round committed on its reports, before its sum arrived.
  struct CommittedAhead {
    v1::Update commit;          // as the members got it
    uint32_t source = 0;        // the member the sum is awaited from
    double asked_at = 0.0;      // since when (the commit, or the request)
    std::set<uint32_t> failed;  // members that did not send it
    bool lost = false;          // no member left to send it
  };
  // What a member's hello said of its exchange peer.
  struct PeerAddress {
    std::string endpoint;
    std::string token;
    std::vector<SumDigestKind> digests;  // offered, the fastest first
  };
  std::map<uint32_t, PeerAddress> addresses_;  // by rank
  // The hash of the current step's sum digests (choose_sum_digest); the
  // run's totals keep the previous one's name, so a change is logged.
  SumDigestKind sum_digest_ = SumDigestKind::kBlake2b;
  std::optional<Message> exchange_sum_;  // the round's sum (an ExchangeSum), once it arrived
  std::optional<CommittedAhead> committed_ahead_;
  // Members of the current round whose forwarded sum was refused (its
  // digests were not the round's): the commit asks the next member at once.
  std::set<uint32_t> refused_sums_;
  // The current round's check (round_check.h), from the request until the
  // round is judged; passed once it let the round be committed.
  std::optional<RoundCheck> round_check_;
  bool round_check_passed_ = false;
  // A keyed check waits for the forwarded sum before it draws its key: since when.
  std::optional<double> sum_awaited_since_;
  // The forwarded sum's tags under the current round check's key, taken
  // once the request is out.
  std::vector<std::string> forwarded_tags_;
  uint32_t refused_norm_in_step_ = 0;  // contributions the norm guard took out, all rounds
  std::optional<PendingApply> pending_apply_;
  // This process's start (Unix microseconds): the `run` of its exchange
  // rounds, later than any earlier process's of the same run.
  uint64_t exchange_run_ = 0;
  uint32_t exchange_attempt_ = 0;  // the current step's round: 0, or the redo's number
  // The current round on this process's clock: the plan's compute bound,
  // the reports' arrivals, when the round is overdue, its own time.
  RoundClock round_clock_;
  // Once they were told: when those that still have not reported are taken
  // out (take_out_silent_members).
  std::optional<double> silent_after_;
  std::vector<uint32_t> exchange_members_;  // the current round's, ascending
  RoundDeadline round_deadline_;            // from measured rounds
  double step_round_deadline_ = 0.0;        // the open step's, before it is observed

  PlaneHost& host_;
  PlaneRooms rooms_;
  std::function<uint64_t()> draw_random_;
  double tau_ = 0.0;  // the open step's
};

}  // namespace dctrain
