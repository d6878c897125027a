// A peer that speaks dctrain's protocol over a plain DEALER, for the guard's
// process tests: what someone who can reach the coordinator's port (CURVE
// off) can do with the repository's own schema.
//
//   hostile_peer --connect ENDPOINT --name NAME [--poison-step K] [--value V]
//                [--answer-seconds S] [--exchange-bind ADDRESS]
//                [--poison-every-step 1] [--leave-after-poison 1] [--forge-sum 1]
//                [--die-before-sum 1] [--withhold-sum 1] [--forge-shard 1]
//                [--end-rounds-at-once-from K] [--inflate-sketch V]
//
// It says hello as NAME (claiming a data root). Once welcomed it says Ready
// and answers every plan with a well-formed contribution: at step K it
// claims every planned micro-batch completed with a gradient full of V
// (default 1e30: finite, so validation takes it); at every other step it
// reports every micro-batch dropped (contributing nothing, as a worker past
// tau does). It heartbeats, and ends on the coordinator's bye (exit 0).
// Exits 3 when refused, and 4 when nothing answers its hello within
// --answer-seconds (e.g. because NAME is held by a connected worker).
//
// With --exchange-bind (data plane "exchange") it also binds a data-plane
// peer, advertises it in the hello, and takes part in every round with the
// same contribution (V at the poisoned steps, zeros otherwise), reporting
// its round ok without checking the sum, as a member that lies would. Its
// replica checksum is the plan's, right only while no update is pending,
// so it poisons step 0 or every step (--poison-every-step), and
// --leave-after-poison says bye once it has. With --forge-sum it contributes
// honestly (nothing), reports the digests of the sum it holds, and poisons
// only the sum it forwards as the round's lowest member: V everywhere in
// place of the members' sum. With
// --die-before-sum, as the lowest member of step 0's round, it reports the
// round ok and exits at once, without the sum it said would follow (nor a
// bye). It answers the coordinator's request for a round's sum with the
// last sum it holds. With --withhold-sum, as the lowest member of every
// round, it reports the round ok and that its sum follows, and never sends
// it (nor answers a request for it), while it stays alive and heartbeats.
// With --forge-shard, at the poisoned steps it contributes nothing (as
// --forge-sum) and forges the shard it owns in the round: V added to every
// value of it, the same for every member, so that their digests agree.
// (It adds V to its own part of that shard before the round: to everyone
// else the same as replacing the shard's sum after it.) It answers a
// request for a sketch of its contribution with the sketch of the honest
// one (nothing), as an owner hiding its forgery would; at other steps with
// the sketch of what it sent. With --inflate-sketch, V is added to every
// value of its answer outside its own shard (its part of the others' shards,
// as if inflated), or, V >= 1e100, to every value.
// With --end-rounds-at-once-from K, from step K on it takes no part in any
// round: it reports each one failed the moment its plan arrives, saying it
// heard from every member and that the round took 100 s; asked to say hello
// again (it was taken out), it does, so that it lies again until released.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "comm/envelope.h"
#include "comm/framing.h"
#include "exchange/peer.h"
#include "exchange/plan.h"
#include "exchange/sum_sketch.h"
#include "proto/wire.pb.h"

