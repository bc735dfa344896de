#include "client/json_output.h"

#include <string>

#include "google/protobuf/descriptor.h"

namespace ckv::client {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

nlohmann::json ScalarToJson(const Message& m, const FieldDescriptor* f) {
  const Reflection* r = m.GetReflection();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return r->GetInt32(m, f);
    case FieldDescriptor::CPPTYPE_INT64:
      return r->GetInt64(m, f);
    case FieldDescriptor::CPPTYPE_UINT32:
      return r->GetUInt32(m, f);
    case FieldDescriptor::CPPTYPE_UINT64:
      return r->GetUInt64(m, f);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return r->GetDouble(m, f);
    case FieldDescriptor::CPPTYPE_FLOAT:
      return r->GetFloat(m, f);
    case FieldDescriptor::CPPTYPE_BOOL:
      return r->GetBool(m, f);
    case FieldDescriptor::CPPTYPE_ENUM:
      return r->GetEnum(m, f)->name();
    case FieldDescriptor::CPPTYPE_STRING:
      return r->GetString(m, f);
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return ProtoToJson(r->GetMessage(m, f));
  }
  return nullptr;
}

nlohmann::json RepeatedToJson(const Message& m, const FieldDescriptor* f) {
  const Reflection* r = m.GetReflection();
  nlohmann::json out = nlohmann::json::array();
  const int n = r->FieldSize(m, f);
  for (int i = 0; i < n; ++i) {
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        out.push_back(r->GetRepeatedInt32(m, f, i));
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        out.push_back(r->GetRepeatedInt64(m, f, i));
        break;
      case FieldDescriptor::CPPTYPE_UINT32:
        out.push_back(r->GetRepeatedUInt32(m, f, i));
        break;
      case FieldDescriptor::CPPTYPE_UINT64:
        out.push_back(r->GetRepeatedUInt64(m, f, i));
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        out.push_back(r->GetRepeatedDouble(m, f, i));
        break;
      case FieldDescriptor::CPPTYPE_FLOAT:
        out.push_back(r->GetRepeatedFloat(m, f, i));
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        out.push_back(r->GetRepeatedBool(m, f, i));
        break;
      case FieldDescriptor::CPPTYPE_ENUM:
        out.push_back(r->GetRepeatedEnum(m, f, i)->name());
        break;
      case FieldDescriptor::CPPTYPE_STRING:
        out.push_back(r->GetRepeatedString(m, f, i));
        break;
      case FieldDescriptor::CPPTYPE_MESSAGE:
        out.push_back(ProtoToJson(r->GetRepeatedMessage(m, f, i)));
        break;
    }
  }
  return out;
}

}  // namespace

nlohmann::json ProtoToJson(const Message& message) {
  nlohmann::json out = nlohmann::json::object();
  const auto* d = message.GetDescriptor();
  const Reflection* r = message.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->is_repeated()) {
      out[f->name()] = RepeatedToJson(message, f);
      continue;
    }
    // Unset optional scalars and unset oneof members are left out; unset
    // plain message fields print as their defaults.
    const bool always = f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE &&
                        f->containing_oneof() == nullptr;
    if (!always && f->has_presence() && !r->HasField(message, f)) continue;
    out[f->name()] = ScalarToJson(message, f);
  }
  return out;
}

nlohmann::json StatusToJson(const absl::Status& status) {
  return {{"code", absl::StatusCodeToString(status.code())},
          {"message", std::string(status.message())}};
}

}  // namespace ckv::client
