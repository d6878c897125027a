// The data plane "star" (coordinator/planes/data_plane.h): every worker sends its
// contribution to the coordinator, which sums them in the tree fixed by their
// rank order once all are in (coordinator/step/reducer.h), guards the sum (coordinator/
// update_guard.h), sends the update to every live worker and applies it to
// its own replica. The step policy "backup" closes a step here after the
// first N - b contributions.
#pragma once

#include "coordinator/planes/data_plane.h"
#include "coordinator/planes/plane_host.h"

namespace dctrain {

class StarPlane final : public DataPlane {
 public:
  // The reduce holds each contribution for the norm guard when it is on.
  StarPlane(PlaneHost& host, PlaneRooms rooms);

  std::string_view description() const override;
  std::optional<std::string> hello_problem(const v1::Hello&) const override { return {}; }
  void joined(uint32_t, const v1::Hello&) override {}
  void open_step(const std::vector<uint32_t>& ranks, double now, double tau) override;
  void add_to_plan(v1::Plan&) const override {}
  double deadline(double now, double tau) const override;
  std::optional<std::string> out_of_round(const v1::Contribution&) const override { return {}; }
  std::optional<std::string> contribution_problem(const Message& message) const override;
  void accept(uint32_t rank, Message message, double now) override;
  void on_sum(uint32_t rank, Message message, double now) override;
  void on_round_check(uint32_t rank, const Message& message, double now) override;
  void tick(double) override {}
  void members_lost(double) override {}
  bool hold_open(double) override { return false; }
  // The norm guard, then the reduced update's check: a refused
  // contribution or a discarded step has its micro-batches requeued.
  GuardedStep settle() override;
  void record(v1::StepRecord&) const override {}
  std::optional<uint64_t> apply(ClosedStep& closed) override;
  std::optional<uint64_t> apply_pending() override { return std::nullopt; }
  bool workers_ahead() const override { return false; }

 private:
  // Policy "backup": once N - b contributions are in, the others are cut
  // from the step (their micro-batches requeued).
  void cut_backup_workers();
  // An exchange message (`what`) from a member of a star run: logged and
  // dropped.
  void drop_exchange_message(const char* what, uint32_t rank, const Message& message) const;

  PlaneHost& host_;
  PlaneRooms rooms_;
};

}  // namespace dctrain
