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

bool lost_from_step(const v1::WorkerStep& w) {
  return w.missed() && w.checksum_ok() && !w.cut() && w.refused().empty();
}

}  // namespace dctrain
