// One peer of the data plane: an allreduce of one float buffer among the
// members of a round, over ZeroMQ, without a hub.
//
// Two schedules (exchange/round_schedule.h), chosen by the member count
// (ExchangeOptions::halving_from):
//   - direct reduce-scatter, then direct all-gather (exchange/mesh_round.h):
//     the buffer is cut into one shard per member (ExchangePlan); every
//     member sends each other member that member's shard of its
//     contribution, the owner sums and sends the sum to every other member.
//     2 hops, N - 1 peers and 2(N - 1) messages per member per piece;
//   - recursive halving, then recursive doubling (exchange/halving_round.h):
//     2 log2(N) hops, log2(N) peers (one more where N is not a power of
//     two) and about 2 log2(N) messages per member per piece.
// Each peer sends and receives about 2(N-1)/N of the buffer per round on
// both (halving: a folded member, where N is not a power of two, sends and
// receives the whole buffer once). Pieces of at most `piece_bytes` go on as
// soon as they are summed, so the phases overlap. Sends are zero-copy:
// ZeroMQ reads the pieces from the caller's buffers, and exchange() returns
// only once ZeroMQ holds none of them, i.e. every piece is in the kernel's
// socket buffers (so closing the peer right after loses nothing). A peer
// connects to a member the first time a round sends it something, and lets
// go of connections the round in force does not use.
//
// Summation: element i of the result is the tree of comm/rank_order_sum.h
// over the members' contributions in rank order, on both schedules and in
// coordinator/step/reducer.cc's star reduce, so the result is bit-identical
// on every member, to the star path and from run to run. The exchange only
// sums, and says whether the sum holds only usable values
// (ExchangeOutcome::usable): dividing by the completed samples stays with
// the caller, as does checking that its own contribution is finite.
//
// Failures: every round has a deadline. A member that is dead, stalled, or
// not in the round makes exchange() return a failure on every other member
// by the deadline (halving: naming whichever of its partners it lacks
// pieces from; the coordinator weighs every member's report,
// coordinator/planes/exchange_blame.h); nothing blocks past the deadline
// except releasing ZeroMQ's hold on the caller's buffers, which closing the
// stuck sockets makes prompt. Pieces carry the round (step, attempt): a
// piece of an earlier round is dropped, one of a later round is kept for it.
// What to do about a failure (redo the round under the next attempt without
// the suspect, or skip the step) is the caller's call; note that a round can
// fail on some members and succeed on others (a member that dies after
// sending its sum to some of them), so the caller settles a round's outcome
// with every member before applying it.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "comm/security.h"
#include "exchange/chunk.h"
#include "exchange/connection_cap.h"
#include "exchange/plan.h"
#include "exchange/round_cancel.h"
#include "exchange/schedule.h"
#include "exchange/sum_digest.h"
#include "exchange/zero_copy.h"

