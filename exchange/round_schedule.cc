#include "exchange/round_schedule.h"

#include "exchange/halving_round.h"
#include "exchange/mesh_round.h"

namespace dctrain {

std::unique_ptr<RoundSchedule> make_round(ExchangeSchedule schedule, const RoundInputs& in,
                                          PieceSink& sink, ExchangeStats& stats,
                                          std::chrono::steady_clock::time_point start) {
  if (schedule == ExchangeSchedule::kHalving) {
    return std::make_unique<HalvingRound>(in, sink, stats, start);
  }
  return std::make_unique<MeshRound>(in, sink, stats, start);
}

}  // namespace dctrain
