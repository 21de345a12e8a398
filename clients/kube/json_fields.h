// Reading Kubernetes objects (nlohmann::json) without exceptions: a missing
// or mistyped field reads as null or "".
//
// Thread-safe.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace arbiter::kube {

// object[key], or null when `object` is not an object or has no `key`.
inline const nlohmann::json& Field(const nlohmann::json& object, const char* key) {
  static const nlohmann::json kNull;
  return object.is_object() && object.contains(key) ? object[key] : kNull;
}

// object[key] when it is a string, else "".
inline std::string Text(const nlohmann::json& object, const char* key) {
  const nlohmann::json& v = Field(object, key);
  return v.is_string() ? v.get<std::string>() : "";
}

}  // namespace arbiter::kube
