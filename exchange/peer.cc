#include "exchange/peer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sodium.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "comm/rank_order_sum.h"
#include "comm/transport.h"
#include "common/usable_values.h"
#include "exchange/sum_digest.h"

namespace dctrain {

namespace {

// Bytes as lowercase hex.
std::string sodium_hex(std::span<const unsigned char> bytes) {
  std::string out(2 * bytes.size() + 1, '\0');
  sodium_bin2hex(out.data(), out.size(), bytes.data(), bytes.size());
  out.pop_back();
  return out;
}

// A connection secret's token: the digest members are told (BLAKE2b, 16
// bytes), from which the secret cannot be had.
std::string token_of(std::string_view secret) {
  std::string out(kExchangeTokenBytes, '\0');
  crypto_generichash(reinterpret_cast<unsigned char*>(out.data()), out.size(),
                     reinterpret_cast<const unsigned char*>(secret.data()), secret.size(), nullptr,
                     0);
  return out;
}

// Connections the inbox holds beyond its members' (and their reconnections).
constexpr size_t kConnectionMargin = 16;

// What the inbox's frame limit allows beyond a piece: CURVE's MESSAGE
// command (its name, nonce, box and flags) and the frame header.
constexpr size_t kFrameSlack = 256;

// Bytes from the wire as text for a message: printable ASCII as it is,
// anything else as \xNN. A connection's id is any bytes (ZeroMQ makes one
// up for a peer that sets none), and this text goes into a report whose
// string fields must be UTF-8: a report the coordinator cannot parse is
// dropped.
std::string printable(std::string_view bytes) {
  std::string out;
  for (const char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && c != '\\') {
      out += c;
    } else {
      out += fmt::format("\\x{:02x}", u);
    }
  }
  return out;
}

using Clock = std::chrono::steady_clock;

std::string describe(const ExchangeRound& round) {
  return fmt::format("step {}, attempt {}, run {}", round.step, round.attempt, round.run);
}

}  // namespace