namespace dctrain {

class RoundSchedule;

struct ExchangeOptions {
  // The largest piece on the wire (a multiple of 4). Smaller pieces start
  // the all-gather sooner; larger ones cost fewer messages.
  size_t piece_bytes = size_t{1} << 20;
  // Rounds of at least this many members run the halving schedule, smaller
  // ones direct (0: direct always). Every member of a round must agree.
  size_t halving_from = kHalvingFromMembers;
  // Copy every piece into its message instead of sending it from the
  // caller's buffers. For measuring what zero-copy saves; results are the same.
  bool copy_sends = false;
  // ZeroMQ I/O threads of the peer's own context (the data plane does not
  // share one with the control plane, so a heartbeat never queues behind
  // megabytes). Two let sends and receives proceed in parallel where cores
  // are to spare; on the 2 shared cores here one is as fast (docs/scaling.md).
  int io_threads = 2;
  // Digest the sum as its pieces land with this hash (ExchangeOutcome::
  // shard_digests, what a worker reports); none only where every member is
  // trusted, or to measure what digests cost.
  std::optional<SumDigestKind> sum_digest = SumDigestKind::kBlake2b;
  // CURVE on the data plane, as on the control plane (comm/security.h):
  // `security.own` is this peer's key pair; its inbox is a CURVE server
  // admitting only `allowed_keys` (a ZapHandler in the peer's context), and
  // its outbox to rank r a CURVE client of `member_keys[r]`, that rank's
  // public key (connect() throws std::invalid_argument without one). A
  // piece is taken only from the connection authenticated with its sender's
  // key, so one member cannot send as another. set_member_keys() replaces
  // both lists. Nothing of this is used when !security.curve.
  SocketSecurity security;
  // With CURVE: how long the inbox holds a connection whose key is not (yet)
  // among the members' before refusing it. A member admits a round's keys
  // when its plan arrives, which can be after a faster member, done
  // computing, connects; ZeroMQ would not retry a refused handshake.
  std::chrono::milliseconds key_hold{10000};
  std::set<std::string> allowed_keys;
  std::vector<std::string> member_keys;  // by rank
};

struct ExchangeStats {
  uint64_t bytes_sent = 0;      // payload bytes handed to ZeroMQ
  uint64_t bytes_received = 0;  // payload bytes of this round's accepted pieces
  uint64_t pieces_sent = 0;
  uint64_t pieces_received = 0;  // accepted pieces of this round
  uint64_t stale = 0;            // pieces of an earlier round: dropped
  uint64_t early = 0;            // pieces of a later round: kept for it
  uint64_t refused = 0;          // malformed, from a non-member, duplicates, not in the plan
  std::string first_refusal;     // why the first refused piece was refused
  // Where the time went, from the start of exchange(): summing this peer's
  // shard (in all), the last piece of it summed, the last sum of another
  // shard in. elapsed - max(reduced_after, gathered_after) is the wait for
  // ZeroMQ to let go of the buffers.
  std::chrono::nanoseconds summing{0};
  std::chrono::nanoseconds reduced_after{0};
  std::chrono::nanoseconds gathered_after{0};
};

struct ExchangeOutcome {
  bool ok = false;
  // The result holds the full sum. True whenever ok; also when the only
  // failure was a member that stopped taking this peer's pieces.
  bool complete = false;
  // Every value of the result passed usable() (common/usable_values.h),
  // checked piece by piece as each was summed here or arrived, while it was
  // in cache, so that a caller need not read the whole sum again. Meaningful
  // when complete.
  bool usable = false;
  uint64_t samples = 0;                  // the members' sample counts, summed
  std::vector<uint64_t> member_samples;  // each member's, in rank order (as far as known)

  // Members whose contribution pieces to this peer had not all arrived.
  std::vector<uint32_t> missing_contributions;
  // Members (as shard owners) whose summed pieces had not all arrived. An
  // owner that lacks a contribution cannot send its sum, so these may be
  // innocent when missing_contributions is not empty.
  std::vector<uint32_t> missing_results;
  // Members still holding this peer's pieces at the deadline (not reading, or dead).
  std::vector<uint32_t> not_reading;
  // Members whose pieces disagreed with this round (other members, length or
  // piece size): a caller bug, reported at once.
  std::vector<uint32_t> conflicting;

  std::string error;  // empty when ok; otherwise where, what, and what to do
  // When ok (and ExchangeOptions::sum_digest): shard_digests() of the result
  // (exchange/sum_digest.h), taken while its pieces landed.
  std::vector<std::string> shard_digests;
  ExchangeStats stats;
  std::chrono::nanoseconds elapsed{0};
  // From the start of exchange() to the moment every other member had been
  // heard from (its first contribution piece was in): what is left of the
  // round after it is the round's own work, without the wait for the
  // slowest member's compute. Unset when some member was never heard from.
  std::optional<std::chrono::nanoseconds> all_heard_after;
  // Ended early from outside (RoundCancel): what was missing then is reported
  // as at a deadline.
  bool cancelled = false;
  // Ended by the limit after every member was heard from (`after_all_heard`).
  bool cut_short = false;

  // The members to blame: those that sent something conflicting; otherwise
  // those that did not contribute or did not read; failing those, the owners
  // whose sums are missing.
  std::vector<uint32_t> suspects() const;
};

class ExchangePeer {
 public:
  // Binds `bind_address`: tcp://HOST:PORT (port may be '*'), or, when every
  // member runs on this host, ipc://PATH (ipc://* for a fresh one), which
  // skips the TCP stack. Throws with the address and ZeroMQ's reason. The
  // process's allocator settings are the program's to make
  // (common/allocator.h: tune_allocator(), as both mains do), not a peer's.
  ExchangePeer(uint32_t rank, const std::string& bind_address, ExchangeOptions options = {});
  ~ExchangePeer();
  ExchangePeer(const ExchangePeer&) = delete;
  ExchangePeer& operator=(const ExchangePeer&) = delete;

