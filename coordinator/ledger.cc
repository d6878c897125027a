#include "coordinator/ledger.h"

#include <fmt/core.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "common/random.h"

namespace dctrain {
namespace {

constexpr uint64_t kPermutationStream = 0x7065726dULL;  // "perm"

[[noreturn]] void refuse(const std::string& what) {
  throw std::invalid_argument(fmt::format(
      "the checkpoint's ledger is inconsistent: {}; the checkpoint is corrupt: start the run "
      "again, or resume from another run folder",
      what));
}

}  // namespace

Ledger::Ledger(uint64_t dataset_size, uint64_t seed, bool requeue)
    : dataset_size_(dataset_size), seed_(seed), requeue_(requeue) {
  if (dataset_size == 0) throw std::invalid_argument("ledger: the dataset has no samples");
  build_permutation();
  completions_.assign(dataset_size_, 0);
}

void Ledger::build_permutation() {
  permutation_.resize(dataset_size_);
  std::iota(permutation_.begin(), permutation_.end(), uint64_t{0});
  Rng rng({seed_, epoch_, kPermutationStream});
  for (uint64_t i = dataset_size_ - 1; i > 0; --i) {
    std::swap(permutation_[i], permutation_[rng.below(i + 1)]);
  }
}

uint64_t Ledger::epoch() const {
  return epoch_;
}

uint64_t Ledger::pending() const {
  return dataset_size_ - cursor_ + requeued_samples_;
}

PlannedMicroBatch Ledger::take(uint64_t max_samples, uint64_t step, uint32_t worker) {
  if (max_samples == 0) throw std::invalid_argument("ledger: take() of 0 samples");
  PlannedMicroBatch planned;
  planned.epoch = epoch_;
  uint64_t position = 0;
  if (!requeued_.empty()) {
    auto head = requeued_.begin();
    position = head->first;
    std::vector<uint64_t>& samples = head->second;
    if (samples.size() <= max_samples) {
      planned.samples = std::move(samples);
      requeued_.erase(head);
    } else {
      const auto split = samples.begin() + static_cast<std::ptrdiff_t>(max_samples);
      planned.samples.assign(samples.begin(), split);
      std::vector<uint64_t> rest(split, samples.end());
      requeued_.erase(head);
      requeued_.emplace(position + max_samples, std::move(rest));
    }
    requeued_samples_ -= planned.samples.size();
  } else if (cursor_ < dataset_size_) {
    position = cursor_;
    const uint64_t n = std::min(max_samples, dataset_size_ - cursor_);
    planned.samples.assign(permutation_.begin() + static_cast<std::ptrdiff_t>(cursor_),
                           permutation_.begin() + static_cast<std::ptrdiff_t>(cursor_ + n));
    cursor_ += n;
  } else {
    return planned;  // id 0: nothing pending this epoch
  }
  planned.id = next_microbatch_id_++;
  in_flight_.emplace(planned.id, InFlight{step, worker, position, planned.samples});
  return planned;
}

void Ledger::complete(uint64_t microbatch_id) {
  const auto it = in_flight_.find(microbatch_id);
  if (it == in_flight_.end()) {
    throw std::out_of_range(
        fmt::format("ledger: micro-batch {} completed but not in flight "
                    "(never planned, or already completed or dropped)",
                    microbatch_id));
  }
  for (uint64_t s : it->second.samples) {
    if (completions_[s] < 255) ++completions_[s];
  }
  in_flight_.erase(it);
}

void Ledger::drop_entry(std::map<uint64_t, InFlight>::iterator entry) {
  InFlight& f = entry->second;
  if (requeue_) {
    requeued_samples_ += f.samples.size();
    requeued_.emplace(f.position, std::move(f.samples));
  } else {
    lost_.insert(lost_.end(), f.samples.begin(), f.samples.end());
  }
  in_flight_.erase(entry);
}

void Ledger::drop(uint64_t microbatch_id) {
  const auto it = in_flight_.find(microbatch_id);
  if (it == in_flight_.end()) {
    throw std::out_of_range(
        fmt::format("ledger: micro-batch {} dropped but not in flight "
                    "(never planned, or already completed or dropped)",
                    microbatch_id));
  }
  drop_entry(it);
}

void Ledger::orphan_worker(uint32_t worker) {
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    auto next = std::next(it);
    if (it->second.worker == worker) drop_entry(it);
    it = next;
  }
}

void Ledger::drop_all_in_flight() {
  while (!in_flight_.empty()) drop_entry(in_flight_.begin());
}

bool Ledger::is_in_flight(uint64_t microbatch_id) const {
  return in_flight_.contains(microbatch_id);
}

bool Ledger::epoch_complete() const {
  return cursor_ == dataset_size_ && requeued_.empty() && in_flight_.empty();
}

void Ledger::start_next_epoch() {
  if (!epoch_complete()) {
    throw std::logic_error(fmt::format(
        "ledger: epoch {} is not complete ({} samples pending, {} micro-batches in flight)", epoch_,
        pending(), in_flight_.size()));
  }
  ++epoch_;
  build_permutation();
  cursor_ = 0;
  completions_.assign(dataset_size_, 0);
  lost_.clear();
}

