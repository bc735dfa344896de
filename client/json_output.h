// JSON renderings of protobuf messages and statuses for --json output.
#ifndef CLUSTERKV_CLIENT_JSON_OUTPUT_H_
#define CLUSTERKV_CLIENT_JSON_OUTPUT_H_

#include "absl/status/status.h"
#include "google/protobuf/message.h"
#include "nlohmann/json.hpp"

namespace ckv::client {

// Field names as in the .proto; every field is present (proto3 defaults
// included) except unset `optional` fields and oneof members; 64-bit
// integers are JSON numbers; enums are their value names.
nlohmann::json ProtoToJson(const google::protobuf::Message& message);

// {"code": "NOT_FOUND", "message": "..."}
nlohmann::json StatusToJson(const absl::Status& status);

}  // namespace ckv::client

#endif  // CLUSTERKV_CLIENT_JSON_OUTPUT_H_
