// Who is in the run: a fixed number of slots (ranks), each held by a worker
// identified by its name (its ZeroMQ identity). A worker that comes back
// under the same name gets its old rank; a new one takes a free slot.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace dctrain {

struct Member {
  std::string name;  // also the peer identity on the ROUTER
  uint32_t rank = 0;
  bool live = false;
  double last_heard = 0.0;  // seconds, on the coordinator's clock
  uint32_t threads = 1;
  bool ready = false;           // took its welcome and loaded its data: may be planned
  double welcomed_at = -1e300;  // when its last welcome was sent (coordinator's clock)
  // Steps it was planned in and missed (its deadline passed, or it was
  // taken out of the exchange's round) since its last contribution; kept
  // when it comes back under its name.
  uint32_t missed_in_a_row = 0;
  // Exchange rounds it failed in a row (judged at fault by the other
  // members' reports, silent in a round, a committed sum withheld) since its
  // last contribution to a committed step; kept when it comes back under its
  // name, and taken over by a new worker of the same identity.
  uint32_t failed_rounds_in_a_row = 0;
  std::string key;  // the CURVE public key it joined with; "" on plain links
  // What survives a restart under a new name: its CURVE key, else its host.
  std::string identity;
};

// A worker's identity across restarts: its CURVE key when it has one, else
// the host of its exchange endpoint (tcp://HOST:PORT or ipc://PATH: this
// host), else "" (no identity: nothing carries over).
std::string worker_identity(const std::string& key, const std::string& exchange_endpoint);

class Membership {
 public:
  explicit Membership(uint32_t slots);

  // A hello from `name`: the slot it held before if any (with its count of
  // missed steps), else the lowest never-used slot, else the lowest slot
  // whose holder is dead. Nothing when every slot is held by a live worker.
  std::optional<uint32_t> admit(const std::string& name, uint32_t threads, double now);

  // The live member with this name, or nullptr. O(1): every message asks.
  Member* live_member(const std::string& name);
  const Member& at(uint32_t rank) const { return slots_[rank]; }
  Member& at(uint32_t rank) { return slots_[rank]; }

  // Sets the identity of the member just admitted at `rank`. A worker new
  // to its slot takes over the failed rounds left by a departed member of
  // the same identity (a worker restarted under a new default name).
  void identify(uint32_t rank, const std::string& identity);

  // Marks `rank` dead (departed, silent or missed too much). Its failed
  // rounds stay with its identity for a worker that comes back under
  // another name.
  void mark_dead(uint32_t rank);
  // Live members silent for longer than `silence` seconds; not yet marked.
  std::vector<uint32_t> silent(double now, double silence) const;

  // Ranks of the live members, ascending.
  std::vector<uint32_t> live_ranks() const;
  size_t live_count() const;
  // Ranks of the live members that are ready for a plan, ascending.
  std::vector<uint32_t> ready_ranks() const;
  uint32_t slots() const { return static_cast<uint32_t>(slots_.size()); }

 private:
  // Members' name, rank and live are set here only (at() hands out the
  // rest), so this index of the live ones stays true.
  std::vector<Member> slots_;
  std::vector<bool> used_;
  std::unordered_map<std::string, uint32_t> live_by_name_;
  std::map<std::string, uint32_t> failed_rounds_left_;  // identity -> departed members' count
};

}  // namespace dctrain