  uint32_t rank() const { return rank_; }
  // A worker learns its rank only once welcomed, after it advertised its
  // endpoint: the new rank names this peer from the next connect() on.
  void set_rank(uint32_t rank) { rank_ = rank; }
  // The bound endpoint with its real port, e.g. tcp://127.0.0.1:41234.
  std::string endpoint() const;

  // The group: endpoints[r] is rank r's endpoint (empty: no such rank; this
  // peer's own entry is not used). Call again when a rank's endpoint
  // changes; that drops whatever is queued for the old group. Nothing is
  // opened here: a round opens a connection to a member the first time it
  // sends it a piece.
  void connect(std::vector<std::string> endpoints);

  // With CURVE: the members' public keys by rank (empty: no such rank). The
  // inbox admits exactly these from now on (connections already admitted
  // stay, but their pieces must carry their rank's key), and the next
  // connect() opens each outbox as a CURVE client of its rank's key.
  void set_member_keys(std::vector<std::string> keys);

  // This peer's token: the digest of the secret its connections carry in
  // their routing id (RANK.N.SECRET). Members are told it (the worker's
  // hello, then each plan) and take pieces as this rank's only from a
  // connection that carries the secret, so one member cannot send as
  // another even without CURVE (a wiretap on a plain link sees the secret;
  // CURVE hides it).
  const std::string& token() const { return token_; }
  // The members' tokens by rank (empty: no such rank). Empty as a whole, a
  // piece's sender is checked by the rank in its routing id only.
  void set_member_tokens(std::vector<std::string> tokens);

  // Messages over the caller's buffers that ZeroMQ still holds: zero
  // whenever exchange() has returned.
  size_t pieces_held() const { return releases_->in_flight(); }

  // One round: `result` (same length as `contribution`, may be the same
  // memory) receives the rank-order sum of the members' contributions.
  // `members`: ascending ranks, this peer among them, each with an
  // endpoint. Rounds must increase from call to call. Every member must
  // call with the same round, members and length. Throws
  // std::invalid_argument on arguments that break these rules; a failure of
  // the round itself comes back in the outcome. When the round fails,
  // `result` is unspecified, and so is `contribution` if it is the same memory.
  // Besides `deadline`, a round ends once `after_all_heard` (when above zero)
  // has passed since every other member was heard from: a member that sent
  // its first pieces and then stopped (a stopped process, a broken link) is
  // cut within a small multiple of a normal round, while a member that is
  // still computing (not yet heard from) is waited for until `deadline`. A
  // round also ends at once when cancel() ends it from another thread.
  ExchangeOutcome exchange(const ExchangeRound& round, std::span<const uint32_t> members,
                           std::span<const float> contribution, uint64_t samples,
                           std::span<float> result, std::chrono::steady_clock::time_point deadline,
                           std::chrono::nanoseconds after_all_heard = {});

  // This peer's connections to other members (its outboxes) open now: the
  // partners of the last round's schedule, at most log2(N) + 1 on the
  // halving schedule, N - 1 on the direct one.
  size_t outbox_connections() const;

  // The inbox's connections: open now, of those authenticated, and shut
  // down so far for being over its cap (twice the group's size and 16 more:
  // each member's connection, its reconnection while the old one closes,
  // and a margin; pending ones, not authenticated yet, are bounded apart:
  // exchange/connection_cap.h).
  size_t inbox_connections() const { return cap_->open(); }
  size_t inbox_authenticated() const { return cap_->authenticated(); }
  uint64_t inbox_connections_refused() const { return cap_->refused(); }

  // ExchangeOptions::sum_digest, from the next round on.
  void set_sum_digest(std::optional<SumDigestKind> kind) { options_.sum_digest = kind; }
  // ExchangeOptions::halving_from, from the next round on (a worker runs
  // the schedule its plan names).
  void set_halving_from(size_t members) { options_.halving_from = members; }

  // Ends rounds from another thread (the worker's session): see RoundCancel.
  RoundCancel& cancel() { return cancel_; }

