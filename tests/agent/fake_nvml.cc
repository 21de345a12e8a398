// A stand-in for libnvidia-ml.so.1 with two GPUs, for nvml_test on machines
// without NVIDIA's driver. It exports the C symbols clients/agent/nvml.cc
// binds, with NVML's signatures and return codes (0 success, 3 not
// supported, 9 driver not loaded). The same test runs against the real
// library on a GPU machine (ARBITER_NVML_LIBRARY=libnvidia-ml.so.1).
#include <cstdlib>
#include <cstring>

namespace {

struct Utilization {
  unsigned int gpu;
  unsigned int memory;
};
struct Memory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct MemoryV2 {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
struct FakeGpu {
  const char* uuid;
  const char* name;
  unsigned int util;
  unsigned long long used_mib;
  unsigned int power_mw;  // 0: not supported.
};
constexpr FakeGpu kGpus[] = {
    {"GPU-3f1c9a52-7d4e-4b8a-9c21-5e6f70a18b01", "NVIDIA H100 80GB HBM3", 37, 12288, 312000},
    {"GPU-a84e2d17-0b93-4c6f-8e5a-12d3c4b5f602", "NVIDIA H100 80GB HBM3", 0, 0, 0},
};
constexpr unsigned long long kTotalMib = 81559;
// Set aside by the driver, as on a real GPU (an idle H200 on driver 580
// shows 615 MiB): the first memory call counts it as used, v2 apart.
constexpr unsigned long long kReservedMib = 615;
bool initialised = false;

int Copy(const char* text, char* out, unsigned int length) {
  if (std::strlen(text) + 1 > length) return 7;  // NVML_ERROR_INSUFFICIENT_SIZE.
  std::strcpy(out, text);
  return 0;
}

const FakeGpu* Gpu(void* device) { return static_cast<const FakeGpu*>(device); }

}  // namespace

extern "C" {

int nvmlInit_v2() {
  if (std::getenv("FAKE_NVML_DRIVER_NOT_LOADED") != nullptr) return 9;
  initialised = true;
  return 0;
}
int nvmlShutdown() {
  initialised = false;
  return 0;
}
const char* nvmlErrorString(int rc) {
  switch (rc) {
    case 0:
      return "Success";
    case 3:
      return "Not Supported";
    case 9:
      return "Driver Not Loaded";
    default:
      return "Unknown Error";
  }
}
int nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!initialised) return 1;  // NVML_ERROR_UNINITIALIZED.
  *count = sizeof(kGpus) / sizeof(kGpus[0]);
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (index >= sizeof(kGpus) / sizeof(kGpus[0])) return 2;  // NVML_ERROR_INVALID_ARGUMENT.
  *device = const_cast<FakeGpu*>(&kGpus[index]);
  return 0;
}
int nvmlDeviceGetUUID(void* device, char* uuid, unsigned int length) {
  return Copy(Gpu(device)->uuid, uuid, length);
}
int nvmlDeviceGetName(void* device, char* name, unsigned int length) {
  return Copy(Gpu(device)->name, name, length);
}
int nvmlDeviceGetUtilizationRates(void* device, Utilization* util) {
  util->gpu = Gpu(device)->util;
  util->memory = Gpu(device)->util / 2;
  return 0;
}
int nvmlDeviceGetMemoryInfo(void* device, Memory* memory) {
  memory->total = kTotalMib << 20;
  memory->used = (Gpu(device)->used_mib + kReservedMib) << 20;
  memory->free = memory->total - memory->used;
  return 0;
}
// FAKE_NVML_NO_MEMORY_V2 plays a driver older than R510. `used` counts the
// reservation too, though driver 580 leaves it out (nvml.h's note says
// either): the reader must not rely on `used`.
int nvmlDeviceGetMemoryInfo_v2(void* device, MemoryV2* memory) {
  if (std::getenv("FAKE_NVML_NO_MEMORY_V2") != nullptr) return 13;  // FUNCTION_NOT_FOUND.
  // NVML_STRUCT_VERSION(Memory, 2); else NVML_ERROR_ARGUMENT_VERSION_MISMATCH.
  if (memory->version != (sizeof(MemoryV2) | (2u << 24))) return 25;
  memory->total = kTotalMib << 20;
  memory->reserved = kReservedMib << 20;
  memory->used = (Gpu(device)->used_mib + kReservedMib) << 20;
  memory->free = memory->total - memory->used;
  return 0;
}
int nvmlDeviceGetPowerUsage(void* device, unsigned int* milliwatts) {
  if (Gpu(device)->power_mw == 0) return 3;
  *milliwatts = Gpu(device)->power_mw;
  return 0;
}

}  // extern "C"
