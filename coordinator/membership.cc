#include "coordinator/membership.h"

namespace dctrain {

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
  if (m.name != name) m.missed_in_a_row = 0;
  m.name = name;
  m.live = true;
  m.last_heard = now;
  m.threads = threads;
  m.ready = false;
  used_[*chosen] = true;
  return chosen;
}

Member* Membership::live_member(const std::string& name) {
  for (Member& m : slots_) {
    if (m.live && m.name == name) return &m;
  }
  return nullptr;
}

void Membership::mark_dead(uint32_t rank) {
  slots_[rank].live = false;
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
