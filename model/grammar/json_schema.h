// JSON Schema -> GBNF, for the subset OpenAI's strict mode accepts:
//   type (string, number, integer, boolean, null, object, array, or a list
//   of them); objects with properties in schema order, `required` ones
//   always and the others optionally (additional properties are never
//   generated); arrays with items, minItems, maxItems; enum, const; strings
//   with minLength/maxLength, pattern (regex.h) and format (date, time,
//   date-time, uuid, email, ipv4, hostname, duration); integers with
//   minimum/maximum/exclusiveMinimum/exclusiveMaximum; numbers with
//   integer-valued minimum/maximum; anyOf (and oneOf, generated as anyOf),
//   allOf of one schema; $ref to "#", "#/$defs/..." and
//   "#/definitions/..." (recursion allowed); nesting. Keywords that only
//   annotate (title, description, default, examples, $schema, $id,
//   $comment, strict, name) are ignored.
// Anything else that would constrain the value (multipleOf, non-integer or
// exclusive number bounds, patternProperties, if/then/else, not, ...) is
// INVALID_ARGUMENT naming the keyword and its path, never ignored.
//
// The generated JSON is compact but for optional whitespace (at most 4 of
// space, tab, newline) around structural characters; unbounded integers
// have at most 16 digits, fractions at most 16.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/grammar/grammar.h"

namespace ckv::grammar {

absl::StatusOr<std::string> JsonSchemaToGbnf(absl::string_view schema_json,
                                             const GrammarLimits& limits);

// Any JSON object (OpenAI's response_format json_object).
const std::string& JsonObjectGbnf();

// A GBNF string literal matching exactly `bytes`.
std::string GbnfLiteral(absl::string_view bytes);

}  // namespace ckv::grammar
