// The wire form of a parsed reading: one arbiter.v1.DeviceSample, with the
// metrics the source did not report left unset.
//
// Thread-safe (pure function).
#pragma once

#include "arbiter/v1/telemetry.pb.h"
#include "clients/agent/dcgm_text.h"

namespace arbiter::agent {

v1::DeviceSample ToSample(const DeviceReading& reading, const google::protobuf::Timestamp& at);

}  // namespace arbiter::agent