 private:
  // How long a connection to the inbox may take to authenticate: longer than
  // the ZAP handler holds a key not admitted yet (ExchangeOptions::key_hold).
  std::chrono::milliseconds handshake_deadline() const {
    return options_.key_hold + std::chrono::milliseconds(2000);
  }
  struct Outgoing {
    zmq::message_t header;
    zmq::message_t payload;
  };
  // A piece of a later round, read while an earlier one ran.
  struct Early {
    ChunkHeader header;
    zmq::message_t payload;
    std::string key;  // the sender's authenticated key (CURVE), checked when taken
    std::string id;   // its connection's routing id, checked when taken
  };
  // The round's algorithm (exchange/round_schedule.h), and its pieces' way
  // out through this peer's outboxes (peer_round.cc).
  using Round = RoundSchedule;
  class Outboxes;

  void open_dealer(uint32_t rank);
  // Outboxes to ranks the round `r` does not send to closed (when nothing
  // of theirs is in flight): a new member list, or a switch from the direct
  // schedule to halving, leaves the old partners behind.
  void close_unused_outboxes(const RoundSchedule& r);
  void reset_dealer(uint32_t rank);
  void queue(uint32_t to, const ChunkHeader& header, const float* data, ExchangeStats& stats);
  bool flush(uint32_t to);
  // A piece whose sender the transport vouches for (its connection's
  // secret, its key) into the round.
  void accept(Round& r, const ChunkHeader& header, zmq::message_t&& payload, const std::string& key,
              const std::string& id, ExchangeOutcome& out);
  // Why a piece claiming rank `from` is not taken from connection `id`.
  std::optional<std::string> sender_problem(const std::string& id, uint32_t from);
  void handle(Round& r, std::vector<zmq::message_t>& parts, ExchangeOutcome& out);
  static void refuse(ExchangeOutcome& out, std::string why);

  // exchange()'s stages (peer_round.cc).
  // Throws std::invalid_argument on a caller's misuse (rounds that do not
  // increase, members not ascending or without this peer or an endpoint,
  // buffers of different lengths).
  void check_round(const ExchangeRound& round, std::span<const uint32_t> members,
                   size_t contribution, size_t result) const;
  // The pieces of this round read during an earlier one taken (earlier
  // rounds' dropped, later ones' kept).
  void take_early_pieces(Round& r, ExchangeOutcome& out);
  bool nothing_pending(const Round& r) const;
  // Pieces sent, received and summed until the round is complete, has a
  // conflict, is cancelled, or runs out of time; returns when it stopped
  // waiting.
  std::chrono::steady_clock::time_point run_round(Round& r,
                                                  std::chrono::steady_clock::time_point deadline,
                                                  std::chrono::nanoseconds after_all_heard,
                                                  ExchangeOutcome& out);
  // ZeroMQ's hold on the caller's buffers released (at most until `end`,
  // then the members that did not read are reset); what was still on its
  // way out, for the error.
  std::vector<std::string> let_go_of_buffers(Round& r, std::chrono::steady_clock::time_point end,
                                             ExchangeOutcome& out);
  // Why the round failed: where, what and what to do.
  std::string failure_text(const Round& r, const ExchangeOutcome& out,
                           const std::vector<std::string>& outgoing,
                           std::chrono::steady_clock::time_point end,
                           std::chrono::steady_clock::time_point deadline,
                           std::chrono::nanoseconds after_all_heard) const;

  uint32_t rank_;
  ExchangeOptions options_;
  zmq::context_t context_;           // first: destroyed after every socket
  std::unique_ptr<ZapHandler> zap_;  // with CURVE: authenticates the inbox's peers
  std::vector<std::string> endpoints_;
  // Declared before the sockets: destroyed after them, once ZeroMQ has
  // released every message over the caller's buffers.
  std::unique_ptr<ReleaseTracker> releases_;
  zmq::socket_t inbox_;                  // ROUTER: every piece sent to this peer
  std::unique_ptr<ConnectionCap> cap_;   // on the inbox's connections (after it: closed first)
  std::vector<zmq::socket_t> outboxes_;  // DEALER per rank (empty for this peer and absent ranks)
  std::vector<std::deque<Outgoing>> pending_;  // per rank: not yet taken by ZeroMQ
  std::vector<Early> early_;
  RoundCancel cancel_;
  std::string secret_;  // hex, random per peer: in every routing id of its connections
  std::string token_;   // its digest
  uint64_t connections_opened_ = 0;
  std::vector<std::string> member_tokens_;  // by rank
  std::vector<std::string> verified_ids_;   // by rank: the routing id whose secret was checked
  ExchangeRound last_round_{};
  bool any_round_ = false;
};

}  // namespace dctrain
