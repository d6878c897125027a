#include "coordinator/step/membership.h"

#include <algorithm>

namespace dctrain {

std::string worker_identity(const std::string& key, const std::string& exchange_endpoint) {
  if (!key.empty()) return "key " + key;
  const std::string tcp = "tcp://";
  if (exchange_endpoint.starts_with(tcp)) {
    const size_t colon = exchange_endpoint.rfind(':');
    if (colon > tcp.size())
      return "host " + exchange_endpoint.substr(tcp.size(), colon - tcp.size());
  }
  if (exchange_endpoint.starts_with("ipc://")) return "host (ipc)";
  return "";
}

Membership::Membership(uint32_t slots) : slots_(slots), used_(slots, false) {
  for (uint32_t r = 0; r < slots; ++r) slots_[r].rank = r;
}

std::optional<uint32_t> Membership::admit(const std::string& name, uint32_t threads, double now) {
  std::optional<uint32_t> chosen;
  for (uint32_t r = 0; r < slots(); ++r) {
    if (used_[r] && slots_[r].name == name) chosen = r;
  }
  for (uint32_t r = 0; !chosen && r < slots(); ++r) {
    if (!used_[r]) chosen = r;
  }
  for (uint32_t r = 0; !chosen && r < slots(); ++r) {
    if (!slots_[r].live) chosen = r;
  }
  if (!chosen) return std::nullopt;
  Member& m = slots_[*chosen];
  // Back under its name (presumed dead, or restarted): the steps it missed
  // since it last contributed still count.
  if (m.name != name) {
    m.missed_in_a_row = 0;
    m.failed_rounds_in_a_row = 0;
    m.identity.clear();
  }
  if (m.live) live_by_name_.erase(m.name);  // a dead holder's slot (not marked yet)
  m.name = name;
  m.live = true;
  live_by_name_[name] = *chosen;
  m.last_heard = now;
  m.threads = threads;
  m.ready = false;
  used_[*chosen] = true;
  return chosen;
}

Member* Membership::live_member(const std::string& name) {
  const auto it = live_by_name_.find(name);
  return it == live_by_name_.end() ? nullptr : &slots_[it->second];
}

void Membership::identify(uint32_t rank, const std::string& identity) {
  Member& m = slots_[rank];
  m.identity = identity;
  auto left = failed_rounds_left_.find(identity);
  if (left == failed_rounds_left_.end()) return;
  m.failed_rounds_in_a_row = std::max(m.failed_rounds_in_a_row, left->second);
  failed_rounds_left_.erase(left);
}

void Membership::mark_dead(uint32_t rank) {
  Member& m = slots_[rank];
  if (m.live) live_by_name_.erase(m.name);
  m.live = false;
  if (m.failed_rounds_in_a_row > 0 && !m.identity.empty()) {
    uint32_t& left = failed_rounds_left_[m.identity];
    left = std::max(left, m.failed_rounds_in_a_row);
  }
}

std::vector<uint32_t> Membership::silent(double now, double silence) const {
  std::vector<uint32_t> out;
  for (const Member& m : slots_) {
    if (m.live && now - m.last_heard > silence) out.push_back(m.rank);
  }
  return out;
}

std::vector<uint32_t> Membership::live_ranks() const {
  std::vector<uint32_t> out;
  for (const Member& m : slots_) {
    if (m.live) out.push_back(m.rank);
  }
  return out;
}

size_t Membership::live_count() const {
  return live_ranks().size();
}

std::vector<uint32_t> Membership::ready_ranks() const {
  std::vector<uint32_t> out;
  for (const Member& m : slots_) {
    if (m.live && m.ready) out.push_back(m.rank);
  }
  return out;
}

}  // namespace dctrain
