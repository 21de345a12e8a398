// Fuzz target: the proto-to-domain conversions (server/convert.h) on messages
// parsed from arbitrary wire bytes, the way gRPC hands them to the services:
// unknown enum numbers, unset oneofs, any int64, NUL bytes and invalid UTF-8
// in bytes-typed text, timestamps out of range. The first byte picks the
// message. Contracts, each a finding when broken (abort):
//   - a conversion returns (no crash), and its error is INVALID_ARGUMENT
//     naming a field;
//   - a request spec that converts and validates holds the bounds in
//     spec_bounds.h, and a model profile is sized without overflow;
//   - an accepted governance message converts back to the same message:
//     ToProto(FromProto(ToProto(x))) == ToProto(x).
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/model_sizing.h"
#include "core/validate.h"
#include "server/convert.h"
#include "tests/fuzz/spec_bounds.h"

namespace {

namespace v1 = ::arbiter::v1;
using arbiter::fuzz::Check;
using arbiter::fuzz::CheckFieldError;

std::string Wire(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  m.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

void RequestSpec(const v1::RequestCapacityRequest& req) {
  absl::StatusOr<arbiter::core::CapacityRequestSpec> spec = arbiter::server::SpecFromProto(req);
  if (!spec.ok()) return CheckFieldError(spec.status());
  const absl::Status valid = arbiter::core::ValidateRequestSpec(*spec);
  if (!valid.ok()) return CheckFieldError(valid);
  arbiter::fuzz::CheckAcceptedSpec(*spec);
  for (const std::string& model : spec->gpu_models) {
    Check(arbiter::fuzz::PlainName(model), "gpu_models are plain names");
  }
  if (spec->model_profile.has_value()) {
    absl::StatusOr<int64_t> mib = arbiter::core::ModelMemoryMib(*spec->model_profile);
    if (!mib.ok()) return CheckFieldError(mib.status());
    Check(*mib > 0, "a sized model needs memory");
  }
}

// Message M converted by `from` (StatusOr<T>(const M&)) and back by ToProto.
template <typename M, typename From>
void RoundTrip(const M& message, From from) {
  auto value = from(message);
  if (!value.ok()) return CheckFieldError(value.status());
  M once;
  arbiter::server::ToProto(*value, &once);
  auto again = from(once);
  Check(again.ok(), "a converted message converts again");
  M twice;
  arbiter::server::ToProto(*again, &twice);
  Check(Wire(once) == Wire(twice), "a converted message converts back to itself");
}

template <typename M>
bool Parse(M& m, const uint8_t* data, size_t size) {
  return m.ParseFromArray(data, static_cast<int>(size));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The runtime logs every refused string (invalid UTF-8); refusing is
  // expected here, and the logging would slow the fuzzer tenfold.
  static const bool kSilenced = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)kSilenced;
  if (size == 0) return 0;
  const uint8_t kind = data[0];
  ++data;
  --size;
  using namespace arbiter::server;  // NOLINT: the conversions under test.
  switch (kind % 8) {
    case 0: {
      v1::RequestCapacityRequest m;
      if (Parse(m, data, size)) RequestSpec(m);
      break;
    }
    case 1: {
      v1::Pool m;
      if (Parse(m, data, size)) RoundTrip(m, [](const v1::Pool& p) { return PoolFromProto(p); });
      break;
    }
    case 2: {
      v1::CoexistenceRule m;
      if (Parse(m, data, size)) {
        RoundTrip(m, [](const v1::CoexistenceRule& r) { return ClassRuleFromProto(r); });
      }
      break;
    }
    case 3: {
      v1::RoleBinding m;
      if (Parse(m, data, size)) {
        RoundTrip(m, [](const v1::RoleBinding& b) { return RoleBindingFromProto(b); });
      }
      break;
    }
    case 4: {
      v1::AuthorityRule m;
      if (Parse(m, data, size)) {
        RoundTrip(m, [](const v1::AuthorityRule& r) { return AuthorityRuleFromProto(r); });
      }
      break;
    }
    case 5: {
      v1::Price m;
      if (Parse(m, data, size)) RoundTrip(m, [](const v1::Price& p) { return PriceFromProto(p); });
      break;
    }
    case 6: {
      v1::Budget m;
      if (Parse(m, data, size)) {
        RoundTrip(m, [](const v1::Budget& b) { return BudgetFromProto(b); });
      }
      break;
    }
    default: {
      google::protobuf::Timestamp m;
      if (!Parse(m, data, size)) break;
      absl::StatusOr<absl::Time> t = TimeFromProto(true, m, "time");
      if (!t.ok()) return CheckFieldError(t.status()), 0;
      absl::StatusOr<absl::Time> again = TimeFromProto(true, TimestampOf(*t), "time");
      Check(again.ok() && *again == *t - absl::Nanoseconds(m.nanos() % 1000),
            "a time converts back to itself, to the microsecond");
    }
  }
  return 0;
}
