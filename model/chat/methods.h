// Python methods of str and dict that chat templates call
// (message.content.startswith(...), tool.items(), ...).
#pragma once

#include <optional>
#include <string_view>

#include "model/chat/limits.h"
#include "model/chat/value.h"

namespace ckv::chat {

// The method `name` of `obj` bound to it, or nullopt when obj has no such
// method. `budget` must outlive the returned function.
std::optional<Value> BindMethod(const Value& obj, std::string_view name,
                                Budget* budget);

}  // namespace ckv::chat
