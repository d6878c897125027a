#include "coordinator/step/async_flights.h"

#include <stdexcept>

namespace dctrain {

bool AsyncFlights::admits(uint64_t version) const {
  const uint64_t in_flight = flights_.size();
  if (in_flight > max_staleness_) return false;
  for (const auto& [rank, f] : flights_) {
    if (version - f.version + in_flight > max_staleness_) return false;
  }
  return true;
}

Flight& AsyncFlights::send(uint32_t rank, Flight flight) {
  const auto [it, added] = flights_.emplace(rank, std::move(flight));
  if (!added) throw std::logic_error("AsyncFlights::send: the rank has a plan in flight");
  return it->second;
}

Flight* AsyncFlights::find(uint32_t rank) {
  const auto it = flights_.find(rank);
  return it == flights_.end() ? nullptr : &it->second;
}

std::optional<Flight> AsyncFlights::end(uint32_t rank) {
  const auto it = flights_.find(rank);
  if (it == flights_.end()) return std::nullopt;
  Flight f = std::move(it->second);
  flights_.erase(it);
  return f;
}

std::vector<uint32_t> AsyncFlights::past_deadline(double now) const {
  std::vector<uint32_t> out;
  for (const auto& [rank, f] : flights_) {
    if (now > f.deadline) out.push_back(rank);
  }
  return out;
}

}  // namespace dctrain
