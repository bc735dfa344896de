#include "server/constraint_convert.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "model/grammar/token_index.h"

namespace ckv::server {
namespace {

using grammar::ConstraintSpec;

absl::Status Invalid(const std::string& what) {
  return absl::InvalidArgumentError(what);
}

template <typename json>
absl::StatusOr<std::optional<ConstraintSpec>> FromResponseFormat(
    const json& rf) {
  if (!rf.is_object()) return Invalid("response_format must be an object");
  if (!rf.contains("type") || !rf["type"].is_string()) {
    return Invalid(
        "response_format.type is required: text, json_object or "
        "json_schema");
  }
  const std::string type = rf["type"].template get<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    return ConstraintSpec{ConstraintSpec::kJsonObject, ""};
  }
  if (type != "json_schema") {
    return Invalid(absl::StrCat("response_format.type '", type,
                                "' is unknown; accepted values: text, "
                                "json_object, json_schema"));
  }
  if (!rf.contains("json_schema") || !rf["json_schema"].is_object()) {
    return Invalid(
        "response_format.json_schema is required and must be an "
        "object");
  }
  const json& js = rf["json_schema"];
  if (!js.contains("name") || !js["name"].is_string() ||
      js["name"].template get<std::string>().empty()) {
    return Invalid("response_format.json_schema.name is required");
  }
  if (js.contains("strict") && !js["strict"].is_boolean()) {
    return Invalid("response_format.json_schema.strict must be a boolean");
  }
  if (!js.contains("schema")) {
    return Invalid("response_format.json_schema.schema is required");
  }
  const json& schema = js["schema"];
  if (schema.is_string()) {
    return ConstraintSpec{ConstraintSpec::kJsonSchema,
                          schema.template get<std::string>()};
  }
  if (!schema.is_object() && !schema.is_boolean()) {
    return Invalid("response_format.json_schema.schema must be an object");
  }
  return ConstraintSpec{ConstraintSpec::kJsonSchema, schema.dump()};
}

template <typename json>
absl::StatusOr<std::optional<ConstraintSpec>> FromBody(const json& body) {
  std::optional<ConstraintSpec> spec;
  if (body.contains("response_format") && !body["response_format"].is_null()) {
    auto rf = FromResponseFormat(body["response_format"]);
    if (!rf.ok()) return rf.status();
    spec = *rf;
  }
  if (body.contains("grammar") && !body["grammar"].is_null()) {
    if (!body["grammar"].is_string()) {
      return Invalid("grammar must be a string (GBNF)");
    }
    if (spec.has_value()) {
      return Invalid(
          "grammar and response_format cannot both constrain "
          "the output");
    }
    spec = ConstraintSpec{ConstraintSpec::kGbnf,
                          body["grammar"].template get<std::string>()};
  }
  return spec;
}

}  // namespace

absl::StatusOr<std::optional<ConstraintSpec>> ConstraintFromOpenAi(
    const nlohmann::json& body) {
  return FromBody(body);
}

absl::StatusOr<std::optional<ConstraintSpec>> ConstraintFromOpenAi(
    const nlohmann::ordered_json& body) {
  return FromBody(body);
}

absl::Status ApplyConstraint(const ConstraintSpec& spec,
                             const Tokenizer& tokenizer, SamplingParams* s) {
  auto c =
      grammar::CompileConstraint(spec, grammar::TokenIndex::For(tokenizer));
  if (!c.ok()) return c.status();
  s->constraint = *std::move(c);
  return ValidateSamplingParams(*s, tokenizer.vocab_size());
}

}  // namespace ckv::server
