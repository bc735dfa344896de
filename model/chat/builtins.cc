// Operators, access, iteration and tests (filters are in filters.cc).
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "model/chat/builtins.h"
#include "model/chat/methods.h"
#include "model/chat/text.h"

namespace ckv::chat {
namespace {

using K = Value::Kind;

absl::Status TypeError(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("TypeError: ", AV(what)));
}

absl::Status Overflow() {
  return absl::InvalidArgumentError(
      "OverflowError: integer result does not fit in 64 bits");
}

absl::Status ZeroDivision() {
  return absl::InvalidArgumentError("ZeroDivisionError: division by zero");
}

bool IsInt(const Value& v) {
  return v.kind() == K::kInt || v.kind() == K::kBool;
}

absl::StatusOr<Value> IntPow(int64_t base, int64_t exp) {
  int64_t result = 1;
  if (base == 0 || base == 1) return Value::Int(exp == 0 ? 1 : base);
  if (base == -1) return Value::Int(exp % 2 == 0 ? 1 : -1);
  for (int64_t i = 0; i < exp; ++i) {  // |base| >= 2: overflows within 63
    if (__builtin_mul_overflow(result, base, &result)) return Overflow();
  }
  return Value::Int(result);
}

absl::StatusOr<Value> Arithmetic(std::string_view op, const Value& a,
                                 const Value& b) {
  if (IsInt(a) && IsInt(b)) {
    const int64_t x = a.int_value(), y = b.int_value();
    int64_t r = 0;
    if (op == "+") {
      if (__builtin_add_overflow(x, y, &r)) return Overflow();
      return Value::Int(r);
    }
    if (op == "-") {
      if (__builtin_sub_overflow(x, y, &r)) return Overflow();
      return Value::Int(r);
    }
    if (op == "*") {
      if (__builtin_mul_overflow(x, y, &r)) return Overflow();
      return Value::Int(r);
    }
    if (op == "//" || op == "%") {
      if (y == 0) return ZeroDivision();
      if (x == std::numeric_limits<int64_t>::min() && y == -1) {
        return op == "%" ? Value::Int(0) : absl::StatusOr<Value>(Overflow());
      }
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value::Int(op == "%" ? m : q);
    }
    if (op == "**" && y >= 0) return IntPow(x, y);
  }
  const double x = a.number(), y = b.number();
  if (op == "+") return Value::Float(x + y);
  if (op == "-") return Value::Float(x - y);
  if (op == "*") return Value::Float(x * y);
  if (op == "/") {
    if (y == 0) return ZeroDivision();
    return Value::Float(x / y);
  }
  if (op == "//" || op == "%") {
    if (y == 0) return ZeroDivision();
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value::Float(op == "%" ? m : std::floor(x / y));
  }
  if (op == "**") {
    if (x == 0 && y < 0) return ZeroDivision();
    return Value::Float(std::pow(x, y));
  }
  return TypeError(absl::StrCat("unsupported operand '", AV(op), "'"));
}

absl::StatusOr<Value> Repeat(const Value& seq, int64_t n, Budget* budget) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const int64_t len = static_cast<int64_t>(seq.str().size());
    if (len > 0 && n > budget->limits().max_output_bytes / len + 1) {
      return budget->CheckStringSize(budget->limits().max_output_bytes + 1);
    }
    if (auto s = budget->CheckStringSize(len * n); !s.ok()) return s;
    if (auto s = budget->Charge(len * n); !s.ok()) return s;
    std::string out;
    out.reserve(len * n);
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value::String(std::move(out));
  }
  const int64_t w = seq.weight();
  if (n > budget->limits().max_value_weight / std::max<int64_t>(w, 1)) {
    return absl::ResourceExhaustedError("template built too large a list");
  }
  if (auto s = budget->Charge(n * static_cast<int64_t>(seq.list().size()));
      !s.ok()) {
    return s;
  }
  List out;
  for (int64_t i = 0; i < n; ++i) {
    out.insert(out.end(), seq.list().begin(), seq.list().end());
  }
  return Value::MakeList(std::move(out), seq.is_tuple());
}

int64_t Clamp(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

}  // namespace

absl::Status UndefinedError(const Value& v) {
  if (v.undefined_name().empty()) {
    return absl::InvalidArgumentError("UndefinedError: value is undefined");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("UndefinedError: '", v.undefined_name(), "' is undefined"));
}

absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a,
                               const Value& b, Budget* budget) {
  if (op == "~") {
    std::string s = a.ToString() + b.ToString();
    if (auto st = budget->CheckStringSize(s.size()); !st.ok()) return st;
    if (auto st = budget->Charge(s.size()); !st.ok()) return st;
    return Value::String(std::move(s));
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  if (op == "+" && a.is_string() && b.is_string()) {
    const int64_t n = a.str().size() + b.str().size();
    if (auto st = budget->CheckStringSize(n); !st.ok()) return st;
    if (auto st = budget->Charge(n); !st.ok()) return st;
    return Value::String(a.str() + b.str());
  }
  if (op == "+" && a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    if (auto st = budget->Charge(a.list().size() + b.list().size()); !st.ok()) {
      return st;
    }
    List items = a.list();
    items.insert(items.end(), b.list().begin(), b.list().end());
    return Value::MakeList(std::move(items), a.is_tuple());
  }
  if (op == "*" && (a.is_string() || a.is_list()) && IsInt(b)) {
    return Repeat(a, b.int_value(), budget);
  }
  if (op == "*" && (b.is_string() || b.is_list()) && IsInt(a)) {
    return Repeat(b, a.int_value(), budget);
  }
  if (a.is_number() && b.is_number()) return Arithmetic(op, a, b);
  return TypeError(absl::StrCat("unsupported operand type(s) for ", AV(op),
                                ": '", a.TypeName(), "' and '", b.TypeName(),
                                "'"));
}

absl::StatusOr<Value> UnaryOp(std::string_view op, const Value& a) {
  if (a.is_undefined()) return UndefinedError(a);
  if (!a.is_number()) {
    return TypeError(absl::StrCat("bad operand type for unary ", AV(op), ": '",
                                  a.TypeName(), "'"));
  }
  if (a.kind() == K::kFloat)
    return Value::Float(op == "-" ? -a.number() : a.number());
  if (op == "+") return Value::Int(a.int_value());
  if (a.int_value() == std::numeric_limits<int64_t>::min()) return Overflow();
  return Value::Int(-a.int_value());
}

absl::StatusOr<bool> Compare(std::string_view op, const Value& a,
                             const Value& b) {
  if (op == "==") return Equals(a, b);
  if (op == "!=") return !Equals(a, b);
  if (op == "in" || op == "not in") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string()) {
        return TypeError(
            absl::StrCat("'in <string>' requires string as left "
                         "operand, not ",
                         a.TypeName()));
      }
      found = b.str().find(a.str()) != std::string::npos;
    } else if (b.is_list()) {
      for (const Value& item : b.list()) {
        if (Equals(item, a)) {
          found = true;
          break;
        }
      }
    } else if (b.is_dict()) {
      found = b.dict().Find(a) != nullptr;
    } else if (b.kind() == K::kNamespace) {
      found = b.ns()->Find(a) != nullptr;
    } else if (!b.is_undefined()) {
      return TypeError(absl::StrCat("argument of type '", b.TypeName(),
                                    "' is not iterable"));
    }
    return op == "in" ? found : !found;
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  if (op == "<") return Less(a, b);
  if (op == ">") return Less(b, a);
  auto less = op == "<=" ? Less(b, a) : Less(a, b);  // not greater / not less
  if (!less.ok()) return less.status();
  return !*less;
}

absl::StatusOr<Value> GetAttr(const Value& obj, std::string_view name,
                              Budget* budget) {
  switch (obj.kind()) {
    case K::kUndefined:
      return UndefinedError(obj);
    case K::kString:
    case K::kList:
    case K::kDict: {
      if (auto method = BindMethod(obj, name, budget); method.has_value()) {
        return *method;
      }
      if (obj.is_dict()) {
        if (const Value* v = obj.dict().Find(name); v != nullptr) return *v;
      }
      return Value::Undefined(std::string(name));
    }
    case K::kNamespace: {
      if (const Value* v = obj.ns()->Find(name); v != nullptr) return *v;
      return Value::Undefined(std::string(name));
    }
    default:
      return Value::Undefined(std::string(name));
  }
}

absl::StatusOr<Value> GetItem(const Value& obj, const Value& key,
                              Budget* budget) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().Find(key); v != nullptr) return *v;
  } else if ((obj.is_list() || obj.is_string()) && IsInt(key)) {
    if (obj.is_list()) {
      const int64_t n = obj.list().size();
      int64_t i = key.int_value();
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.list()[i];
    } else {
      const std::vector<std::string_view> cps = SplitCodePoints(obj.str());
      const int64_t n = cps.size();
      int64_t i = key.int_value();
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value::String(std::string(cps[i]));
    }
  }
  if (key.is_string()) return GetAttr(obj, key.str(), budget);
  return Value::Undefined(key.Repr());
}

