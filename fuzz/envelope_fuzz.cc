// The wire decoder and every check a receiver makes before trusting a
// message: framing (decode), the protocol version, the body's name, the
// tensors against what the run's model expects (check_tensors, with the
// welcome's whole state and a contribution's or update's gradient and
// statistics), and the reads that follow a check. Properties: a message that
// decodes encodes and decodes again to the same envelope (bit for bit, in
// deterministic serialization) and frames; a
// message that passes check_tensors can be copied and summed tensor by
// tensor without reading past a frame.

#include <cstdlib>
#include <string>
#include <vector>

#include "comm/envelope.h"
#include "comm/framing.h"
#include "comm/validation.h"
#include "fuzz/frames.h"
#include "fuzz/harness.h"
#include "runtime/replica.h"
#include "tests/testing/softmax_model.h"

namespace dctrain::fuzz {
namespace {

struct Specs {
  std::vector<std::string> names;  // what `state` points into
  std::vector<TensorSpec> state;   // a welcome's: parameters, buffers, optimizer state
  std::vector<TensorSpec> update;  // a contribution's or an update's
};

Specs make_specs() {
  const v1::RunConfig config = run_config();
  const v1::ModelConfig& m = config.model();
  Replica replica(
      std::make_unique<testing::SoftmaxModel>(
          m.image_channels() * m.image_height() * m.image_width(), m.num_classes(), config.seed()),
      config.optimizer());
  Specs s;
  // state_specs() names point into the replica, which goes: keep copies
  // (moving the vector keeps its elements where they are).
  const std::vector<TensorSpec> state = replica.state_specs();
  for (const TensorSpec& t : state) s.names.emplace_back(t.name);
  for (size_t i = 0; i < state.size(); ++i) s.state.push_back({s.names[i], state[i].count});
  s.update = {{"gradient", replica.parameter_count()}, {"statistics", replica.buffer_count()}};
  return s;
}

void check_roundtrip(const Message& decoded) {
  Message copy;
  copy.envelope = decoded.envelope;
  for (const zmq::message_t& f : decoded.frames) copy.frames.emplace_back(f.data(), f.size());
  Message again;
  if (const auto problem = decode(encode(std::move(copy)), again)) {
    std::fprintf(stderr, "a decoded message does not decode after encoding: %s\n",
                 problem->c_str());
    std::abort();
  }
  // Compared bit for bit, not field by field: a NaN (which the protocol
  // carries, e.g. a diverged worker's loss) is unequal to itself, so a field
  // comparison fails on a message that came back exactly; bytes also tell
  // 0.0 from -0.0 and keep unknown fields in the comparison.
  if (deterministic_bytes(again.envelope) != deterministic_bytes(decoded.envelope) ||
      again.frames.size() != decoded.frames.size()) {
    std::fprintf(stderr, "encode + decode changed a message\n");
    std::abort();
  }
  for (size_t i = 0; i < again.frames.size(); ++i) {
    if (again.frames[i] != decoded.frames[i]) {
      std::fprintf(stderr, "encode + decode changed frame %zu\n", i);
      std::abort();
    }
  }
}

// After check_tensors passed: every tensor is read as the receivers read it.
void read_tensors(const Message& message) {
  for (int i = 0; i < message.envelope.tensors_size(); ++i) {
    std::vector<float> values(message.envelope.tensors(i).count());
    copy_tensor(message, static_cast<size_t>(i), values);
    std::vector<float> sum(values.size(), 0.0f);
    add_tensor_into(message, static_cast<size_t>(i), sum);
    if (!all_finite(values)) {
      std::fprintf(stderr, "check_tensors passed a tensor with non-finite values\n");
      std::abort();
    }
  }
}

}  // namespace
}  // namespace dctrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dctrain;
  // Built once per process: the expected tensors of the fuzz run's model.
  static const fuzz::Specs specs = fuzz::make_specs();
  fuzz::Reader in(data, size);
  const std::vector<std::string> parts = fuzz::read_parts(in);
  Message message;
  if (decode(fuzz::to_messages(parts), message)) return 0;
  fuzz::check_roundtrip(message);
  (void)version_problem(message.envelope);
  (void)body_name(message.envelope);
  const std::span<const TensorSpec> expected = message.envelope.has_welcome()
                                                   ? std::span<const TensorSpec>(specs.state)
                                                   : std::span<const TensorSpec>(specs.update);
  if (!check_tensors(message, expected)) fuzz::read_tensors(message);
  // Only the gradient, as a worker without BatchNorm statistics expects.
  if (!check_tensors(message, std::span<const TensorSpec>(specs.update).first(1))) {
    fuzz::read_tensors(message);
  }
  return 0;
}