EpochAudit Ledger::audit() const {
  EpochAudit audit;
  audit.epoch = epoch_;
  audit.complete = epoch_complete();
  audit.lost = lost_;
  std::sort(audit.lost.begin(), audit.lost.end());
  std::vector<uint8_t> is_lost(dataset_size_, 0);
  for (uint64_t s : lost_) {
    if (is_lost[s] != 0) audit.duplicated.push_back(s);  // lost twice: in two micro-batches
    is_lost[s] = 1;
  }
  for (uint64_t s = 0; s < dataset_size_; ++s) {
    const int accounted = completions_[s] + is_lost[s];
    if (accounted == 0)
      audit.missing.push_back(s);
    else if (accounted > 1)
      audit.duplicated.push_back(s);
    else if (completions_[s] == 1)
      ++audit.done;
  }
  std::sort(audit.duplicated.begin(), audit.duplicated.end());
  audit.duplicated.erase(std::unique(audit.duplicated.begin(), audit.duplicated.end()),
                         audit.duplicated.end());
  return audit;
}

v1::LedgerState Ledger::state() const {
  v1::LedgerState state;
  state.set_dataset_size(dataset_size_);
  state.set_seed(seed_);
  state.set_requeue(requeue_);
  state.set_epoch(epoch_);
  state.set_cursor(cursor_);
  state.set_next_microbatch_id(next_microbatch_id_);
  for (const auto& [position, samples] : requeued_) {
    v1::LedgerState::Requeued& r = *state.add_requeued();
    r.set_position(position);
    r.mutable_samples()->Assign(samples.begin(), samples.end());
  }
  for (const auto& [id, f] : in_flight_) {
    v1::LedgerState::InFlight& out = *state.add_in_flight();
    out.set_id(id);
    out.set_step(f.step);
    out.set_worker(f.worker);
    out.set_position(f.position);
    out.mutable_samples()->Assign(f.samples.begin(), f.samples.end());
  }
  state.set_completions(completions_.data(), completions_.size());
  state.mutable_lost()->Assign(lost_.begin(), lost_.end());
  return state;
}

Ledger Ledger::restore(const v1::LedgerState& state) {
  Ledger ledger;
  const uint64_t size = state.dataset_size();
  if (size == 0) refuse("the dataset size is 0");
  // One completion count per sample: checked before the permutation of
  // `size` ids is built, so a wrong size cannot ask for any amount of memory.
  if (state.completions().size() != size) {
    refuse(fmt::format("{} completion counts for {} samples", state.completions().size(), size));
  }
  if (state.cursor() > size) {
    refuse(fmt::format("cursor {} beyond {} samples", state.cursor(), size));
  }
  if (state.next_microbatch_id() == 0) refuse("the next micro-batch id is 0; ids start at 1");
  ledger.dataset_size_ = size;
  ledger.seed_ = state.seed();
  ledger.requeue_ = state.requeue();
  ledger.epoch_ = state.epoch();
  ledger.cursor_ = state.cursor();
  ledger.next_microbatch_id_ = state.next_microbatch_id();
  ledger.build_permutation();

  // Every micro-batch must be the contiguous run of the permutation it
  // claims, within the handed-out part, and no two may overlap.
  std::vector<uint8_t> claimed(ledger.cursor_, 0);  // permutation positions held by a micro-batch
  auto check_run = [&](uint64_t position,
                       const google::protobuf::RepeatedField<uint64_t>& samples) {
    const auto count = static_cast<uint64_t>(samples.size());
    if (count == 0 || position >= ledger.cursor_ || count > ledger.cursor_ - position) {
      refuse(
          fmt::format("the micro-batch at position {} of {} samples lies outside the handed-out "
                      "{} positions of the epoch",
                      position, count, ledger.cursor_));
    }
    for (uint64_t k = 0; k < count; ++k) {
      if (claimed[position + k] != 0) {
        refuse(fmt::format("two micro-batches hold permutation position {}", position + k));
      }
      claimed[position + k] = 1;
      if (samples[static_cast<int>(k)] != ledger.permutation_[position + k]) {
        refuse(fmt::format("the micro-batch at position {} does not match epoch {}'s permutation",
                           position, ledger.epoch_));
      }
    }
  };
  for (const v1::LedgerState::Requeued& r : state.requeued()) {
    check_run(r.position(), r.samples());
    ledger.requeued_samples_ += static_cast<uint64_t>(r.samples_size());
    ledger.requeued_.emplace(r.position(),
                             std::vector<uint64_t>(r.samples().begin(), r.samples().end()));
  }
  for (const v1::LedgerState::InFlight& f : state.in_flight()) {
    if (f.id() == 0 || f.id() >= ledger.next_microbatch_id_) {
      refuse(fmt::format("in-flight micro-batch id {} is not in 1..{}", f.id(),
                         ledger.next_microbatch_id_ - 1));
    }
    check_run(f.position(), f.samples());
    InFlight entry{f.step(), f.worker(), f.position(),
                   std::vector<uint64_t>(f.samples().begin(), f.samples().end())};
    if (!ledger.in_flight_.emplace(f.id(), std::move(entry)).second) {
      refuse(fmt::format("micro-batch {} is in flight twice", f.id()));
    }
  }
  ledger.completions_.assign(state.completions().begin(), state.completions().end());
  for (uint64_t s : state.lost()) {
    if (s >= size) refuse(fmt::format("lost sample id {} is not below {}", s, size));
  }
  ledger.lost_.assign(state.lost().begin(), state.lost().end());
  return ledger;
}

}  // namespace dctrain
