// Structured-output fields of OpenAI and llama.cpp request bodies as a
// grammar constraint (docs/structured-outputs.md), for the HTTP layer:
//   response_format: {"type": "text"}                      -> none
//   response_format: {"type": "json_object"}               -> any object
//   response_format: {"type": "json_schema", "json_schema":
//       {"name": "...", "schema": {...}, "strict": true}}  -> the schema
//   grammar: "root ::= ..."                                -> GBNF
// (json_schema's `schema` may also be given as a JSON string.)
#pragma once

#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/grammar/matcher.h"
#include "model/sampler.h"
#include "model/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace ckv::server {

// The request's constraint, or nullopt when it asks for none.
// INVALID_ARGUMENT naming the field ("response_format.json_schema.schema
// is required") when malformed, or when both response_format (other than
// text) and grammar are set.
absl::StatusOr<std::optional<grammar::ConstraintSpec>> ConstraintFromOpenAi(
    const nlohmann::json& body);
// The same keeping the body's key order (a schema's properties are
// generated in the order sent, as OpenAI does).
absl::StatusOr<std::optional<grammar::ConstraintSpec>> ConstraintFromOpenAi(
    const nlohmann::ordered_json& body);

// Compiles `spec` for `tokenizer`'s vocabulary into s->constraint.
// INVALID_ARGUMENT with the reason when it does not compile ("json_schema
// at #/properties/x: keyword 'not' is not supported"), when s->ignore_eos
// is set, or when it exceeds grammar::GrammarLimits.
absl::Status ApplyConstraint(const grammar::ConstraintSpec& spec,
                             const Tokenizer& tokenizer, SamplingParams* s);

}  // namespace ckv::server