std::vector<uint32_t> ExchangeOutcome::suspects() const {
  // A conflict ends the round at once, before the other members' pieces
  // could all arrive: what is missing then proves nothing.
  if (!conflicting.empty()) return conflicting;
  std::vector<uint32_t> out = missing_contributions;
  out.insert(out.end(), not_reading.begin(), not_reading.end());
  if (out.empty()) out = missing_results;
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The state of one round on this peer.
struct ExchangePeer::Round {
  Round(const ExchangeRound& id_, std::span<const uint32_t> members_, uint64_t length,
        uint64_t piece_floats, uint32_t rank)
      : id(id_),
        members(members_),
        digest(members_digest(members_)),
        plan(length, members_.size(), piece_floats) {
    const size_t n = members.size();
    me = position_of(rank);
    inputs.resize(plan.pieces(me));
    for (auto& piece : inputs) piece.resize(n);
    input_in.assign(plan.pieces(me), std::vector<bool>(n, false));
    inputs_in.assign(plan.pieces(me), 0);
    result_in.resize(n);
    results_missing.assign(n, 0);
    for (size_t p = 0; p < n; ++p) {
      if (p == me) continue;
      result_in[p].assign(plan.pieces(p), false);
      results_missing[p] = plan.pieces(p);
      results_missing_total += plan.pieces(p);
    }
    member_samples.assign(n, std::nullopt);
    unheard = n - 1;
    result_samples.assign(n, std::nullopt);
    conflict.assign(n, false);
  }

  // Position of `rank` among the members, or members.size() if it is none.
  size_t position_of(uint32_t rank) const {
    auto it = std::lower_bound(members.begin(), members.end(), rank);
    return (it != members.end() && *it == rank) ? static_cast<size_t>(it - members.begin())
                                                : members.size();
  }
  bool reduced_all() const { return pieces_reduced == inputs.size(); }
  bool complete() const { return reduced_all() && results_missing_total == 0; }

  ExchangeRound id;
  std::span<const uint32_t> members;
  uint64_t digest;
  ExchangePlan plan;
  size_t me = 0;
  std::span<const float> contribution;
  std::span<float> result;
  uint64_t own_samples = 0;
  ExchangeStats* stats = nullptr;
  Clock::time_point start;

  // This peer's shard: per piece, each member's copy (this peer's own slot
  // unused: it reads its contribution in place) and how many are in.
  std::vector<std::vector<zmq::message_t>> inputs;
  std::vector<std::vector<bool>> input_in;
  std::vector<size_t> inputs_in;
  size_t pieces_reduced = 0;
  // The other shards: which summed pieces have arrived from their owners.
  std::vector<std::vector<bool>> result_in;
  std::vector<size_t> results_missing;
  size_t results_missing_total = 0;

  std::vector<std::optional<uint64_t>> member_samples;  // from their contribution pieces
  size_t unheard = 0;  // other members none of whose contribution pieces is in yet
  std::optional<Clock::time_point> all_heard;  // when the last of them was heard from
  std::vector<std::optional<uint64_t>> result_samples;  // the totals the owners reported
  std::vector<bool> conflict;
  std::string first_conflict;
  // The sum's digests, taken as its pieces land (ExchangeOptions::digest_sum).
  std::optional<ShardDigester> digester;
  // A piece of the result (summed here or received) held a value that is not
  // usable().
  bool unusable = false;
};

ExchangePeer::ExchangePeer(uint32_t rank, const std::string& bind_address, ExchangeOptions options)
    : rank_(rank),
      options_(options),
      context_(std::max(1, options.io_threads)),
      releases_(std::make_unique<ReleaseTracker>(0)),
      inbox_(context_, zmq::socket_type::router) {
  if (sodium_init() < 0) throw std::runtime_error("exchange: libsodium cannot be initialised");
  unsigned char secret[16];
  randombytes_buf(secret, sizeof secret);
  secret_ = sodium_hex(secret);
  token_ = token_of(secret_);
  if (options_.piece_bytes < sizeof(float) || options_.piece_bytes % sizeof(float) != 0 ||
      options_.piece_bytes / sizeof(float) > std::numeric_limits<uint32_t>::max()) {
    throw std::invalid_argument(fmt::format(
        "exchange: piece_bytes {} must be a positive multiple of 4 below 16 GiB (1 MiB is a "
        "good size)",
        options_.piece_bytes));
  }
  inbox_.set(zmq::sockopt::linger, 0);
  // A routing id belongs to the connection that came first: a second
  // connection under it gets nothing in while the first is open (with
  // handover, one member could take over another's connection and fail
  // every round between them). Members' ids are unique per connection
  // (open_dealer), so no honest reconnect collides.
  inbox_.set(zmq::sockopt::router_handover, 0);
  // No frame larger than a piece (the 80-byte header is smaller), with room
  // for CURVE's framing, which the limit counts: ZeroMQ closes a connection
  // that sends one instead of holding it.
  inbox_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(options_.piece_bytes + kFrameSlack));
  // A connection whose handshake is not done by then (a bare TCP one, a key
  // nobody admits) is closed by ZeroMQ; the cap shuts it down too.
  inbox_.set(zmq::sockopt::handshake_ivl, static_cast<int>(handshake_deadline().count()));
  if (options_.security.curve) {
    // Before the bind, so that no connection goes unauthenticated.
    zap_ = std::make_unique<ZapHandler>(context_, AllowList::of(options_.allowed_keys),
                                        spdlog::default_logger(), options_.key_hold);
    secure_socket(inbox_, SocketRole::kServer, options_.security);
  }
  try {
    inbox_.bind(bind_address);
  } catch (const zmq::error_t& e) {
    throw std::runtime_error(fmt::format(
        "exchange: rank {} cannot bind '{}': {} (is the port in use? use tcp://HOST:PORT, port * "
        "for any free port, or ipc://* on one host)",
        rank_, bind_address, e.what()));
  }
  cap_ =
      std::make_unique<ConnectionCap>(context_, inbox_, kConnectionMargin * 4,
                                      options_.security.curve ? ConnectionCap::kCurveHandshakeBytes
                                                              : ConnectionCap::kNullHandshakeBytes,
                                      handshake_deadline());
}

ExchangePeer::~ExchangePeer() {
  for (auto& s : outboxes_) {
    if (s.handle() != nullptr) s.close();  // linger 0: ZeroMQ drops, and releases, what it held
  }
  pending_.clear();
  releases_.reset();  // waits for ZeroMQ's releases
}

