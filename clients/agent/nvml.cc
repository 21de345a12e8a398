#include "clients/agent/nvml.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include <dlfcn.h>

namespace arbiter::agent {
namespace {

// The NVML C types this file uses, as nvml.h declares them (the header is
// not needed to build: the library is found at run time).
using NvmlReturn = int;  // nvmlReturn_t; NVML_SUCCESS is 0.
using NvmlDevice = void*;
constexpr NvmlReturn kSuccess = 0;
struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;  // Counts the driver's reservation.
};
// nvmlMemory_v2_t (drivers from R510): the reservation apart.
struct NvmlMemoryV2 {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;  // Set aside by the driver and firmware.
  unsigned long long free;
  unsigned long long used;
};
// NVML_STRUCT_VERSION(Memory, 2): the struct's size, and 2 in the top byte.
constexpr unsigned int kMemoryV2Version =
    static_cast<unsigned int>(sizeof(NvmlMemoryV2)) | (2u << 24);
static_assert(sizeof(NvmlMemoryV2) == 40, "nvml.h's layout: version padded to 8 bytes");

constexpr unsigned int kUuidLength = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE.
constexpr unsigned int kNameLength = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE.

}  // namespace

struct Nvml::Api {
  NvmlReturn (*init)();
  NvmlReturn (*shutdown)();
  const char* (*error_string)(NvmlReturn);
  NvmlReturn (*count)(unsigned int*);
  NvmlReturn (*handle_by_index)(unsigned int, NvmlDevice*);
  NvmlReturn (*uuid)(NvmlDevice, char*, unsigned int);
  NvmlReturn (*name)(NvmlDevice, char*, unsigned int);
  NvmlReturn (*utilization)(NvmlDevice, NvmlUtilization*);
  NvmlReturn (*memory)(NvmlDevice, NvmlMemory*);
  NvmlReturn (*memory_v2)(NvmlDevice, NvmlMemoryV2*);  // nullptr before R510.
  NvmlReturn (*power)(NvmlDevice, unsigned int*);

  std::string Error(NvmlReturn rc) const {
    const char* text = error_string != nullptr ? error_string(rc) : nullptr;
    return text != nullptr ? std::string(text) : absl::StrCat("NVML error ", rc);
  }
};

namespace {

template <typename Fn>
bool Bind(void* handle, const char* symbol, Fn& fn, std::string& missing) {
  fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
  if (fn == nullptr && missing.empty()) missing = symbol;
  return fn != nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Nvml>> Nvml::Open(const std::string& library) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::UnavailableError(
        absl::StrCat("NVML: cannot load ", library, ": ", why != nullptr ? why : "unknown error"));
  }
  auto api = std::make_unique<Api>();
  std::string missing;
  Bind(handle, "nvmlInit_v2", api->init, missing);
  Bind(handle, "nvmlShutdown", api->shutdown, missing);
  Bind(handle, "nvmlErrorString", api->error_string, missing);
  Bind(handle, "nvmlDeviceGetCount_v2", api->count, missing);
  Bind(handle, "nvmlDeviceGetHandleByIndex_v2", api->handle_by_index, missing);
  Bind(handle, "nvmlDeviceGetUUID", api->uuid, missing);
  Bind(handle, "nvmlDeviceGetName", api->name, missing);
  Bind(handle, "nvmlDeviceGetUtilizationRates", api->utilization, missing);
  Bind(handle, "nvmlDeviceGetMemoryInfo", api->memory, missing);
  Bind(handle, "nvmlDeviceGetPowerUsage", api->power, missing);
  std::string optional;  // Older drivers lack it: the first memory call stands in.
  Bind(handle, "nvmlDeviceGetMemoryInfo_v2", api->memory_v2, optional);
  if (!missing.empty()) {
    dlclose(handle);
    return absl::UnavailableError(absl::StrCat("NVML: ", library, " has no ", missing));
  }
  if (NvmlReturn rc = api->init(); rc != kSuccess) {
    const std::string why = api->Error(rc);
    dlclose(handle);
    return absl::UnavailableError(absl::StrCat("NVML: nvmlInit_v2: ", why));
  }
  return std::unique_ptr<Nvml>(new Nvml(handle, std::move(api)));
}

Nvml::Nvml(void* handle, std::unique_ptr<Api> api) : handle_(handle), api_(std::move(api)) {}

Nvml::~Nvml() {
  api_->shutdown();
  dlclose(handle_);
}

int Nvml::ReadMemory(void* device, int64_t* used_mib, int64_t* free_mib,
                     std::vector<std::string>* problems) const {
  if (api_->memory_v2 != nullptr) {
    NvmlMemoryV2 memory{};
    memory.version = kMemoryV2Version;
    const NvmlReturn rc = api_->memory_v2(device, &memory);
    if (rc != kSuccess && !memory_v2_failed_) {
      memory_v2_failed_ = true;
      problems->push_back(absl::StrCat("nvmlDeviceGetMemoryInfo_v2: ", api_->Error(rc),
                                       "; used memory includes the driver's reservation"));
    }
    if (rc == kSuccess) {
      // What nvidia-smi shows as used: neither free nor reserved. (nvml.h
      // says v2's `used` may count the reservation too.)
      const unsigned long long held = memory.reserved + memory.free;
      *used_mib = static_cast<int64_t>((memory.total > held ? memory.total - held : 0) >> 20);
      *free_mib = static_cast<int64_t>(memory.free >> 20);
      return kSuccess;
    }
  }
  NvmlMemory memory{};
  const NvmlReturn rc = api_->memory(device, &memory);
  if (rc == kSuccess) {
    *used_mib = static_cast<int64_t>(memory.used >> 20);
    *free_mib = static_cast<int64_t>(memory.free >> 20);
  }
  return rc;
}

std::vector<DeviceReading> Nvml::Read(std::vector<std::string>* problems) const {
  std::vector<DeviceReading> out;
  unsigned int count = 0;
  if (NvmlReturn rc = api_->count(&count); rc != kSuccess) {
    problems->push_back(absl::StrCat("nvmlDeviceGetCount_v2: ", api_->Error(rc)));
    return out;
  }
  for (unsigned int i = 0; i < count; ++i) {
    NvmlDevice device = nullptr;
    char uuid[kUuidLength] = "";
    char name[kNameLength] = "";
    NvmlUtilization util{};
    NvmlReturn rc = api_->handle_by_index(i, &device);
    if (rc == kSuccess) rc = api_->uuid(device, uuid, kUuidLength);
    if (rc == kSuccess) rc = api_->utilization(device, &util);
    int64_t used_mib = 0;
    int64_t free_mib = 0;
    if (rc == kSuccess) rc = ReadMemory(device, &used_mib, &free_mib, problems);
    if (rc != kSuccess) {
      problems->push_back(absl::StrCat("GPU ", i, ": ", api_->Error(rc)));
      continue;
    }
    DeviceReading r;
    r.uuid = uuid;
    r.gpu_index = static_cast<int32_t>(i);
    if (api_->name(device, name, kNameLength) == kSuccess) r.model_name = name;
    r.util_milli = static_cast<int32_t>(util.gpu > 100 ? 1000 : util.gpu * 10);
    r.fb_used_mib = used_mib;
    r.fb_free_mib = free_mib;
    unsigned int milliwatts = 0;
    if (api_->power(device, &milliwatts) == kSuccess) r.power_mw = milliwatts;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace arbiter::agent
