// A data plane's coordinator, faked (coordinator/planes/plane_host.h): the rooms a
// plane works on, real (the members, a SoftmaxModel replica, the step's
// book, the guard), and a host that records what the plane asks of it and
// does to the book what the coordinator does. A test plans a step
// (plan_step), drives the plane through a step's calls in the coordinator's
// order, and reads what went out (sent) and who left the step (removed).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/envelope.h"
#include "coordinator/planes/data_plane.h"
#include "coordinator/planes/plane_host.h"
#include "coordinator/run_metrics.h"
#include "runtime/run_config.h"
#include "tests/testing/fake_cluster.h"

namespace dctrain::testing {

class FakePlaneHost : public PlaneHost {
 public:
  // Members "w0", "w1", ... at ranks 0, 1, ..., live; `config_text` a run
  // config (its workers: the member count).
  explicit FakePlaneHost(const std::string& config_text)
      : config(finished(parse_run_config(config_text, "plane-test"))),
        membership(config.workers()),
        replica(softmax_for(config), config.optimizer()),
        guard(config.guard()),
        timeline("", config.trace(), 0.0, log.logger),
        peer_log(config.guard(), log.logger) {
    for (uint32_t rank = 0; rank < config.workers(); ++rank) {
      membership.admit("w" + std::to_string(rank), 1, now);
    }
  }

  PlaneRooms rooms() {
    return PlaneRooms{config, log.logger, clock_,   membership, replica,
                      book,   guard,      timeline, totals,     peer_log};
  }

  // Opens step `step_` on `plane` among `ranks`, each planned
  // `micro_batches` micro-batches of `micro_batch` samples; returns each
  // rank's plan as the coordinator would send it.
  std::map<uint32_t, Message> plan_step(DataPlane& plane, const std::vector<uint32_t>& ranks,
                                        int micro_batches, int micro_batch, double tau) {
    plane_ = &plane;
    book.clear();
    stepping_ = true;
    plane.open_step(ranks, now, tau);
    std::map<uint32_t, Message> plans;
    uint64_t next_sample = 0;
    for (uint32_t rank : ranks) {
      Planned& p = book.plan(rank);
      Message m;
      m.envelope = make_envelope(step_, kCoordinatorName);
      v1::Plan& body = *m.envelope.mutable_plan();
      body.set_tau(tau);
      body.set_parameter_checksum(start_checksum_);
      for (int i = 0; i < micro_batches; ++i) {
        const uint64_t id = rank * 1000 + static_cast<uint64_t>(i);
        v1::MicroBatch& mb = *body.add_micro_batches();
        mb.set_id(id);
        for (int s = 0; s < micro_batch; ++s) mb.add_samples(next_sample++);
        p.micro_batches.insert(id);
        p.sizes[id] = static_cast<uint64_t>(micro_batch);
        p.samples += static_cast<uint64_t>(micro_batch);
      }
      plane.add_to_plan(body);
      plans.emplace(rank, std::move(m));
    }
    deadline_ = plane.deadline(now, tau);
    return plans;
  }

  // The step's record as the coordinator settles it: each contribution's
  // samples and loss terms.
  ClosedStep closed_step() const {
    ClosedStep closed;
    uint32_t samples = 0;
    for (const auto& [rank, p] : book) {
      if (!p.contribution || p.out()) continue;
      samples += static_cast<uint32_t>(p.contribution->samples());
      closed.loss_terms += p.contribution->loss_terms();
    }
    closed.record.set_step(step_);
    closed.record.set_samples(samples);
    closed.record.set_applied(samples > 0);
    closed.record.set_lr(lr);
    return closed;
  }

  // The messages sent to `peer`, oldest first.
  std::deque<Message>& sent_to(const std::string& peer) { return sent[peer]; }

  // PlaneHost.
  uint64_t step() const override { return step_; }
  bool stepping() const override { return stepping_; }
  uint64_t start_checksum() const override { return start_checksum_; }
  double deadline() const override { return deadline_; }
  void set_deadline(double deadline) override { deadline_ = deadline; }
  double step_divisor(const ClosedStep&) const override { return divisor; }
  double step_learning_rate() const override { return lr; }
  void send(const std::string& peer, Message message) override {
    sent[peer].push_back(std::move(message));
  }
  void remove(uint32_t rank, Removal removal, const std::string& why) override {
    if (!book.take_out(rank, removal)) return;
    plane_->forget(rank);
    removed[rank] = {removal, why};
  }
  void drop_from_step(uint32_t rank) override {
    plane_->forget(rank);
    book.drop(rank);
    dropped.push_back(rank);
  }
  void declare_dead(uint32_t rank, const std::string& why) override {
    if (stepping_ && plane_->awaits(rank)) remove(rank, Removal::kLost, why);
    membership.mark_dead(rank);
    dead.push_back(rank);
  }
  void release(uint32_t rank, const std::string& why) override {
    released[rank] = why;
    membership.mark_dead(rank);
  }
  void close_step(double) override { ++close_calls; }

  // The rooms.
  double now = 100.0;
  CapturedLog log;
  v1::RunConfig config;
  Membership membership;
  Replica replica;
  StepBook book;
  UpdateGuard guard;
  Timeline timeline;
  v1::RunTotals totals;
  PeerLog peer_log;

  // What the host answers.
  double divisor = 1.0;
  double lr = 0.1;

  // What the plane asked.
  std::map<std::string, std::deque<Message>> sent;
  std::map<uint32_t, std::pair<Removal, std::string>> removed;
  std::vector<uint32_t> dropped;
  std::vector<uint32_t> dead;
  std::map<uint32_t, std::string> released;
  int close_calls = 0;

 private:
  static v1::RunConfig finished(v1::RunConfig config) {
    finalize_run_config(config);
    return config;
  }

  std::function<double()> clock_ = [this] { return now; };
  DataPlane* plane_ = nullptr;
  uint64_t step_ = 0;
  bool stepping_ = false;
  uint64_t start_checksum_ = 0;
  double deadline_ = 0.0;
};

}  // namespace dctrain::testing
