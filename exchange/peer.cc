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
#include "exchange/round_schedule.h"
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
  // Opened on demand, but a missing key is the caller's mistake, named now.
  for (uint32_t r = 0; options_.security.curve && r < endpoints_.size(); ++r) {
    if (r != rank_ && !endpoints_[r].empty() &&
        (r >= options_.member_keys.size() || options_.member_keys[r].empty())) {
      throw std::invalid_argument(fmt::format(
          "exchange: rank {} has no public key for rank {} (ExchangeOptions::member_keys)", rank_,
          r));
    }
  }
}

void ExchangePeer::close_unused_outboxes(const Round& r) {
  for (uint32_t rank = 0; rank < outboxes_.size(); ++rank) {
    if (outboxes_[rank].handle() == nullptr || r.is_other_member(rank)) continue;
    if (pending_[rank].empty() && releases_->in_flight(rank) == 0) outboxes_[rank].close();
  }
}

size_t ExchangePeer::outbox_connections() const {
  size_t open = 0;
  for (const auto& s : outboxes_) open += s.handle() != nullptr ? 1 : 0;
  return open;
}

void ExchangePeer::queue(uint32_t to, const ChunkHeader& header, const float* data,
                         ExchangeStats& stats) {
  const auto bytes = encode_header(header);
  Outgoing o{zmq::message_t(bytes.data(), bytes.size()), zmq::message_t()};
  const size_t payload = header.count * sizeof(float);
  if (payload > 0) {
    o.payload = options_.copy_sends ? releases_->copy(to, data, payload)
                                    : releases_->wrap(to, data, payload);
  }
  ++stats.pieces_sent;
  stats.bytes_sent += payload;
  if (outboxes_[to].handle() == nullptr) open_dealer(to);  // the first piece for it
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

void ExchangePeer::accept(Round& r, const ChunkHeader& h, zmq::message_t&& payload,
                          const std::string& key, const std::string& id, ExchangeOutcome& out) {
  if (!r.is_other_member(h.from)) {
    return refuse(out, fmt::format("a piece from rank {}, not a member", h.from));
  }
  if (auto problem = sender_problem(id, h.from)) return refuse(out, std::move(*problem));
  if (options_.security.curve &&
      (h.from >= options_.member_keys.size() || key != options_.member_keys[h.from])) {
    return refuse(out, fmt::format("a piece that claims rank {} from a connection authenticated "
                                   "with another key ({})",
                                   h.from, key.empty() ? std::string("none") : key));
  }
  if (auto why = r.take(h, std::move(payload))) refuse(out, std::move(*why));
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
  if (h->round < r.id()) {
    ++out.stats.stale;
    return;
  }
  if (h->round > r.id()) {
    // A piece of a later run: its coordinator started after this round's.
    // Members learn of a new run from its first plan, so such a piece comes
    // from a member that has, and this one will take part in that round
    // only after it has ended this one: not kept, as no sender could be
    // bounded that way (a later run's every step is "later").
    if (h->round.run != r.id().run) {
      return refuse(out, fmt::format("a piece of a later run ({}) than this round's",
                                     describe_round(h->round)));
    }
    // Kept for its round, within a bound in bytes and in count (empty pieces
    // cost no bytes): a member is at most one round ahead, and sends this
    // peer less than the whole buffer per round, in at most this peer's
    // shard's pieces and its own shard's.
    size_t held = 0;
    for (const Early& e : early_) held += e.payload.size();
    if (held + parts[2].size() > 2 * r.length() * sizeof(float) + (size_t{1} << 20) ||
        early_.size() >= 2 * r.pieces_received_at_most() + 64) {
      return refuse(out, fmt::format("a piece of a later round ({}) beyond what is kept",
                                     describe_round(h->round)));
    }
    ++out.stats.early;
    early_.push_back(Early{*h, std::move(parts[2]), authenticated_key(parts[1]), id});
    return;
  }
  // The header came off the wire (the routing id is the ROUTER's own frame)
  // and carries the connection's properties: its authenticated key.
  accept(r, *h, std::move(parts[2]), authenticated_key(parts[1]), id, out);
}

}  // namespace dctrain
