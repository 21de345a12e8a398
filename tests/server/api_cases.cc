#include "tests/server/api_cases.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/timestamp.pb.h>

namespace arbiter::testing {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Deep enough for every request of arbiter.v1 (RegisterNode reaches
// node.gpus[0].reported_mig_placements[0].start_slots), and a bound should
// a message ever refer to itself.
constexpr int kMaxDepth = 6;
constexpr int kHugeCount = 5000;
constexpr int kUnknownEnumNumber = 1000;
constexpr int64_t kAbsentId = 987'654'321;
constexpr int64_t kTimestampMaxSeconds = 253'402'300'799;  // 9999-12-31T23:59:59Z
constexpr int64_t kTimestampMinSeconds = -62'135'596'800;  // 0001-01-01T00:00:00Z

using Path = std::vector<FieldStep>;
// Changes the field at the end of a path in its parent message; `index` is
// the element for a repeated field's element, -1 otherwise.
using Apply = std::function<void(Message* parent, const FieldDescriptor* field, int index)>;

bool IsTimestamp(const Descriptor* type) {
  return type->full_name() == google::protobuf::Timestamp::descriptor()->full_name();
}

std::string PathString(const Path& path) {
  std::string out;
  for (const FieldStep& step : path) {
    if (!out.empty()) absl::StrAppend(&out, ".");
    absl::StrAppend(&out, step.field->name());
    if (step.index >= 0) absl::StrAppend(&out, "[", step.index, "]");
  }
  return out;
}

// The message holding the last step's field, made along the way where the
// base leaves a message or an element absent.
Message* ParentOf(Message* root, const Path& path) {
  Message* m = root;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    const FieldStep& step = path[i];
    const Reflection* r = m->GetReflection();
    if (step.field->is_repeated()) {
      while (r->FieldSize(*m, step.field) <= step.index) r->AddMessage(m, step.field);
      m = r->MutableRepeatedMessage(m, step.field, step.index);
    } else {
      m = r->MutableMessage(m, step.field);
    }
  }
  return m;
}

// The path to the first message along `path` (the leaf aside) that `base`
// leaves out; empty when it has them all.
std::string FirstMade(const Message& base, const Path& path) {
  const Message* m = &base;
  Path walked;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    const FieldStep& step = path[i];
    const Reflection* r = m->GetReflection();
    walked.push_back(step);
    if (step.field->is_repeated()) {
      if (r->FieldSize(*m, step.field) <= step.index) return PathString(walked);
      m = &r->GetRepeatedMessage(*m, step.field, step.index);
    } else {
      if (!r->HasField(*m, step.field)) return PathString(walked);
      m = &r->GetMessage(*m, step.field);
    }
  }
  return "";
}

// Sets a number of any integer type, saturating at the type's bounds.
void SetNumber(Message* m, const FieldDescriptor* f, int index, int64_t value) {
  const Reflection* r = m->GetReflection();
  const auto i32 = static_cast<int32_t>(std::clamp<int64_t>(
      value, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()));
  const auto u32 =
      static_cast<uint32_t>(std::clamp<int64_t>(value, 0, std::numeric_limits<uint32_t>::max()));
  const auto u64 = static_cast<uint64_t>(std::max<int64_t>(value, 0));
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      index < 0 ? r->SetInt32(m, f, i32) : r->SetRepeatedInt32(m, f, index, i32);
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      index < 0 ? r->SetInt64(m, f, value) : r->SetRepeatedInt64(m, f, index, value);
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      index < 0 ? r->SetUInt32(m, f, u32) : r->SetRepeatedUInt32(m, f, index, u32);
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      index < 0 ? r->SetUInt64(m, f, u64) : r->SetRepeatedUInt64(m, f, index, u64);
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      index < 0 ? r->SetEnumValue(m, f, i32) : r->SetRepeatedEnumValue(m, f, index, i32);
      break;
    default:
      break;
  }
}

