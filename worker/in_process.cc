#include "worker/in_process.h"

#include <iterator>

namespace dctrain {

std::vector<Message> SentMessages::take() {
  std::vector<Message> out(std::make_move_iterator(sent.begin()),
                           std::make_move_iterator(sent.end()));
  sent.clear();
  return out;
}

std::vector<ComputeOutput> InProcessWorker::run_job() {
  ComputeJob job = std::move(jobs_.jobs.front());
  jobs_.jobs.pop_front();
  return trainer_.handle(std::move(job));
}

}  // namespace dctrain
