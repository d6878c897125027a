// The safetensors reader (runtime/safetensors.h), as model import will use
// it on a file from anywhere: any bytes are either decoded or refused with
// std::runtime_error. Property: what is decoded encodes to a file that
// decodes to the same names, shapes, values (bit for bit) and metadata.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "runtime/safetensors.h"

namespace {

bool same(const dctrain::SafeTensors& a, const dctrain::SafeTensors& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const dctrain::SafeTensor &x = a.tensors[i], &y = b.tensors[i];
    if (x.name != y.name || x.shape != y.shape || x.values.size() != y.values.size() ||
        std::memcmp(x.values.data(), y.values.data(), x.values.size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  dctrain::SafeTensors file;
  try {
    file = dctrain::decode_safetensors(bytes, "fuzz.safetensors");
  } catch (const std::runtime_error&) {
    return 0;
  }
  const dctrain::SafeTensors again =
      dctrain::decode_safetensors(dctrain::encode_safetensors(file), "again");
  if (!same(file, again)) {
    std::fprintf(stderr, "a decoded file does not survive encode and decode\n");
    std::abort();
  }
  return 0;
}