std::string ExchangePeer::endpoint() const {
  return inbox_.get(zmq::sockopt::last_endpoint);
}

void ExchangePeer::open_dealer(uint32_t rank) {
  zmq::socket_t s(context_, zmq::socket_type::dealer);
  // RANK.N.SECRET: unique to this connection (a reconnect never collides
  // with the old connection's id while that one closes), and proof of this
  // process's secret to members that know its token.
  s.set(zmq::sockopt::routing_id, fmt::format("{}.{}.{}", rank_, ++connections_opened_, secret_));
  s.set(zmq::sockopt::linger, 0);
  if (options_.security.curve) {
    if (rank >= options_.member_keys.size() || options_.member_keys[rank].empty()) {
      throw std::invalid_argument(fmt::format(
          "exchange: rank {} has no public key for rank {} (ExchangeOptions::member_keys)", rank_,
          rank));
    }
    secure_socket(s, SocketRole::kClient, options_.security, options_.member_keys[rank]);
  }
  try {
    s.connect(endpoints_[rank]);
  } catch (const zmq::error_t& e) {
    throw std::invalid_argument(
        fmt::format("exchange: rank {} cannot connect to rank {} at '{}': {} (expected "
                    "tcp://HOST:PORT or ipc://PATH)",
                    rank_, rank, endpoints_[rank], e.what()));
  }
  outboxes_[rank] = std::move(s);
}

void ExchangePeer::reset_dealer(uint32_t rank) {
  outboxes_[rank].close();
  pending_[rank].clear();
  releases_->wait_released(rank);
  open_dealer(rank);
}

void ExchangePeer::set_member_tokens(std::vector<std::string> tokens) {
  member_tokens_ = std::move(tokens);
  verified_ids_.assign(member_tokens_.size(), std::string());
}

std::optional<std::string> ExchangePeer::sender_problem(const std::string& id, uint32_t from) {
  if (member_tokens_.empty()) return std::nullopt;  // no tokens given: names only
  if (from < verified_ids_.size() && verified_ids_[from] == id) return std::nullopt;
  // RANK.N.SECRET (open_dealer); the rank was checked on arrival.
  const size_t first = id.find('.');
  const size_t second = first == std::string::npos ? first : id.find('.', first + 1);
  const std::string secret = second == std::string::npos ? std::string() : id.substr(second + 1);
  if (from >= member_tokens_.size() || member_tokens_[from].empty() ||
      token_of(secret) != member_tokens_[from]) {
    return fmt::format("a piece that claims rank {} from a connection without its secret ('{}')",
                       from, printable(id.substr(0, std::min<size_t>(id.size(), 24))));
  }
  verified_ids_[from] = id;
  return std::nullopt;
}

void ExchangePeer::set_member_keys(std::vector<std::string> keys) {
  if (!options_.security.curve) return;
  std::set<std::string> allowed;
  for (const std::string& k : keys) {
    if (!k.empty()) allowed.insert(k);
  }
  zap_->allow(AllowList::of(allowed));
  options_.allowed_keys = std::move(allowed);
  options_.member_keys = std::move(keys);
}

void ExchangePeer::connect(std::vector<std::string> endpoints) {
  for (auto& s : outboxes_) {
    if (s.handle() != nullptr) s.close();
  }
  pending_.clear();
  // The old tracker waits in its destructor until ZeroMQ has released
  // everything the closed sockets held.
  releases_ = std::make_unique<ReleaseTracker>(endpoints.size());
  endpoints_ = std::move(endpoints);
  cap_->set_limit(2 * endpoints_.size() + kConnectionMargin);
  outboxes_.clear();
  outboxes_.resize(endpoints_.size());
  pending_.resize(endpoints_.size());
  for (uint32_t r = 0; r < endpoints_.size(); ++r) {
    if (r != rank_ && !endpoints_[r].empty()) open_dealer(r);
  }
}

