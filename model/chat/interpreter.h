// Evaluator of the chat-template interpreter: runs a parsed template
// (parser.h) against a context of variables, with Jinja2's scoping (a for
// loop body and a macro body are scopes of their own; if and set are not)
// and the globals transformers provides (raise_exception, strftime_now)
// besides Jinja's (namespace, range, dict).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "model/chat/ast.h"
#include "model/chat/limits.h"
#include "model/chat/value.h"

namespace ckv::chat {

// The date strftime_now() formats (00:00:00 that day); nothing reads a
// clock.
struct TemplateDate {
  int year = 2026;
  int month = 1;
  int day = 15;
};

// Renders `body` with the variables of `context` (a dict; names that are not
// there are undefined). Errors: raise_exception(msg) -> INVALID_ARGUMENT
// with message msg exactly; a failing operation -> INVALID_ARGUMENT
// "ExceptionClass: message"; an exceeded limit -> RESOURCE_EXHAUSTED.
absl::StatusOr<std::string> RenderBody(const Body& body, const Value& context,
                                       const TemplateLimits& limits,
                                       const TemplateDate& date);

}  // namespace ckv::chat
