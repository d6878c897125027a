#include "coordinator/ledger.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "common/random.h"

namespace dctrain {
namespace {

constexpr uint64_t kPermutationStream = 0x7065726dULL;  // "perm"
constexpr char kMagic[8] = {'D', 'C', 'L', 'E', 'D', 'G', 'E', 'R'};
constexpr uint64_t kFormatVersion = 1;

uint64_t fnv1a(const char* data, size_t size) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < size; ++i) {
    h ^= static_cast<uint8_t>(data[i]);
    h *= 0x100000001b3ULL;
  }
  return h;
}

class Writer {
 public:
  void u64(uint64_t v) {
    for (int b = 0; b < 8; ++b) bytes_.push_back(static_cast<char>((v >> (8 * b)) & 0xff));
  }
  void raw(const void* data, size_t size) { bytes_.append(static_cast<const char*>(data), size); }
  void ids(const std::vector<uint64_t>& v) {
    u64(v.size());
    for (uint64_t x : v) u64(x);
  }
  std::string finish() {
    u64(fnv1a(bytes_.data(), bytes_.size()));
    return std::move(bytes_);
  }

 private:
  std::string bytes_;
};

class Reader {
 public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}
  uint64_t u64(const char* what) {
    need(8, what);
    uint64_t v = 0;
    for (int b = 0; b < 8; ++b) {
      v |= uint64_t{static_cast<uint8_t>(bytes_[offset_ + static_cast<size_t>(b)])} << (8 * b);
    }
    offset_ += 8;
    return v;
  }
  void raw(void* data, size_t size, const char* what) {
    need(size, what);
    std::memcpy(data, bytes_.data() + offset_, size);
    offset_ += size;
  }
  // A count of 8-byte items that must fit in what is left.
  uint64_t count(const char* what) {
    const uint64_t n = u64(what);
    if (n > (bytes_.size() - offset_) / 8)
      fail(fmt::format("{} count {} exceeds the data", what, n));
    return n;
  }
  size_t offset() const { return offset_; }
  [[noreturn]] void fail(const std::string& what) const {
    throw std::invalid_argument(
        fmt::format("ledger checkpoint: {} (at byte {} of {}) — the "
                    "checkpoint is corrupt or from another version",
                    what, offset_, bytes_.size()));
  }

 private:
  void need(size_t size, const char* what) const {
    if (bytes_.size() - offset_ < size) fail(fmt::format("truncated while reading {}", what));
  }
  const std::string& bytes_;
  size_t offset_ = 0;
};

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

std::string Ledger::serialize() const {
  Writer w;
  w.raw(kMagic, sizeof kMagic);
  w.u64(kFormatVersion);
  w.u64(dataset_size_);
  w.u64(seed_);
  w.u64(requeue_ ? 1 : 0);
  w.u64(epoch_);
  w.u64(cursor_);
  w.u64(next_microbatch_id_);
  w.u64(requeued_.size());
  for (const auto& [position, samples] : requeued_) {
    w.u64(position);
    w.ids(samples);
  }
  w.u64(in_flight_.size());
  for (const auto& [id, f] : in_flight_) {
    w.u64(id);
    w.u64(f.step);
    w.u64(f.worker);
    w.u64(f.position);
    w.ids(f.samples);
  }
  w.raw(completions_.data(), completions_.size());
  w.ids(lost_);
  return w.finish();
}

