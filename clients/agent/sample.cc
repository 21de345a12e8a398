#include "clients/agent/sample.h"

namespace arbiter::agent {

v1::DeviceSample ToSample(const DeviceReading& d, const google::protobuf::Timestamp& at) {
  v1::DeviceSample s;
  *s.mutable_at() = at;
  s.set_uuid(d.uuid);
  s.set_gpu_index(d.gpu_index);
  if (d.mig_instance >= 0) s.set_mig_instance(d.mig_instance);
  s.set_mig_profile(d.mig_profile);
  if (d.util_milli >= 0) s.set_util_milli(d.util_milli);
  if (d.engine_active_milli >= 0) s.set_engine_active_milli(d.engine_active_milli);
  if (d.fb_used_mib >= 0) s.set_fb_used_mib(d.fb_used_mib);
  if (d.fb_free_mib >= 0) s.set_fb_free_mib(d.fb_free_mib);
  if (d.power_mw >= 0) s.set_power_mw(d.power_mw);
  s.set_pod(d.pod);
  s.set_pod_namespace(d.pod_namespace);
  return s;
}

}  // namespace arbiter::agent
