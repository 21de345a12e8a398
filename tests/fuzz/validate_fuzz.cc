// Fuzz target: request validation (core/validate.h) on specs built from
// arbitrary bytes: names, keys and descriptions with NUL bytes, invalid UTF-8,
// SQL and over-long text; quantities anywhere in int64, negative and
// overflowing. Whatever it is given, ValidateRequestSpec returns (no crash);
// an error is INVALID_ARGUMENT naming a field; and what it accepts holds the
// bounds the rest of Arbiter relies on. A broken bound aborts (a finding).
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/validate.h"
#include "tests/fuzz/spec_bounds.h"

namespace {

using arbiter::core::CapacityRequestSpec;

class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t Byte() { return at_ < size_ ? data_[at_++] : 0; }
  int64_t Int64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | Byte();
    return static_cast<int64_t>(v);
  }
  // Small values most of the time, any int64 now and then.
  int64_t Quantity() { return Byte() % 4 == 0 ? Int64() : static_cast<int64_t>(Byte()) - 16; }
  std::string Text() {
    const size_t n = Byte() % 4 == 0 ? 200 + Byte() : Byte() % 24;
    std::string s;
    for (size_t i = 0; i < n; ++i) s.push_back(static_cast<char>(Byte()));
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in(data, size);
  CapacityRequestSpec spec;
  spec.idempotency_key = in.Byte() % 2 ? in.Text() : "key-1";
  spec.team = in.Byte() % 2 ? in.Text() : "team";
  spec.pool = in.Byte() % 2 ? in.Text() : "pool";
  spec.description = in.Text();
  spec.workload_class = static_cast<arbiter::core::WorkloadClass>(in.Byte() % 7);
  spec.members = static_cast<int32_t>(in.Quantity());
  switch (in.Byte() % 3) {
    case 0:
      spec.shape.gpu = static_cast<int32_t>(in.Quantity());
      break;
    case 1:
      spec.shape.gpu = arbiter::core::MigShape{in.Byte() % 2 ? in.Text() : "3g.40gb", 0};
      break;
    default:
      spec.shape.gpu = arbiter::core::GpuFraction{in.Quantity() * 50, in.Quantity() * 1024};
  }
  spec.shape.cpu_milli = in.Quantity();
  spec.shape.memory_mib = in.Quantity();
  spec.priority = static_cast<int32_t>(in.Quantity());
  spec.checkpoint_seconds = in.Quantity();
  spec.topology = static_cast<arbiter::core::Topology>(in.Byte() % 4);

  const absl::Status status = arbiter::core::ValidateRequestSpec(spec);
  if (!status.ok()) {
    arbiter::fuzz::CheckFieldError(status);
    return 0;
  }
  arbiter::fuzz::CheckAcceptedSpec(spec);
  return 0;
}