// The number, text or bool at the end of a path in `m` is "given" when it
// is not its type's zero value.
bool Given(const Message& m, const FieldDescriptor* f, int index) {
  const Reflection* r = m.GetReflection();
  if (f->is_repeated() && index < 0) return r->FieldSize(m, f) > 0;
  if (f->is_repeated() && index >= r->FieldSize(m, f)) return false;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return (index < 0 ? r->GetInt32(m, f) : r->GetRepeatedInt32(m, f, index)) != 0;
    case FieldDescriptor::CPPTYPE_INT64:
      return (index < 0 ? r->GetInt64(m, f) : r->GetRepeatedInt64(m, f, index)) != 0;
    case FieldDescriptor::CPPTYPE_UINT32:
      return (index < 0 ? r->GetUInt32(m, f) : r->GetRepeatedUInt32(m, f, index)) != 0;
    case FieldDescriptor::CPPTYPE_UINT64:
      return (index < 0 ? r->GetUInt64(m, f) : r->GetRepeatedUInt64(m, f, index)) != 0;
    case FieldDescriptor::CPPTYPE_ENUM:
      return (index < 0 ? r->GetEnumValue(m, f) : r->GetRepeatedEnumValue(m, f, index)) != 0;
    case FieldDescriptor::CPPTYPE_STRING:
      return !(index < 0 ? r->GetString(m, f) : r->GetRepeatedString(m, f, index)).empty();
    case FieldDescriptor::CPPTYPE_BOOL:
      return index < 0 ? r->GetBool(m, f) : r->GetRepeatedBool(m, f, index);
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return index >= 0 || r->HasField(m, f);
    default:
      return false;
  }
}

// Appends `n` copies of the first element of the repeated field `f`.
// REQUIRES: the field has an element.
void AppendCopiesOfFirst(Message* m, const FieldDescriptor* f, int n) {
  const Reflection* r = m->GetReflection();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_MESSAGE: {
      std::unique_ptr<Message> first(r->GetRepeatedMessage(*m, f, 0).New());
      first->CopyFrom(r->GetRepeatedMessage(*m, f, 0));
      for (int i = 0; i < n; ++i) r->AddMessage(m, f)->CopyFrom(*first);
      break;
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      const std::string first = r->GetRepeatedString(*m, f, 0);
      for (int i = 0; i < n; ++i) r->AddString(m, f, first);
      break;
    }
    case FieldDescriptor::CPPTYPE_ENUM: {
      const int first = r->GetRepeatedEnumValue(*m, f, 0);
      for (int i = 0; i < n; ++i) r->AddEnumValue(m, f, first);
      break;
    }
    case FieldDescriptor::CPPTYPE_INT32: {
      const int32_t first = r->GetRepeatedInt32(*m, f, 0);
      for (int i = 0; i < n; ++i) r->AddInt32(m, f, first);
      break;
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      const int64_t first = r->GetRepeatedInt64(*m, f, 0);
      for (int i = 0; i < n; ++i) r->AddInt64(m, f, first);
      break;
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      const bool first = r->GetRepeatedBool(*m, f, 0);
      for (int i = 0; i < n; ++i) r->AddBool(m, f, first);
      break;
    }
    default:
      break;
  }
}

// Sets a google.protobuf.Timestamp through reflection: it may be a
// generated message or a dynamic one.
void SetTime(Message* t, int64_t seconds, int32_t nanos) {
  const Reflection* r = t->GetReflection();
  r->SetInt64(t, t->GetDescriptor()->FindFieldByName("seconds"), seconds);
  r->SetInt32(t, t->GetDescriptor()->FindFieldByName("nanos"), nanos);
}

class Generator {
 public:
  Generator(const Message& base, absl::Time now, const std::vector<std::string>& absent_refs)
      : base_(base), now_(absl::ToUnixSeconds(now)), absent_refs_(absent_refs) {}

  std::vector<ApiCase> Run() {
    Walk(*base_.GetDescriptor(), {}, 0);
    return std::move(cases_);
  }