namespace {

using Clock = std::chrono::steady_clock;

void send(zmq::socket_t& socket, dctrain::Message message) {
  std::vector<zmq::message_t> parts = dctrain::encode(std::move(message));
  for (size_t i = 0; i < parts.size(); ++i) {
    (void)socket.send(parts[i],
                      i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

bool receive(zmq::socket_t& socket, dctrain::Message& out, std::chrono::milliseconds timeout) {
  zmq::pollitem_t item{static_cast<void*>(socket), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, timeout) == 0) return false;
  std::vector<zmq::message_t> parts;
  zmq::message_t part;
  do {
    if (!socket.recv(part, zmq::recv_flags::none)) return false;
    const bool more = part.more();
    parts.push_back(std::move(part));
    if (!more) break;
  } while (true);
  return !dctrain::decode(std::move(parts), out).has_value();
}

}  // namespace

int main(int argc, char** argv) {
  std::string endpoint, name = "hostile";
  int64_t poison_step = -1;
  float value = 1e30f;
  double answer_seconds = 30.0;
  std::string exchange_bind;
  bool poison_every_step = false, leave_after_poison = false, forge_sum = false;
  bool die_before_sum = false, withhold_sum = false, forge_shard = false;
  int64_t end_rounds_from = -1;
  double inflate_sketch = 0.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], arg = argv[i + 1];
    if (flag == "--connect") {
      endpoint = arg;
    } else if (flag == "--name") {
      name = arg;
    } else if (flag == "--poison-step") {
      poison_step = std::stoll(arg);
    } else if (flag == "--value") {
      value = std::stof(arg);
    } else if (flag == "--answer-seconds") {
      answer_seconds = std::stod(arg);
    } else if (flag == "--exchange-bind") {
      exchange_bind = arg;
    } else if (flag == "--poison-every-step") {
      poison_every_step = arg == "1";
    } else if (flag == "--leave-after-poison") {
      leave_after_poison = arg == "1";
    } else if (flag == "--forge-sum") {
      forge_sum = arg == "1";
    } else if (flag == "--die-before-sum") {
      die_before_sum = arg == "1";
    } else if (flag == "--withhold-sum") {
      withhold_sum = arg == "1";
    } else if (flag == "--forge-shard") {
      forge_shard = arg == "1";
    } else if (flag == "--end-rounds-at-once-from") {
      end_rounds_from = std::stoll(arg);
    } else if (flag == "--inflate-sketch") {
      inflate_sketch = std::stod(arg);
    } else {
      std::fprintf(stderr, "hostile_peer: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (endpoint.empty()) {
    std::fprintf(stderr, "hostile_peer: --connect ENDPOINT is required\n");
    return 2;
  }

  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::routing_id, name);
  socket.set(zmq::sockopt::linger, 1000);
  socket.connect(endpoint);

  dctrain::Message hello;
  hello.envelope = dctrain::make_envelope(0, name);
  hello.envelope.mutable_hello()->set_worker_name(name);
  hello.envelope.mutable_hello()->set_threads(1);
  hello.envelope.mutable_hello()->set_has_data_dir(true);
  std::unique_ptr<dctrain::ExchangePeer> exchange;
  std::vector<std::string> connected;
  uint32_t rank = 0;
  if (!exchange_bind.empty()) {
    exchange = std::make_unique<dctrain::ExchangePeer>(0, exchange_bind);
    hello.envelope.mutable_hello()->set_exchange_endpoint(exchange->endpoint());
    hello.envelope.mutable_hello()->set_exchange_token(exchange->token());
  }
  const dctrain::v1::Envelope first_hello = hello.envelope;
  send(socket, std::move(hello));

  uint64_t parameters = 0, buffers = 0;
  size_t own_shard = 0;  // its shard in its last round
  // The last round's sum, [gradient | statistics], and its round.
  std::vector<float> sum;
  uint64_t sum_step = 0;
  uint32_t sum_attempt = 0;
  // What it says it contributed in its last round, [gradient | statistics].
  std::vector<float> reported;
  uint64_t reported_step = 0;
  const auto sum_message = [&] {
    dctrain::Message s;
    s.envelope = dctrain::make_envelope(sum_step, name);
    s.envelope.mutable_exchange_sum()->set_attempt(sum_attempt);
    dctrain::add_tensor(s, "gradient", std::span<const float>(sum).first(parameters));
    if (buffers > 0) {
      dctrain::add_tensor(s, "statistics", std::span<const float>(sum).subspan(parameters));
    }
    return s;
  };
  bool answered = false;
  const auto started = Clock::now();
  auto last_sent = Clock::now();
  for (;;) {
    dctrain::Message m;
    if (!receive(socket, m, std::chrono::milliseconds(200))) {
      if (!answered && Clock::now() - started > std::chrono::duration<double>(answer_seconds)) {
        std::printf("hostile_peer '%s': no answer to the hello within %.0f s\n", name.c_str(),
                    answer_seconds);
        return 4;
      }
      if (answered && Clock::now() - last_sent > std::chrono::milliseconds(300)) {
        dctrain::Message hb;
        hb.envelope = dctrain::make_envelope(0, name);
        hb.envelope.mutable_heartbeat()->set_sent_unix_micros(1);
        send(socket, std::move(hb));
        last_sent = Clock::now();
      }
      continue;
    }
    answered = true;
    const dctrain::v1::Envelope& e = m.envelope;
    switch (e.body_case()) {
      case dctrain::v1::Envelope::kRefusal:
        std::printf("hostile_peer '%s': refused: %s\n", name.c_str(), e.refusal().reason().c_str());
        return 3;
      case dctrain::v1::Envelope::kBye:
        std::printf("hostile_peer '%s': bye: %s\n", name.c_str(), e.bye().reason().c_str());
        return 0;
      case dctrain::v1::Envelope::kWelcome: {
        for (const auto& t : e.tensors()) {
          if (t.name() == "parameters") parameters = t.count();
          if (t.name() == "buffers") buffers = t.count();
        }
        rank = e.welcome().rank();
        std::printf("hostile_peer '%s': welcomed as rank %u (%llu parameters)\n", name.c_str(),
                    e.welcome().rank(), static_cast<unsigned long long>(parameters));
        dctrain::Message ready;
        ready.envelope = dctrain::make_envelope(e.step(), name);
        ready.envelope.mutable_ready();
        send(socket, std::move(ready));
        break;
      }
      case dctrain::v1::Envelope::kPlan: {
        const bool poisoned_step =
            poison_every_step || static_cast<int64_t>(e.step()) == poison_step;
        const bool poison = poisoned_step && !forge_sum && !forge_shard;  // its values
        dctrain::Message c;
        c.envelope = dctrain::make_envelope(e.step(), name);
        dctrain::v1::Contribution& body = *c.envelope.mutable_contribution();
        uint64_t samples = 0;
        for (const auto& mb : e.plan().micro_batches()) {
          if (poison) {
            dctrain::v1::MicroBatchTime& t = *body.add_completed();
            t.set_id(mb.id());
            t.set_compute_seconds(0.001);
            samples += static_cast<uint64_t>(mb.samples_size());
          } else {
            body.add_dropped(mb.id());
          }
        }
        body.set_samples(samples);
        body.set_loss_terms(samples);
        body.set_loss_sum(poison ? 2.3 * static_cast<double>(samples) : 0.0);
        body.set_compute_seconds(0.001);
        body.set_parameter_checksum(e.plan().parameter_checksum());
        std::vector<float> gradient(parameters, poison ? value : 0.0f);
        std::vector<float> statistics(buffers, 0.0f);
        bool forwards = false;  // the round's lowest member: its sum follows its report
        if (e.plan().has_exchange() && exchange != nullptr) {
          // The round with the other members: [gradient | statistics].
          const dctrain::v1::ExchangePlan& x = e.plan().exchange();
          std::vector<uint32_t> members(x.member_ranks().begin(), x.member_ranks().end());
          std::vector<std::string> endpoints;
          for (int i = 0; i < x.member_ranks_size(); ++i) {
            if (x.member_ranks(i) >= endpoints.size()) endpoints.resize(x.member_ranks(i) + 1);
            endpoints[x.member_ranks(i)] = x.member_endpoints(i);
          }
          if (endpoints != connected) {
            exchange->set_rank(rank);
            exchange->connect(endpoints);
            connected = endpoints;
          }
          std::vector<float> buffer = gradient;
          buffer.insert(buffer.end(), statistics.begin(), statistics.end());
          reported = buffer;
          reported_step = e.step();
          const auto own = std::find(members.begin(), members.end(), rank);
          if (own != members.end()) own_shard = static_cast<size_t>(own - members.begin());
          if (end_rounds_from >= 0 && static_cast<int64_t>(e.step()) >= end_rounds_from) {
            dctrain::v1::ExchangeReport& report = *body.mutable_exchange();
            report.set_ok(false);
            report.set_attempt(x.attempt());
            report.set_heard_from_all(true);
            report.set_round_seconds(100.0);
            report.set_error("ended at once");
            send(socket, std::move(c));
            last_sent = Clock::now();
            std::printf("hostile_peer '%s': step %llu: ended the round at once\n", name.c_str(),
                        static_cast<unsigned long long>(e.step()));
            break;
          }
          if (poisoned_step && forge_shard && own != members.end()) {
            const dctrain::ExchangePlan plan(buffer.size(), members.size(), 1);
            const auto shard = static_cast<size_t>(own - members.begin());
            for (uint64_t i = plan.shard_begin(shard); i < plan.shard_end(shard); ++i) {
              buffer[i] += value;
            }
            std::printf("hostile_peer '%s': step %llu: forging shard %zu of the sum with %g\n",
                        name.c_str(), static_cast<unsigned long long>(e.step()), shard,
                        static_cast<double>(value));
          }
          // The digest the plan names, as an honest member takes it.
          exchange->set_sum_digest(dctrain::from_wire(x.sum_digest()));
          const dctrain::ExchangeOutcome out =
              exchange->exchange({e.step(), x.attempt(), x.run()}, members, buffer, samples, buffer,
                                 Clock::now() + std::chrono::seconds(30));
          dctrain::v1::ExchangeReport& report = *body.mutable_exchange();
          report.set_ok(out.ok);
          report.set_samples(out.samples);
          report.set_attempt(x.attempt());
          if (out.ok) {
            // The digests of the sum it holds, as an honest member's: a
            // forged forwarded sum below is then told apart by them.
            for (const std::string& d : out.shard_digests) report.add_sum_digests(d);
            sum = buffer;
            sum_step = e.step();
            sum_attempt = x.attempt();
          }
          if (out.ok && !members.empty() && members.front() == rank) {
            report.set_sends_sum(true);
            forwards = true;
            if (poisoned_step && forge_sum) {
              std::fill(sum.begin(), sum.end(), value);
              std::printf("hostile_peer '%s': step %llu: forwarding a forged sum full of %g\n",
                          name.c_str(), static_cast<unsigned long long>(e.step()),
                          static_cast<double>(value));
            }
          }
        } else {
          dctrain::add_tensor(c, "gradient", gradient);
          if (buffers > 0) dctrain::add_tensor(c, "statistics", statistics);
        }
        if (poison) {
          std::printf("hostile_peer '%s': step %llu: sending a gradient full of %g\n", name.c_str(),
                      static_cast<unsigned long long>(e.step()), static_cast<double>(value));
        }
        send(socket, std::move(c));
        last_sent = Clock::now();
        if (forwards && die_before_sum && e.step() == 0) {
          // Its own pieces of the round reach the others first (the round is
          // theirs too); then it is gone, without its sum or a bye.
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          std::printf("hostile_peer '%s': step 0: reported the round, died before its sum\n",
                      name.c_str());
          std::fflush(stdout);
          return 0;
        }
        if (forwards && withhold_sum) {
          std::printf("hostile_peer '%s': step %llu: promised the round's sum, withholds it\n",
                      name.c_str(), static_cast<unsigned long long>(e.step()));
        } else if (forwards) {
          send(socket, sum_message());
        }
        if (poisoned_step && leave_after_poison) {
          dctrain::Message bye;
          bye.envelope = dctrain::make_envelope(e.step(), name);
          bye.envelope.mutable_bye()->set_reason("poisoned its step; leaving");
          send(socket, std::move(bye));
          std::printf("hostile_peer '%s': left after poisoning\n", name.c_str());
          std::fflush(stdout);
          return 0;
        }
        break;
      }
      case dctrain::v1::Envelope::kRoundCheckRequest: {
        const dctrain::v1::RoundCheckRequest& r = e.round_check_request();
        if (reported.empty() || e.step() != reported_step) break;
        std::vector<double> sketch = dctrain::sketch_shards(
            reported, {parameters, reported.size(), r.shards(), r.buckets(), r.seed()});
        const size_t per_shard = 2 * static_cast<size_t>(r.buckets());
        for (size_t i = 0; i < sketch.size() && inflate_sketch != 0.0; ++i) {
          if (i / per_shard != own_shard || inflate_sketch >= 1e100) sketch[i] += inflate_sketch;
        }
        dctrain::Message a;
        a.envelope = dctrain::make_envelope(e.step(), name);
        a.envelope.mutable_round_check_answer()->set_attempt(r.attempt());
        a.envelope.mutable_round_check_answer()->set_seed(r.seed());
        a.envelope.mutable_round_check_answer()->mutable_values()->Assign(sketch.begin(),
                                                                          sketch.end());
        send(socket, std::move(a));
        break;
      }
      case dctrain::v1::Envelope::kSumRequest:
        if (!withhold_sum && !sum.empty() && e.step() == sum_step &&
            e.sum_request().attempt() == sum_attempt) {
          std::printf("hostile_peer '%s': step %llu: sending the round's sum, as asked\n",
                      name.c_str(), static_cast<unsigned long long>(sum_step));
          send(socket, sum_message());
        }
        break;
      case dctrain::v1::Envelope::kError:
        if (end_rounds_from >= 0 && e.error().rejoin()) {
          std::printf("hostile_peer '%s': asked to say hello again: says it\n", name.c_str());
          dctrain::Message again;
          again.envelope = first_hello;
          send(socket, std::move(again));
        }
        break;
      default:
        break;
    }
    std::fflush(stdout);
  }
}