Ledger Ledger::restore(const std::string& bytes) {
  Reader r(bytes);
  if (bytes.size() < sizeof kMagic + 8) r.fail("too short for a ledger checkpoint");
  char magic[sizeof kMagic];
  r.raw(magic, sizeof magic, "magic");
  if (std::memcmp(magic, kMagic, sizeof kMagic) != 0) r.fail("not a ledger checkpoint (bad magic)");
  const uint64_t stored_sum = [&] {
    uint64_t v = 0;
    for (int b = 0; b < 8; ++b) {
      v |= uint64_t{static_cast<uint8_t>(bytes[bytes.size() - 8 + static_cast<size_t>(b)])}
           << (8 * b);
    }
    return v;
  }();
  if (fnv1a(bytes.data(), bytes.size() - 8) != stored_sum) r.fail("checksum mismatch");
  if (const uint64_t version = r.u64("version"); version != kFormatVersion) {
    r.fail(fmt::format("format version {}, this build reads {}", version, kFormatVersion));
  }
  Ledger ledger;
  ledger.dataset_size_ = r.u64("dataset size");
  ledger.seed_ = r.u64("seed");
  const uint64_t requeue = r.u64("requeue flag");
  ledger.epoch_ = r.u64("epoch");
  ledger.cursor_ = r.u64("cursor");
  ledger.next_microbatch_id_ = r.u64("next micro-batch id");
  const uint64_t size = ledger.dataset_size_;
  if (size == 0 || size > bytes.size()) r.fail(fmt::format("dataset size {} is implausible", size));
  if (requeue > 1) r.fail("requeue flag is not 0 or 1");
  ledger.requeue_ = requeue == 1;
  if (ledger.cursor_ > size)
    r.fail(fmt::format("cursor {} beyond {} samples", ledger.cursor_, size));
  ledger.build_permutation();
  const auto& permutation = ledger.permutation_;
  // Every list must be the contiguous run of the permutation it claims to be.
  std::vector<uint8_t> claimed(ledger.cursor_, 0);  // permutation positions held by a list
  auto check_run = [&](uint64_t position, const std::vector<uint64_t>& samples) {
    if (samples.empty() || position >= ledger.cursor_ ||
        samples.size() > ledger.cursor_ - position) {
      r.fail(
          fmt::format("micro-batch at position {} of {} samples lies outside the handed-out "
                      "part of the epoch",
                      position, samples.size()));
    }
    for (size_t k = 0; k < samples.size(); ++k) {
      if (claimed[position + k] != 0) {
        r.fail(fmt::format("two micro-batches hold permutation position {}", position + k));
      }
      claimed[position + k] = 1;
      if (samples[k] != permutation[position + k]) {
        r.fail(fmt::format("micro-batch at position {} does not match the epoch's permutation",
                           position));
      }
    }
  };
  auto read_ids = [&](const char* what) {
    std::vector<uint64_t> ids(r.count(what));
    for (uint64_t& id : ids) {
      id = r.u64(what);
      if (id >= size) r.fail(fmt::format("sample id {} not below {}", id, size));
    }
    return ids;
  };
  const uint64_t requeued = r.count("requeued micro-batches");
  for (uint64_t i = 0; i < requeued; ++i) {
    const uint64_t position = r.u64("requeued position");
    std::vector<uint64_t> samples = read_ids("requeued samples");
    check_run(position, samples);
    ledger.requeued_samples_ += samples.size();
    if (!ledger.requeued_.emplace(position, std::move(samples)).second) r.fail("requeued twice");
  }
  const uint64_t in_flight = r.count("in-flight micro-batches");
  for (uint64_t i = 0; i < in_flight; ++i) {
    const uint64_t id = r.u64("micro-batch id");
    InFlight f;
    f.step = r.u64("step");
    const uint64_t worker = r.u64("worker");
    if (worker > std::numeric_limits<uint32_t>::max())
      r.fail(fmt::format("worker {} out of range", worker));
    f.worker = static_cast<uint32_t>(worker);
    f.position = r.u64("position");
    f.samples = read_ids("in-flight samples");
    check_run(f.position, f.samples);
    if (id == 0 || id >= ledger.next_microbatch_id_) r.fail(fmt::format("micro-batch id {}", id));
    if (!ledger.in_flight_.emplace(id, std::move(f)).second) r.fail("micro-batch listed twice");
  }
  ledger.completions_.resize(size);
  r.raw(ledger.completions_.data(), size, "completion counts");
  ledger.lost_ = read_ids("lost samples");
  if (r.offset() + 8 != bytes.size()) r.fail("trailing bytes after the ledger");
  return ledger;
}

}  // namespace dctrain