 private:
  // Adds one case: the base, with `apply` done at the end of `path`.
  // `only_if_given`: skipped unless the base gives the value changed.
  void Add(const Path& path, Mutation mutation, std::vector<std::string> names, const Apply& apply,
           bool only_if_given = false) {
    std::unique_ptr<Message> copy(base_.New());
    copy->CopyFrom(base_);
    Message* parent = ParentOf(copy.get(), path);
    const FieldStep& leaf = path.back();
    if (only_if_given && !Given(*parent, leaf.field, leaf.index)) return;
    apply(parent, leaf.field, leaf.index);
    ApiCase c;
    c.field = PathString(path);
    c.names = std::move(names);
    c.made = FirstMade(base_, path);
    c.mutation = mutation;
    {
      // Serializing invalid UTF-8 logs an error; the bytes are the point.
      google::protobuf::LogSilencer silence;
      copy->SerializePartialToString(&c.body);
    }
    Keep(std::move(c));
  }

  void Walk(const Descriptor& type, const Path& prefix, int depth) {
    if (depth > kMaxDepth) return;
    std::vector<const FieldDescriptor*> times;
    for (int i = 0; i < type.field_count(); ++i) {
      const FieldDescriptor* f = type.field(i);
      Path path = prefix;
      if (f->is_repeated()) {
        path.push_back({f, -1});
        RepeatedCases(path);
        path.back().index = 0;
      } else {
        path.push_back({f, -1});
      }
      if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
        ScalarCases(path);
      } else if (IsTimestamp(f->message_type())) {
        if (!f->is_repeated()) times.push_back(f);
        TimeCases(path);
      } else {
        Walk(*f->message_type(), path, depth + 1);
      }
    }
    if (times.size() >= 2) WindowCases(prefix, times[0], times[1]);
  }

  void ScalarCases(const Path& path) {
    const FieldDescriptor* f = path.back().field;
    const std::vector<std::string> names = {f->name()};
    auto element = [](Message* m, const FieldDescriptor* field, int index) {
      const Reflection* r = m->GetReflection();
      while (index >= 0 && r->FieldSize(*m, field) <= index) {
        switch (field->cpp_type()) {
          case FieldDescriptor::CPPTYPE_STRING:
            r->AddString(m, field, "");
            break;
          case FieldDescriptor::CPPTYPE_BOOL:
            r->AddBool(m, field, false);
            break;
          case FieldDescriptor::CPPTYPE_ENUM:
            r->AddEnumValue(m, field, 0);
            break;
          case FieldDescriptor::CPPTYPE_INT32:
            r->AddInt32(m, field, 0);
            break;
          case FieldDescriptor::CPPTYPE_INT64:
            r->AddInt64(m, field, 0);
            break;
          case FieldDescriptor::CPPTYPE_UINT32:
            r->AddUInt32(m, field, 0);
            break;
          case FieldDescriptor::CPPTYPE_UINT64:
            r->AddUInt64(m, field, 0);
            break;
          default:
            return;
        }
      }
    };
    auto number = [&](int64_t value) -> Apply {
      return [element, value](Message* m, const FieldDescriptor* field, int index) {
        element(m, field, index);
        SetNumber(m, field, index, value);
      };
    };
    auto text = [&](std::string value) -> Apply {
      return [element, value](Message* m, const FieldDescriptor* field, int index) {
        element(m, field, index);
        const Reflection* r = m->GetReflection();
        index < 0 ? r->SetString(m, field, value) : r->SetRepeatedString(m, field, index, value);
      };
    };
    const bool absent_ref =
        std::find(absent_refs_.begin(), absent_refs_.end(), f->name()) != absent_refs_.end();
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
      case FieldDescriptor::CPPTYPE_INT64:
      case FieldDescriptor::CPPTYPE_UINT32:
      case FieldDescriptor::CPPTYPE_UINT64: {
        const bool is64 = f->cpp_type() == FieldDescriptor::CPPTYPE_INT64 ||
                          f->cpp_type() == FieldDescriptor::CPPTYPE_UINT64;
        const bool is_signed = f->cpp_type() == FieldDescriptor::CPPTYPE_INT32 ||
                               f->cpp_type() == FieldDescriptor::CPPTYPE_INT64;
        Add(path, Mutation::kZero, names, number(0), /*only_if_given=*/true);
        if (is_signed) {
          Add(path, Mutation::kMinusOne, names, number(-1));
          Add(path, Mutation::kTypeMin, names,
              number(is64 ? std::numeric_limits<int64_t>::min()
                          : std::numeric_limits<int32_t>::min()));
        }
        Add(path, Mutation::kTypeMax, names,
            number(is64 ? std::numeric_limits<int64_t>::max()
                        : std::numeric_limits<int32_t>::max()));
        if (absent_ref) Add(path, Mutation::kAbsent, names, number(kAbsentId));
        break;
      }
      case FieldDescriptor::CPPTYPE_ENUM:
        Add(path, Mutation::kUnknownEnum, names, number(kUnknownEnumNumber));
        Add(path, Mutation::kUnspecifiedEnum, names, number(0), /*only_if_given=*/true);
        break;
      case FieldDescriptor::CPPTYPE_STRING:
        Add(path, Mutation::kEmpty, names, text(""), /*only_if_given=*/true);
        Add(path, Mutation::kOverLong, names, text(std::string(70'000, 'a')));
        Add(path, Mutation::kControlCharacter, names, text("bad\x01value"));
        Add(path, Mutation::kNulByte, names, text(std::string("bad\0value", 9)));
        Add(path, Mutation::kInvalidUtf8, names, text("bad\xff\xfevalue"));
        if (absent_ref) Add(path, Mutation::kAbsent, names, text("absent-ref"));
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        Add(path, Mutation::kFlipped, names,
            [element](Message* m, const FieldDescriptor* field, int index) {
              element(m, field, index);
              const Reflection* r = m->GetReflection();
              index < 0
                  ? r->SetBool(m, field, !r->GetBool(*m, field))
                  : r->SetRepeatedBool(m, field, index, !r->GetRepeatedBool(*m, field, index));
            });
        break;
      default:
        break;
    }
  }

  void TimeCases(const Path& path) {
    const std::vector<std::string> names = {path.back().field->name()};
    auto at = [](int64_t seconds, int32_t nanos) -> Apply {
      return [seconds, nanos](Message* m, const FieldDescriptor* field, int index) {
        const Reflection* r = m->GetReflection();
        if (index < 0) return SetTime(r->MutableMessage(m, field), seconds, nanos);
        while (r->FieldSize(*m, field) <= index) r->AddMessage(m, field);
        SetTime(r->MutableRepeatedMessage(m, field, index), seconds, nanos);
      };
    };
    Add(path, Mutation::kTimePast, names, at(now_ - 2 * 86'400, 0));
    Add(path, Mutation::kTimeFarFuture, names, at(kTimestampMaxSeconds, 0));
    Add(path, Mutation::kTimeOutOfRange, names, at(kTimestampMinSeconds - 1, 0));
    Add(path, Mutation::kTimeInvalidNanos, names, at(now_, 1'000'000'000));
  }

  // A window is a message's first two singular times (from/to, start/end).
  void WindowCases(const Path& prefix, const FieldDescriptor* start, const FieldDescriptor* end) {
    std::vector<std::string> names = {start->name(), end->name()};
    if (!prefix.empty()) names.push_back(prefix.back().field->name());
    auto window = [start, end](int64_t from, int64_t to) {
      return [start, end, from, to](Message* m) {
        const Reflection* r = m->GetReflection();
        SetTime(r->MutableMessage(m, start), from, 0);
        SetTime(r->MutableMessage(m, end), to, 0);
      };
    };
    auto add = [&](Mutation mutation, std::function<void(Message*)> set) {
      // The window's message is the last step of the prefix, or the request.
      Path path = prefix;
      path.push_back({start, -1});
      std::unique_ptr<Message> copy(base_.New());
      copy->CopyFrom(base_);
      set(ParentOf(copy.get(), path));
      ApiCase c;
      c.field =
          prefix.empty() ? absl::StrCat(start->name(), "..", end->name()) : PathString(prefix);
      c.names = names;
      c.made = FirstMade(base_, path);
      c.mutation = mutation;
      copy->SerializePartialToString(&c.body);
      Keep(std::move(c));
    };
    const int64_t hour_ago = now_ - 3600;
    add(Mutation::kWindowReversed, window(now_, hour_ago));
    add(Mutation::kWindowEmpty, window(hour_ago, hour_ago));
    add(Mutation::kWindowCenturies, window(hour_ago, hour_ago + int64_t{300} * 365 * 86'400));
  }

  void RepeatedCases(const Path& path) {
    const std::vector<std::string> names = {path.back().field->name()};
    Add(
        path, Mutation::kRepeatedEmpty, names,
        [](Message* m, const FieldDescriptor* f, int) { m->GetReflection()->ClearField(m, f); },
        /*only_if_given=*/true);
    auto copies = [](int n) -> Apply {
      return [n](Message* m, const FieldDescriptor* f, int) { AppendCopiesOfFirst(m, f, n); };
    };
    Add(path, Mutation::kRepeatedDuplicate, names, copies(1), /*only_if_given=*/true);
    Add(path, Mutation::kRepeatedHuge, names, copies(kHugeCount), /*only_if_given=*/true);
  }

  // Keeps a case unless it is the base itself (a past time the base
  // already gives, say).
  void Keep(ApiCase c) {
    if (c.body != base_body_) cases_.push_back(std::move(c));
  }

  const Message& base_;
  const std::string base_body_ = base_.SerializePartialAsString();
  const int64_t now_;
  const std::vector<std::string>& absent_refs_;
  std::vector<ApiCase> cases_;
};

void CollectPaths(const Descriptor& type, const std::string& prefix, int depth,
                  std::vector<std::string>* out) {
  if (depth > kMaxDepth) return;
  for (int i = 0; i < type.field_count(); ++i) {
    const FieldDescriptor* f = type.field(i);
    std::string path = absl::StrCat(prefix, prefix.empty() ? "" : ".", f->name());
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && !IsTimestamp(f->message_type())) {
      if (f->is_repeated()) absl::StrAppend(&path, "[0]");
      CollectPaths(*f->message_type(), path, depth + 1, out);
    } else {
      if (f->is_repeated()) absl::StrAppend(&path, "[0]");
      out->push_back(path);
    }
  }
}

}  // namespace

const char* MutationName(Mutation mutation) {
  switch (mutation) {
    case Mutation::kZero:
      return "zero";
    case Mutation::kMinusOne:
      return "minus-one";
    case Mutation::kTypeMin:
      return "type-min";
    case Mutation::kTypeMax:
      return "type-max";
    case Mutation::kEmpty:
      return "empty";
    case Mutation::kOverLong:
      return "over-long";
    case Mutation::kControlCharacter:
      return "control-character";
    case Mutation::kNulByte:
      return "nul-byte";
    case Mutation::kInvalidUtf8:
      return "invalid-utf8";
    case Mutation::kAbsent:
      return "absent";
    case Mutation::kUnknownEnum:
      return "unknown-enum";
    case Mutation::kUnspecifiedEnum:
      return "unspecified-enum";
    case Mutation::kFlipped:
      return "flipped";
    case Mutation::kTimePast:
      return "time-past";
    case Mutation::kTimeFarFuture:
      return "time-far-future";
    case Mutation::kTimeOutOfRange:
      return "time-out-of-range";
    case Mutation::kTimeInvalidNanos:
      return "time-invalid-nanos";
    case Mutation::kWindowReversed:
      return "window-reversed";
    case Mutation::kWindowEmpty:
      return "window-empty";
    case Mutation::kWindowCenturies:
      return "window-centuries";
    case Mutation::kRepeatedEmpty:
      return "repeated-empty";
    case Mutation::kRepeatedDuplicate:
      return "repeated-duplicate";
    case Mutation::kRepeatedHuge:
      return "repeated-huge";
  }
  return "?";
}

std::vector<ApiCase> GenerateCases(const Message& base, absl::Time now,
                                   const std::vector<std::string>& absent_refs) {
  return Generator(base, now, absent_refs).Run();
}

std::vector<std::string> FieldPaths(const Descriptor& type) {
  std::vector<std::string> out;
  CollectPaths(type, "", 0, &out);
  return out;
}

}  // namespace arbiter::testing
