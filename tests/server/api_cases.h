// Adversarial cases generated from the API's own descriptors: for every field
// of a request message, reached from a valid base request, the values that
// are bad for the field's type (boundaries, 64-bit extremes, empty,
// over-long and control-character text, invalid UTF-8, unknown enum numbers,
// names of things that do not exist, times and windows that are past,
// empty, reversed or centuries long, repeated fields emptied, duplicated or
// huge). A field added to a message later gets its cases without anyone
// writing one. The suite that sends them is tests/server/api_suite.h.
//
// Thread-compatible; no state.
#pragma once

#include <string>
#include <vector>

#include "absl/time/time.h"
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

namespace arbiter::testing {

enum class Mutation {
  kZero,               // A number given in the base, cleared to 0.
  kMinusOne,           // -1.
  kTypeMin,            // The type's minimum (int32 or int64).
  kTypeMax,            // The type's maximum.
  kEmpty,              // Text given in the base, cleared.
  kOverLong,           // 70,000 characters.
  kControlCharacter,   // "bad\x01value".
  kNulByte,            // "bad\0value".
  kInvalidUtf8,        // Bytes that are no UTF-8: the body does not parse.
  kAbsent,             // A reference to a thing that does not exist.
  kUnknownEnum,        // An enum number the API does not define.
  kUnspecifiedEnum,    // An enum given in the base, cleared to UNSPECIFIED.
  kFlipped,            // A bool negated.
  kTimePast,           // Two days before now.
  kTimeFarFuture,      // 9999-12-31T23:59:59Z.
  kTimeOutOfRange,     // Before 0001-01-01: no valid Timestamp.
  kTimeInvalidNanos,   // nanos = 1,000,000,000.
  kWindowReversed,     // The window's end before its start.
  kWindowEmpty,        // The window's end at its start.
  kWindowCenturies,    // A window 300 years long.
  kRepeatedEmpty,      // A repeated field given in the base, cleared.
  kRepeatedDuplicate,  // The first element given twice.
  kRepeatedHuge,       // The first element given 5,000 times.
};

const char* MutationName(Mutation mutation);

// One step of a path from the request to a field: the field, and for a
// repeated one the element (-1 for a singular field, or for the repeated
// field as a whole).
struct FieldStep {
  const google::protobuf::FieldDescriptor* field = nullptr;
  int index = -1;
};

struct ApiCase {
  // The path from the request, e.g. "shape.fraction.gpu_milli" or
  // "node.gpus[0].model"; for a window, the message holding it.
  std::string field;
  // What a refusal must name: the field's own name (or, for a window, either
  // of its two times).
  std::vector<std::string> names;
  // The path of the outermost message on the way to the field that the
  // base leaves out ("shape.model_profile", "node.gpus[0]"), which the case
  // had to make with default values; empty when the base has them all. A
  // refusal may name any field of it: the made message is itself invalid.
  std::string made;
  Mutation mutation = Mutation::kZero;
  // The mutated request, serialized (it may hold invalid UTF-8).
  std::string body;
  std::string label() const { return field + "=" + MutationName(mutation); }
};

// Every case for `base`, a valid request: every field of its type, set in
// the base or not (a case that would equal the base is left out), and every field of the messages
// beneath it (a repeated message through its first element, added if the base has none), except
// inside google.protobuf.Timestamp, which is one value. Times are relative
// to `now`. `absent_refs` are the field names that refer to a thing by name
// (team, pool, ...): they also get kAbsent.
std::vector<ApiCase> GenerateCases(const google::protobuf::Message& base, absl::Time now,
                                   const std::vector<std::string>& absent_refs);

// Every field path of `type` that GenerateCases reaches, in its notation
// (repeated messages as "[0]").
std::vector<std::string> FieldPaths(const google::protobuf::Descriptor& type);

}  // namespace arbiter::testing
