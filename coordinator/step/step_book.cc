#include "coordinator/step/step_book.h"

namespace dctrain {

std::string_view refused_word(Removal removal) {
  switch (removal) {
    case Removal::kRefusedNorm:
      return "norm";
    case Removal::kRefusedUpdate:
      return "update";
    case Removal::kDiscarded:
      return "discarded";
    case Removal::kLost:
    case Removal::kCut:
      break;
  }
  return "";
}

Planned& StepBook::plan(uint32_t rank) {
  Planned& p = entries_[rank];
  p.rank = rank;
  return p;
}

uint64_t StepBook::planned_samples() const {
  uint64_t samples = 0;
  for (const auto& [rank, p] : entries_) samples += p.samples;
  return samples;
}

bool StepBook::take_out(uint32_t rank, Removal removal) {
  auto it = entries_.find(rank);
  if (it == entries_.end() || it->second.out()) return false;
  it->second.removed = removal;
  it->second.contribution.reset();
  return true;
}

void StepBook::drop(uint32_t rank) {
  if (auto it = entries_.find(rank); it != entries_.end()) it->second.contribution.reset();
}

bool lost_from_step(const v1::WorkerStep& w) {
  return w.missed() && w.checksum_ok() && !w.cut() && w.refused().empty();
}

}  // namespace dctrain
