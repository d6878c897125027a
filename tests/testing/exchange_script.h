// The workers' side of the data plane "exchange", written by hand for the
// coordinator's tests and fuzz seeds: a member's report of a round that
// succeeded, its answer to a keyed check of the round, and the round's sum
// as the lowest member forwards it.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "comm/envelope.h"
#include "comm/framing.h"
#include "comm/message.h"
#include "exchange/sum_digest.h"

namespace dctrain::testing {

// `name`'s report of the round its `plan` names, ok: every planned
// micro-batch completed, computed on the parameters of `checksum`, holding
// `sum` ([gradient | statistics]), whose digests it carries.
inline Message round_report(const std::string& name, const Message& plan, bool sends_sum,
                            std::span<const float> sum, uint64_t checksum) {
  const v1::ExchangePlan& x = plan.envelope.plan().exchange();
  Message m;
  m.envelope = make_envelope(plan.envelope.step(), name);
  v1::Contribution& c = *m.envelope.mutable_contribution();
  uint64_t samples = 0;
  for (const v1::MicroBatch& mb : plan.envelope.plan().micro_batches()) {
    v1::MicroBatchTime& t = *c.add_completed();
    t.set_id(mb.id());
    t.set_compute_seconds(0.01);
    samples += static_cast<uint64_t>(mb.samples_size());
  }
  c.set_samples(samples);
  c.set_loss_terms(samples);
  c.set_loss_sum(2.3 * static_cast<double>(samples));
  c.set_compute_seconds(0.01);
  c.set_parameter_checksum(checksum);
  v1::ExchangeReport& report = *c.mutable_exchange();
  report.set_ok(true);
  report.set_attempt(x.attempt());
  report.set_sends_sum(sends_sum);
  // A keyed check's tags come with the round check (round_check_answer).
  if (keyed(from_wire(x.sum_digest()))) return m;
  for (std::string& d :
       shard_digests(sum, static_cast<size_t>(x.member_ranks_size()), from_wire(x.sum_digest()))) {
    report.add_sum_digests(std::move(d));
  }
  return m;
}

// `name`'s answer to a round check `request`: the tags of `sum` it holds
// ([gradient | statistics]) under the request's key, if it has one, and no
// sketch.
inline Message round_check_answer(const std::string& name, const Message& request,
                                  std::span<const float> sum) {
  const v1::RoundCheckRequest& r = request.envelope.round_check_request();
  Message m;
  m.envelope = make_envelope(request.envelope.step(), name);
  v1::RoundCheckAnswer& a = *m.envelope.mutable_round_check_answer();
  a.set_attempt(r.attempt());
  a.set_seed(r.seed());
  if (r.sum_key().empty()) return m;
  for (std::string& t : shard_tags(sum, r.shards(), std::as_bytes(std::span(r.sum_key())))) {
    a.add_sum_tags(std::move(t));
  }
  return m;
}

// The round's sum as `name` forwards it: `sum` is [gradient | statistics],
// the gradient `parameters` long.
inline Message round_sum(const std::string& name, uint64_t step, uint32_t attempt,
                         std::span<const float> sum, size_t parameters) {
  Message m;
  m.envelope = make_envelope(step, name);
  m.envelope.mutable_exchange_sum()->set_attempt(attempt);
  add_tensor(m, "gradient", sum.first(parameters));
  if (sum.size() > parameters) add_tensor(m, "statistics", sum.subspan(parameters));
  return m;
}

}  // namespace dctrain::testing