void ExchangePeer::queue(Round& r, uint32_t to, const ChunkHeader& header, const float* data) {
  const auto bytes = encode_header(header);
  Outgoing o{zmq::message_t(bytes.data(), bytes.size()), zmq::message_t()};
  const size_t payload = header.count * sizeof(float);
  if (payload > 0) {
    o.payload = options_.copy_sends ? releases_->copy(to, data, payload)
                                    : releases_->wrap(to, data, payload);
  }
  ++r.stats->pieces_sent;
  r.stats->bytes_sent += payload;
  pending_[to].push_back(std::move(o));
  flush(to);
}

bool ExchangePeer::flush(uint32_t to) {
  auto& q = pending_[to];
  zmq::socket_t& s = outboxes_[to];
  while (!q.empty()) {
    if (!s.send(q.front().header, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      return false;  // the high-water mark: poll for room
    }
    // Once the first part is taken, ZeroMQ takes the rest of the message.
    (void)s.send(q.front().payload, zmq::send_flags::none);
    q.pop_front();
  }
  return true;
}

void ExchangePeer::reduce_piece(Round& r, size_t k) {
  const PieceRange p = r.plan.piece(r.me, k);
  std::vector<const std::byte*> sources(r.members.size());
  for (size_t m = 0; m < sources.size(); ++m) {
    sources[m] = m == r.me ? reinterpret_cast<const std::byte*>(r.contribution.data() + p.offset)
                           : static_cast<const std::byte*>(r.inputs[k][m].data());
  }
  if (p.count > 0) {
    const std::span<float> sum = r.result.subspan(p.offset, p.count);
    const auto begin = Clock::now();
    sum_in_rank_order(sources, p.count, sum.data());
    r.stats->summing += Clock::now() - begin;
    // Checked while the piece is in cache (outside the summing figure).
    r.unusable = r.unusable || !usable(sum);
  }
  for (auto& m : r.inputs[k]) m = zmq::message_t();  // the receive buffers go back now
  uint64_t total = 0;
  for (size_t m = 0; m < r.members.size(); ++m) {
    total += m == r.me ? r.own_samples : r.member_samples[m].value_or(0);
  }
  ChunkHeader h{PieceKind::kResult,
                rank_,
                static_cast<uint32_t>(r.members.size()),
                r.digest,
                r.id,
                r.plan.length(),
                static_cast<uint32_t>(r.plan.piece_floats()),
                p.offset,
                p.count,
                total};
  for (size_t m = 0; m < r.members.size(); ++m) {
    if (m != r.me) queue(r, r.members[m], h, r.result.data() + p.offset);
  }
  if (r.digester) r.digester->landed(r.me, k);  // after the sends: they go first
  if (++r.pieces_reduced == r.inputs.size()) r.stats->reduced_after = Clock::now() - r.start;
}

void ExchangePeer::accept(Round& r, const ChunkHeader& h, zmq::message_t&& payload,
                          const std::string& key, const std::string& id, ExchangeOutcome& out) {
  const size_t from = r.position_of(h.from);
  if (from == r.members.size() || from == r.me) {
    return refuse(out, fmt::format("a piece from rank {}, not a member", h.from));
  }
  if (auto problem = sender_problem(id, h.from)) return refuse(out, std::move(*problem));
  if (options_.security.curve &&
      (h.from >= options_.member_keys.size() || key != options_.member_keys[h.from])) {
    return refuse(out, fmt::format("a piece that claims rank {} from a connection authenticated "
                                   "with another key ({})",
                                   h.from, key.empty() ? std::string("none") : key));
  }
  auto conflict = [&](std::string why) {
    if (!r.conflict[from] && r.first_conflict.empty()) {
      r.first_conflict = fmt::format("rank {}: {}", h.from, why);
    }
    r.conflict[from] = true;
  };
  if (h.members != r.members.size() || h.members_digest != r.digest) {
    return conflict(fmt::format("runs this round among {} other members (this peer: {})", h.members,
                                fmt::join(r.members, ",")));
  }
  if (h.length != r.plan.length() || h.piece_floats != r.plan.piece_floats()) {
    return conflict(fmt::format(
        "exchanges {} floats in pieces of {} (this peer: {} in pieces of {}; same model and "
        "piece_bytes on every member?)",
        h.length, h.piece_floats, r.plan.length(), r.plan.piece_floats()));
  }
  if (payload.size() != h.count * sizeof(float)) {
    return conflict(fmt::format("piece of {} floats came with {} bytes", h.count, payload.size()));
  }
  if (h.kind == PieceKind::kContribution) {
    const auto k = r.plan.piece_at(r.me, h.offset, h.count);
    if (!k)
      return conflict(fmt::format("[{}, +{}) is no piece of this peer's shard", h.offset, h.count));
    if (r.input_in[*k][from]) {
      return refuse(out, fmt::format("a second copy of rank {}'s piece at {}", h.from, h.offset));
    }
    if (r.member_samples[from] && *r.member_samples[from] != h.samples) {
      return conflict(
          fmt::format("reports {} samples, earlier {}", h.samples, *r.member_samples[from]));
    }
    if (!r.member_samples[from] && --r.unheard == 0) r.all_heard = Clock::now();
    r.member_samples[from] = h.samples;
    r.input_in[*k][from] = true;
    r.inputs[*k][from] = std::move(payload);
    ++out.stats.pieces_received;
    out.stats.bytes_received += h.count * sizeof(float);
    if (++r.inputs_in[*k] == r.members.size() - 1) reduce_piece(r, *k);
    return;
  }
  const auto k = r.plan.piece_at(from, h.offset, h.count);
  if (!k) return conflict(fmt::format("[{}, +{}) is no piece of its shard", h.offset, h.count));
  if (r.result_in[from][*k]) {
    return refuse(out, fmt::format("a second copy of rank {}'s sum at {}", h.from, h.offset));
  }
  if (r.result_samples[from] && *r.result_samples[from] != h.samples) {
    return conflict(fmt::format("reports a total of {} samples, earlier {}", h.samples,
                                *r.result_samples[from]));
  }
  r.result_samples[from] = h.samples;
  if (h.count > 0) {
    const std::span<float> sum = r.result.subspan(h.offset, h.count);
    std::memcpy(sum.data(), payload.data(), payload.size());
    r.unusable = r.unusable || !usable(sum);
  }
  r.result_in[from][*k] = true;
  if (r.digester) r.digester->landed(from, *k);
  --r.results_missing[from];
  if (--r.results_missing_total == 0) out.stats.gathered_after = Clock::now() - r.start;
  ++out.stats.pieces_received;
  out.stats.bytes_received += h.count * sizeof(float);
}

void ExchangePeer::refuse(ExchangeOutcome& out, std::string why) {
  if (out.stats.refused++ == 0) out.stats.first_refusal = std::move(why);
}

void ExchangePeer::handle(Round& r, std::vector<zmq::message_t>& parts, ExchangeOutcome& out) {
  // ROUTER parts: the sender's routing id, the header, the payload.
  if (parts.size() != 3) {
    return refuse(out, fmt::format("a message of {} parts, not 3", parts.size()));
  }
  std::string why;
  const auto h =
      parse_header(std::span(static_cast<const std::byte*>(parts[1].data()), parts[1].size()), why);
  if (!h) return refuse(out, "a piece whose header is no header: " + why);
  const std::string id = parts[0].to_string();
  const std::string rank = std::to_string(h->from);
  if (id != rank && !id.starts_with(rank + ".")) {
    return refuse(out, fmt::format("a piece that claims rank {} from connection '{}'", h->from,
                                   printable(id)));
  }
  if (h->round < r.id) {
    ++out.stats.stale;
    return;
  }
  if (h->round > r.id) {
    // A piece of a later run: its coordinator started after this round's.
    // Members learn of a new run from its first plan, so such a piece comes
    // from a member that has, and this one will take part in that round
    // only after it has ended this one: not kept, as no sender could be
    // bounded that way (a later run's every step is "later").
    if (h->round.run != r.id.run) {
      return refuse(out, fmt::format("a piece of a later run ({}) than this round's",
                                     describe(h->round)));
    }
    // Kept for its round, within a bound in bytes and in count (empty pieces
    // cost no bytes): a member is at most one round ahead, and sends this
    // peer less than the whole buffer per round, in at most this peer's
    // shard's pieces and its own shard's.
    size_t held = 0;
    for (const Early& e : early_) held += e.payload.size();
    size_t pieces_per_round = (r.members.size() - 1) * r.plan.pieces(r.me);
    for (size_t p = 0; p < r.members.size(); ++p) pieces_per_round += r.plan.pieces(p);
    if (held + parts[2].size() > 2 * r.plan.length() * sizeof(float) + (size_t{1} << 20) ||
        early_.size() >= 2 * pieces_per_round + 64) {
      return refuse(out, fmt::format("a piece of a later round ({}) beyond what is kept",
                                     describe(h->round)));
    }
    ++out.stats.early;
    early_.push_back(Early{*h, std::move(parts[2]), authenticated_key(parts[1]), id});
    return;
  }
  // The header came off the wire (the routing id is the ROUTER's own frame)
  // and carries the connection's properties: its authenticated key.
  accept(r, *h, std::move(parts[2]), authenticated_key(parts[1]), id, out);
}

ExchangeOutcome ExchangePeer::exchange(const ExchangeRound& round,
                                       std::span<const uint32_t> members,
                                       std::span<const float> contribution, uint64_t samples,
                                       std::span<float> result, Clock::time_point deadline,
                                       std::chrono::nanoseconds after_all_heard) {
  const auto start = Clock::now();
  auto misuse = [&](const std::string& what) {
    throw std::invalid_argument(
        fmt::format("exchange ({}) on rank {}: {}", describe(round), rank_, what));
  };
  if (any_round_ && round <= last_round_) {
    misuse(fmt::format("rounds must increase; the last was ({})", describe(last_round_)));
  }
  if (!std::is_sorted(members.begin(), members.end()) ||
      std::adjacent_find(members.begin(), members.end()) != members.end()) {
    misuse(fmt::format("members [{}] must be ascending ranks, each once", fmt::join(members, ",")));
  }
  if (!std::binary_search(members.begin(), members.end(), rank_)) {
    misuse(fmt::format("members [{}] do not include this peer", fmt::join(members, ",")));
  }
  for (uint32_t m : members) {
    if (m != rank_ && (m >= outboxes_.size() || outboxes_[m].handle() == nullptr)) {
      misuse(fmt::format("member {} has no endpoint (call connect() with every member's)", m));
    }
  }
  if (contribution.size() != result.size()) {
    misuse(
        fmt::format("contribution has {} floats, result {}", contribution.size(), result.size()));
  }
  last_round_ = round;
  any_round_ = true;

  ExchangeOutcome out;
  if (cancel_.ended(round)) {
    // Ended before it began (the caller's session heard that the round is
    // over while the caller computed): nothing is sent for it.
    out.cancelled = true;
    out.error = fmt::format("exchange ({}) on rank {}: ended from outside before it began",
                            describe(round), rank_);
    return out;
  }
  Round r(round, members, contribution.size(), options_.piece_bytes / sizeof(float), rank_);
  r.contribution = contribution;
  r.result = result;
  r.own_samples = samples;
  r.stats = &out.stats;
  r.start = start;
  if (options_.digest_sum) r.digester.emplace(r.plan, result);
  const size_t n = members.size();

  // Pieces of earlier rounds are dropped, this round's taken, later ones kept.
  std::vector<Early> early = std::move(early_);
  early_.clear();
  for (Early& e : early) {
    if (e.header.round < round) {
      ++out.stats.stale;
    } else if (e.header.round == round) {
      accept(r, e.header, std::move(e.payload), e.key, e.id, out);
    } else {
      early_.push_back(std::move(e));
    }
  }

  if (n == 1) r.all_heard = start;
  if (n == 1) {
    const std::byte* own[] = {reinterpret_cast<const std::byte*>(contribution.data())};
    sum_in_rank_order(own, contribution.size(), result.data());
    r.unusable = !usable(result);
    r.pieces_reduced = r.inputs.size();
    if (r.digester) {
      for (size_t k = 0; k < r.plan.pieces(0); ++k) r.digester->landed(0, k);
    }
  } else {
    // Piece k to every other member before piece k + 1 to any, starting
    // with the next member, so every owner can begin summing early.
    size_t most = 0;
    for (size_t p = 0; p < n; ++p) most = std::max(most, r.plan.pieces(p));
    for (size_t k = 0; k < most; ++k) {
      for (size_t step = 1; step < n; ++step) {
        const size_t to = (r.me + step) % n;
        if (k >= r.plan.pieces(to)) continue;
        const PieceRange p = r.plan.piece(to, k);
        ChunkHeader h{PieceKind::kContribution,
                      rank_,
                      static_cast<uint32_t>(n),
                      r.digest,
                      round,
                      r.plan.length(),
                      static_cast<uint32_t>(r.plan.piece_floats()),
                      p.offset,
                      p.count,
                      samples};
        queue(r, members[to], h, contribution.data() + p.offset);
      }
    }
  }

  auto any_conflict = [&] { return !r.first_conflict.empty(); };
  auto pending_empty = [&] {
    for (uint32_t m : members) {
      if (m != rank_ && !pending_[m].empty()) return false;
    }
    return true;
  };
  std::vector<zmq::message_t> parts;
  std::vector<zmq::pollitem_t> items;
  // When the round gives up: the deadline, or earlier once every member was
  // heard from (`after_all_heard`), or now when it is cancelled.
  Clock::time_point end = deadline;
  while (!any_conflict()) {
    for (uint32_t m : members) {
      if (m != rank_) flush(m);
    }
    if (r.complete() && pending_empty()) break;
    if (cancel_.ended(round)) {
      out.cancelled = true;
      end = Clock::now();
      break;
    }
    if (r.all_heard && after_all_heard > std::chrono::nanoseconds::zero()) {
      end = std::min(deadline, *r.all_heard + after_all_heard);
    }
    const auto now = Clock::now();
    if (now >= end) {
      out.cut_short = end < deadline;
      break;
    }
    items.clear();
    items.push_back({static_cast<void*>(inbox_), 0, ZMQ_POLLIN, 0});
    items.push_back({nullptr, cancel_.fd(), ZMQ_POLLIN, 0});
    for (uint32_t m : members) {
      if (m != rank_ && !pending_[m].empty()) {
        items.push_back({static_cast<void*>(outboxes_[m]), 0, ZMQ_POLLOUT, 0});
      }
    }
    // Rounded up, so a wait never ends just short of the deadline and spins.
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(end - now);
    zmq::poll(items.data(), items.size(), wait);
    if (items[1].revents & ZMQ_POLLIN) cancel_.drain();  // the mark is read above
    // A bounded batch, so pieces waiting for room get their turn.
    for (int i = 0; i < 256 && receive_parts(inbox_, parts, false); ++i) handle(r, parts, out);
  }
  out.complete = r.complete() && !any_conflict();
  out.usable = out.complete && !r.unusable;
  // For the error, if any: what this peer still had on its way out.
  std::vector<std::string> outgoing;
  for (uint32_t m : members) {
    if (m == rank_) continue;
    const size_t queued = pending_[m].size(), held = releases_->in_flight(m);
    if (queued + held > 0) {
      outgoing.push_back(fmt::format("rank {}: {} queued, {} in ZeroMQ", m, queued, held));
    }
  }
  // ZeroMQ must let go of the caller's buffers before this returns. Pieces it
  // never took are dropped now; a member still holding pieces at the
  // deadline has its socket closed (ZeroMQ then drops them) and reopened.
  // Such a member is blamed only when nothing else went wrong: when the
  // round failed anyway, pieces still in flight at the deadline prove nothing.
  for (uint32_t m : members) {
    if (m == rank_ || pending_[m].empty()) continue;
    if (out.complete) out.not_reading.push_back(m);  // ZeroMQ would not even queue more for it
    pending_[m].clear();
  }
  // Members that read take their pieces promptly, also after a conflict
  // (they then see it themselves); only a member that does not read keeps
  // this waiting until the deadline.
  if (!releases_->wait_all(end)) {
    for (uint32_t m : members) {
      if (m == rank_ || releases_->in_flight(m) == 0) continue;
      if (out.complete &&
          std::find(out.not_reading.begin(), out.not_reading.end(), m) == out.not_reading.end()) {
        out.not_reading.push_back(m);
      }
      reset_dealer(m);
    }
  }
  std::sort(out.not_reading.begin(), out.not_reading.end());
  for (auto& piece : r.inputs) piece.clear();

  // The sample counts, and each owner's total against this peer's.
  out.member_samples.assign(n, 0);
  for (size_t m = 0; m < n; ++m) {
    out.member_samples[m] = m == r.me ? samples : r.member_samples[m].value_or(0);
    out.samples += out.member_samples[m];
  }
  // An owner's total can be held against this peer's count only once every
  // member's count is in: while a contribution is still on its way (a slow
  // link), the owner that already had it is not at fault, and the missing
  // contribution names the member to blame.
  bool every_count = true;
  for (size_t m = 0; m < n; ++m) every_count = every_count && (m == r.me || r.member_samples[m]);
  for (size_t m = 0; m < n; ++m) {
    if (!every_count || m == r.me || !r.result_samples[m] || *r.result_samples[m] == out.samples) {
      continue;
    }
    r.conflict[m] = true;
    if (r.first_conflict.empty()) {
      r.first_conflict = fmt::format("rank {}: summed {} samples, this peer counts {}", members[m],
                                     *r.result_samples[m], out.samples);
    }
    out.complete = false;
  }
  for (size_t m = 0; m < n; ++m) {
    if (m == r.me) continue;
    if (r.conflict[m]) out.conflicting.push_back(members[m]);
    bool all_in = true;
    for (size_t k = 0; k < r.input_in.size(); ++k) all_in = all_in && r.input_in[k][m];
    if (!all_in) out.missing_contributions.push_back(members[m]);
    if (r.results_missing[m] > 0) out.missing_results.push_back(members[m]);
  }
  out.ok = out.complete && out.not_reading.empty() && out.conflicting.empty();
  if (out.ok && r.digester) out.shard_digests = r.digester->digests();
  out.elapsed = Clock::now() - start;
  if (r.all_heard) out.all_heard_after = *r.all_heard - start;
  if (out.ok) return out;

  // Where, what, and what to do.
  auto name = [&](uint32_t m) { return fmt::format("rank {} ({})", m, endpoints_[m]); };
  std::vector<std::string> what;
  if (!r.first_conflict.empty()) what.push_back("conflicting piece from " + r.first_conflict);
  const bool at_once = !out.conflicting.empty();
  for (uint32_t m : at_once ? std::vector<uint32_t>{} : out.missing_contributions) {
    const size_t pos = r.position_of(m);
    size_t missing = 0;
    for (const auto& in : r.input_in) missing += in[pos] ? 0 : 1;
    what.push_back(fmt::format("no contribution from {} ({} of {} pieces missing)", name(m),
                               missing, r.input_in.size()));
  }
  for (uint32_t m : at_once ? std::vector<uint32_t>{} : out.missing_results) {
    const size_t pos = r.position_of(m);
    what.push_back(fmt::format("no sum from {} ({} of {} pieces missing)", name(m),
                               r.results_missing[pos], r.plan.pieces(pos)));
  }
  for (uint32_t m : out.not_reading) {
    what.push_back(fmt::format("{} did not take this peer's pieces", name(m)));
  }
  if (!outgoing.empty()) {
    what.push_back(fmt::format("pieces of this peer's on their way when it stopped waiting: {}",
                               fmt::join(outgoing, ", ")));
  }
  if (out.stats.refused > 0) {
    what.push_back(fmt::format("{} pieces refused (the first: {})", out.stats.refused,
                               out.stats.first_refusal));
  }
  const auto ms = [](Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  };
  std::string when;
  if (at_once) {
    when = "on a conflicting piece";
  } else if (out.cancelled) {
    when = fmt::format("when it was ended from outside ({} ms after it began)", ms(end - start));
  } else if (out.cut_short) {
    when = fmt::format("by its limit of {} ms after every member was heard from ({} ms after it "
                       "began)",
                       ms(after_all_heard), ms(end - start));
  } else {
    when = fmt::format("by its deadline ({} ms after it began)", ms(deadline - start));
  }
  out.error = fmt::format(
      "exchange ({}) on rank {} among [{}] failed {}: {}; suspects [{}]. Check that they are "
      "alive and call exchange() for this round with the same members and length, then redo the "
      "round (next attempt) without the suspects",
      describe(round), rank_, fmt::join(members, ","), when, fmt::join(what, "; "),
      fmt::join(out.suspects(), ","));
  return out;
}

}  // namespace dctrain
