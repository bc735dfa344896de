#include "model/chat/methods.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/chat/builtins.h"
#include "model/chat/text.h"

namespace ckv::chat {
namespace {

using Kwargs = std::vector<std::pair<std::string, Value>>;

absl::Status ArgError(std::string_view method, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("TypeError: ", AV(method), "() ", AV(what)));
}

// Positional argument i, or keyword `key`, or undefined.
Value Arg(const std::vector<Value>& pos, const Kwargs& kw, size_t i,
          std::string_view key) {
  if (i < pos.size()) return pos[i];
  for (const auto& [k, v] : kw) {
    if (k == key) return v;
  }
  return Value::Undefined();
}

absl::StatusOr<std::optional<std::string>> OptionalString(
    std::string_view method, const Value& v) {
  if (v.is_undefined() || v.is_none()) return std::optional<std::string>();
  if (!v.is_string()) return ArgError(method, "argument must be str or None");
  return std::optional<std::string>(v.str());
}

absl::StatusOr<int64_t> OptionalInt(std::string_view method, const Value& v,
                                    int64_t dflt) {
  if (v.is_undefined() || v.is_none()) return dflt;
  if (v.kind() != Value::Kind::kInt && v.kind() != Value::Kind::kBool) {
    return ArgError(method, "argument must be an integer");
  }
  return v.int_value();
}

absl::StatusOr<Value> StartsOrEnds(const std::string& s, bool starts,
                                   const Value& arg) {
  const char* name = starts ? "startswith" : "endswith";
  List options;
  if (arg.is_string()) {
    options.push_back(arg);
  } else if (arg.is_tuple()) {
    options = arg.list();
  } else {
    return ArgError(name, "first arg must be str or a tuple of str");
  }
  for (const Value& o : options) {
    if (!o.is_string()) return ArgError(name, "tuple items must be str");
    const std::string& p = o.str();
    if (p.size() <= s.size() &&
        (starts ? s.compare(0, p.size(), p) == 0
                : s.compare(s.size() - p.size(), p.size(), p) == 0)) {
      return Value::Bool(true);
    }
  }
  return Value::Bool(false);
}

absl::StatusOr<Value> Replace(const std::string& s, const Value& from,
                              const Value& to, const Value& count,
                              Budget* budget) {
  if (!from.is_string() || !to.is_string()) {
    return ArgError("replace", "arguments must be str");
  }
  auto n = OptionalInt("replace", count, -1);
  if (!n.ok()) return n.status();
  // Bound the result before building it.
  int64_t hits = 0;
  if (from.str().empty()) {
    hits = CodePointCount(s) + 1;
  } else {
    for (size_t at = s.find(from.str()); at != std::string::npos;
         at = s.find(from.str(), at + from.str().size())) {
      ++hits;
    }
  }
  if (*n >= 0 && hits > *n) hits = *n;
  const int64_t size = static_cast<int64_t>(s.size()) +
                       hits * static_cast<int64_t>(to.str().size());
  if (auto st = budget->CheckStringSize(size); !st.ok()) return st;
  if (auto st = budget->Charge(size); !st.ok()) return st;
  return Value::String(PyReplace(s, from.str(), to.str(), *n));
}

absl::StatusOr<Value> Split(const std::string& s, const Value& sep_arg,
                            const Value& max_arg, Budget* budget) {
  auto sep = OptionalString("split", sep_arg);
  if (!sep.ok()) return sep.status();
  if (sep->has_value() && (*sep)->empty()) {
    return absl::InvalidArgumentError("ValueError: empty separator");
  }
  auto maxsplit = OptionalInt("split", max_arg, -1);
  if (!maxsplit.ok()) return maxsplit.status();
  if (auto st = budget->Charge(s.size()); !st.ok()) return st;
  List parts;
  for (std::string& p : PySplit(s, *sep, *maxsplit)) {
    parts.push_back(Value::String(std::move(p)));
  }
  return Value::MakeList(std::move(parts));
}

absl::StatusOr<Value> Join(const std::string& sep, const Value& items,
                           Budget* budget) {
  auto list = Iterate(items);
  if (!list.ok()) return list.status();
  int64_t size = 0;
  for (const Value& v : *list) {
    if (!v.is_string()) return ArgError("join", "sequence item must be str");
    size += v.str().size() + sep.size();
    if (auto st = budget->CheckStringSize(size); !st.ok()) return st;
  }
  if (auto st = budget->Charge(size); !st.ok()) return st;
  std::string out;
  for (size_t i = 0; i < list->size(); ++i) {
    if (i > 0) out += sep;
    out += (*list)[i].str();
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> CallStringMethod(const std::string& s,
                                       std::string_view name,
                                       const std::vector<Value>& pos,
                                       const Kwargs& kw, Budget* budget) {
  if (auto st = budget->Charge(s.size() + 1); !st.ok()) return st;
  const Value a0 = Arg(pos, kw, 0, name == "split" ? "sep" : "chars");
  if (name == "startswith" || name == "endswith") {
    return StartsOrEnds(s, name == "startswith", a0);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    auto chars = OptionalString(name, a0);
    if (!chars.ok()) return chars.status();
    const StripSide side = name == "strip"    ? StripSide::kBoth
                           : name == "lstrip" ? StripSide::kLeft
                                              : StripSide::kRight;
    return Value::String(PyStrip(s, *chars, side));
  }
  if (name == "split") return Split(s, a0, Arg(pos, kw, 1, "maxsplit"), budget);
  if (name == "replace") {
    return Replace(s, a0, Arg(pos, kw, 1, ""), Arg(pos, kw, 2, "count"),
                   budget);
  }
  if (name == "upper") return Value::String(AsciiUpper(s));
  if (name == "lower") return Value::String(AsciiLower(s));
  if (name == "title") return Value::String(PyTitle(s));
  if (name == "capitalize") return Value::String(PyCapitalize(s));
  if (name == "find" || name == "count") {
    if (!a0.is_string()) return ArgError(name, "argument must be str");
    if (name == "find") {
      const size_t at = s.find(a0.str());
      return Value::Int(
          at == std::string::npos
              ? -1
              : CodePointCount(std::string_view(s).substr(0, at)));
    }
    if (a0.str().empty()) return Value::Int(CodePointCount(s) + 1);
    int64_t n = 0;
    for (size_t at = s.find(a0.str()); at != std::string::npos;
         at = s.find(a0.str(), at + a0.str().size())) {
      ++n;
    }
    return Value::Int(n);
  }
  if (name == "join") return Join(s, a0, budget);
  return ArgError(name, "is not supported");
}

absl::StatusOr<Value> CallDictMethod(const Value& d, std::string_view name,
                                     const std::vector<Value>& pos,
                                     const Kwargs& kw, Budget* budget) {
  if (auto st = budget->Charge(d.dict().entries.size() + 1); !st.ok()) {
    return st;
  }
  if (name == "get") {
    if (pos.empty()) return ArgError("get", "expected at least 1 argument");
    const Value* v = d.dict().Find(pos[0]);
    if (v != nullptr) return *v;
    return pos.size() > 1 ? pos[1] : Value::None();
  }
  List out;
  for (const auto& [k, v] : d.dict().entries) {
    if (name == "keys") {
      out.push_back(k);
    } else if (name == "values") {
      out.push_back(v);
    } else {
      out.push_back(Value::MakeList({k, v}, /*is_tuple=*/true));
    }
  }
  (void)kw;
  return Value::MakeList(std::move(out));
}

}  // namespace

std::optional<Value> BindMethod(const Value& obj, std::string_view name,
                                Budget* budget) {
  static constexpr std::string_view kStringMethods[] = {
      "startswith", "endswith", "strip", "lstrip", "rstrip",
      "split",      "replace",  "upper", "lower",  "capitalize",
      "title",      "find",     "count", "join"};
  static constexpr std::string_view kDictMethods[] = {"items", "keys", "values",
                                                      "get"};
  const std::string method(name);
  if (obj.is_string()) {
    for (std::string_view m : kStringMethods) {
      if (m != name) continue;
      return Value::Function(
          method, [obj, method, budget](std::vector<Value> pos, Kwargs kw) {
            return CallStringMethod(obj.str(), method, pos, kw, budget);
          });
    }
  } else if (obj.is_dict()) {
    for (std::string_view m : kDictMethods) {
      if (m != name) continue;
      return Value::Function(
          method, [obj, method, budget](std::vector<Value> pos, Kwargs kw) {
            return CallDictMethod(obj, method, pos, kw, budget);
          });
    }
  }
  return std::nullopt;
}

}  // namespace ckv::chat
