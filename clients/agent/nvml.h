// NVML, NVIDIA's management library, loaded at run time (dlopen): the agent
// builds, installs and runs on machines without NVIDIA's driver, and where
// the driver is there but no dcgm-exporter runs, it reads each GPU's
// utilisation, memory and power from the driver itself (arbiter-agent
// --nvml). Only the NVML calls below are used, each by its C symbol.
//
// Thread-compatible: one Nvml per thread, or calls serialised.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "clients/agent/dcgm_text.h"

namespace arbiter::agent {

inline constexpr char kNvmlLibrary[] = "libnvidia-ml.so.1";

class Nvml {
 public:
  // Loads `library` and initialises NVML. UNAVAILABLE naming the library,
  // symbol or call that failed (no driver installed, a driver without the
  // symbol, nvmlInit failing: no GPU or a driver/library mismatch).
  static absl::StatusOr<std::unique_ptr<Nvml>> Open(const std::string& library = kNvmlLibrary);

  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;
  ~Nvml();  // nvmlShutdown, then dlclose.

  // One reading per GPU, by index: UUID, product name, utilisation (x10),
  // framebuffer used and free (MiB) and power (mW). A GPU whose calls fail
  // is left out, with why in `problems`; a reading NVML does not support on
  // the GPU (power on some boards) stays -1. Used memory is what nvidia-smi
  // shows: without the few hundred MiB the driver reserves (an idle H200
  // reads 0, not 615), through nvmlDeviceGetMemoryInfo_v2; a driver older
  // than R510 has only the first call, whose `used` counts the reservation.
  std::vector<DeviceReading> Read(std::vector<std::string>* problems) const;

 private:
  struct Api;
  Nvml(void* handle, std::unique_ptr<Api> api);
  // One GPU's framebuffer use, in MiB: the NVML return code. The first
  // time the second memory call fails where the driver has it, says so in
  // `problems` (its fallback counts the reservation as used).
  int ReadMemory(void* device, int64_t* used_mib, int64_t* free_mib,
                 std::vector<std::string>* problems) const;

  void* handle_;
  std::unique_ptr<Api> api_;
  mutable bool memory_v2_failed_ = false;  // Reported once.
};

}  // namespace arbiter::agent