absl::StatusOr<Value> GetSlice(const Value& obj, const Value& start,
                               const Value& stop, const Value& step) {
  if (obj.is_undefined()) return UndefinedError(obj);
  for (const Value* part : {&start, &stop, &step}) {
    if (!part->is_undefined() && !part->is_none() && !IsInt(*part)) {
      return TypeError("slice indices must be integers or None");
    }
  }
  if (!obj.is_list() && !obj.is_string()) return Value::Undefined("slice");
  std::vector<std::string_view> cps;
  if (obj.is_string()) cps = SplitCodePoints(obj.str());
  const int64_t n = obj.is_list() ? obj.list().size() : cps.size();
  const auto given = [](const Value& v) { return IsInt(v); };
  const int64_t st = given(step) ? step.int_value() : 1;
  if (st == 0) {
    return absl::InvalidArgumentError("ValueError: slice step cannot be zero");
  }
  // Python's slice.indices().
  const auto bound = [&](const Value& v, int64_t dflt) {
    if (!given(v)) return dflt;
    int64_t i = v.int_value();
    if (i < 0) i = i < -n ? (st < 0 ? -1 : 0) : i + n;
    return st < 0 ? Clamp(i, -1, n - 1) : Clamp(i, 0, n);
  };
  const int64_t lo = bound(start, st < 0 ? n - 1 : 0);
  const int64_t hi = bound(stop, st < 0 ? -1 : n);
  List items;
  std::string text;
  for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) {
    if (obj.is_list()) {
      items.push_back(obj.list()[i]);
    } else {
      text += cps[i];
    }
    if ((st > 0 && i > INT64_MAX - st) || (st < 0 && i < INT64_MIN - st)) break;
  }
  if (obj.is_string()) return Value::String(std::move(text));
  return Value::MakeList(std::move(items), obj.is_tuple());
}

absl::StatusOr<List> Iterate(const Value& v) {
  switch (v.kind()) {
    case K::kUndefined:
      return List{};
    case K::kList:
      return v.list();
    case K::kDict: {
      List keys;
      for (const auto& [k, item] : v.dict().entries) keys.push_back(k);
      return keys;
    }
    case K::kString: {
      List chars;
      for (std::string_view c : SplitCodePoints(v.str())) {
        chars.push_back(Value::String(std::string(c)));
      }
      return chars;
    }
    default:
      return TypeError(
          absl::StrCat("'", v.TypeName(), "' object is not iterable"));
  }
}

bool IsKnownTest(std::string_view name) {
  static constexpr std::string_view kTests[] = {
      "boolean",     "callable", "defined",  "divisibleby", "eq",   "equalto",
      "escaped",     "even",     "false",    "float",       "ge",   "gt",
      "greaterthan", "in",       "integer",  "iterable",    "le",   "lessthan",
      "lower",       "lt",       "mapping",  "ne",          "none", "number",
      "odd",         "sameas",   "sequence", "string",      "true", "undefined",
      "upper"};
  for (std::string_view t : kTests) {
    if (t == name) return true;
  }
  return false;
}

absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& v,
                               const CallArgs& args) {
  const Value arg =
      args.positional.empty() ? Value::Undefined() : args.positional[0];
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.kind() == K::kBool;
  if (name == "true") return v.kind() == K::kBool && v.bool_value();
  if (name == "false") return v.kind() == K::kBool && !v.bool_value();
  if (name == "integer") return v.kind() == K::kInt;
  if (name == "float") return v.kind() == K::kFloat;
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "callable") return v.kind() == K::kCallable;
  if (name == "escaped") return false;
  if (name == "iterable") {
    return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  }
  if (name == "sequence") {
    return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  }
  if (name == "lower" || name == "upper") {
    const std::string s = v.ToString();
    bool cased = false;
    for (unsigned char c : s) {
      if (name == "lower" ? (c >= 'A' && c <= 'Z') : (c >= 'a' && c <= 'z')) {
        return false;
      }
      cased |= (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
    }
    return cased;
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!IsInt(v)) return TypeError("test needs an integer");
    int64_t d = 2;
    if (name == "divisibleby") {
      if (!IsInt(arg)) return TypeError("divisibleby needs an integer");
      d = arg.int_value();
      if (d == 0) return ZeroDivision();
      if (d == -1) return true;
    }
    const bool divisible = v.int_value() % d == 0;
    return name == "odd" ? !divisible : divisible;
  }
  if (name == "sameas") {
    return v.kind() == arg.kind() && Equals(v, arg);
  }
  if (name == "in") return Compare("in", v, arg);
  if (name == "eq" || name == "equalto") return Compare("==", v, arg);
  if (name == "ne") return Compare("!=", v, arg);
  if (name == "lt" || name == "lessthan") return Compare("<", v, arg);
  if (name == "le") return Compare("<=", v, arg);
  if (name == "gt" || name == "greaterthan") return Compare(">", v, arg);
  if (name == "ge") return Compare(">=", v, arg);
  return absl::InvalidArgumentError(
      absl::StrCat("no test named '", AV(name), "'"));
}

}  // namespace ckv::chat
