// Jinja2 semantics of the chat-template interpreter that do not depend on
// scopes: operators, attribute/item access and slicing (as Jinja's sandboxed
// getattr/getitem: a missing key or index is undefined, a method of str or
// dict is a bound function), iteration, and the built-in filters and tests.
// Errors are INVALID_ARGUMENT with Python's "ExceptionClass: message" text;
// size limits are RESOURCE_EXHAUSTED.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "model/chat/limits.h"
#include "model/chat/value.h"

namespace ckv::chat {

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);

// Applies filter `name` (IsKnownFilter) to `operand`.
absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& operand,
                                  const CallArgs& args, Budget* budget);
// Evaluates test `name` (IsKnownTest) on `operand`.
absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& operand,
                               const CallArgs& args);

// `a op b` for + - * / // % ** ~.
absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a,
                               const Value& b, Budget* budget);
// `op a` for - and +.
absl::StatusOr<Value> UnaryOp(std::string_view op, const Value& a);
// `a op b` for == != < <= > >= in, "not in".
absl::StatusOr<bool> Compare(std::string_view op, const Value& a,
                             const Value& b);

// obj.name and obj[key].
absl::StatusOr<Value> GetAttr(const Value& obj, std::string_view name,
                              Budget* budget);
absl::StatusOr<Value> GetItem(const Value& obj, const Value& key,
                              Budget* budget);
// obj[start:stop:step]; undefined parts are omitted.
absl::StatusOr<Value> GetSlice(const Value& obj, const Value& start,
                               const Value& stop, const Value& step);

// The items a for loop visits: list items, dict keys, string code points;
// nothing for undefined. TypeError for other kinds.
absl::StatusOr<List> Iterate(const Value& v);

// UndefinedError for using an undefined value where a value is needed.
absl::Status UndefinedError(const Value& v);

}  // namespace ckv::chat
