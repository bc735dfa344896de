#include "model/chat/value.h"
#include "model/chat/text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace ckv::chat {
namespace {

// Key identity for Dict: Python hashes 1, 1.0 and True alike.
absl::StatusOr<std::string> KeyOf(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::kString:
      return absl::StrCat("s", k.str());
    case Value::Kind::kNone:
      return std::string("n");
    case Value::Kind::kBool:
    case Value::Kind::kInt:
      return absl::StrCat("i", k.int_value());
    case Value::Kind::kFloat: {
      const double d = k.number();
      if (d == std::floor(d) && std::fabs(d) < 9.2e18) {
        return absl::StrCat("i", static_cast<int64_t>(d));
      }
      return absl::StrCat("f", FloatRepr(d));
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("TypeError: unhashable type: '", k.TypeName(), "'"));
  }
}

std::string StringRepr(const std::string& s) {
  const bool dq =
      s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == q || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += q;
  return out;
}

void AppendEscapedCodePoints(const std::string& s, size_t* i,
                             std::string* out) {
  // One non-ASCII character as \uXXXX (a surrogate pair above U+FFFF).
  const unsigned char c = s[*i];
  const size_t n = (c >> 5) == 6    ? 2
                   : (c >> 4) == 14 ? 3
                   : (c >> 3) == 30 ? 4
                                    : 1;
  uint32_t cp = n == 1 ? c : c & (0x7F >> n);
  size_t k = 1;
  for (; k < n && *i + k < s.size(); ++k) cp = (cp << 6) | (s[*i + k] & 0x3F);
  *i += k - 1;
  char buf[16];
  if (cp >= 0x10000) {
    cp -= 0x10000;
    std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (cp >> 10),
                  0xDC00 + (cp & 0x3FF));
  } else {
    std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
  }
  *out += buf;
}

void JsonString(const std::string& s, bool ensure_ascii, std::string* out) {
  *out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = s[i];
    if (ensure_ascii && c >= 0x80) {
      AppendEscapedCodePoints(s, &i, out);
      continue;
    }
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          *out += static_cast<char>(c);
        }
    }
  }
  *out += '"';
}

absl::Status JsonAppend(const Value& v, const JsonOptions& o, int level,
                        std::string* out) {
  const int indent = o.indent;
  if (level > 256) return absl::InvalidArgumentError("tojson: too deep");
  const auto newline = [&](int lvl) {
    if (indent < 0) return;
    *out += '\n';
    out->append(static_cast<size_t>(indent) * lvl, ' ');
  };
  const char* item_sep = indent < 0 ? ", " : ",";
  switch (v.kind()) {
    case Value::Kind::kNone:
      *out += "null";
      return absl::OkStatus();
    case Value::Kind::kBool:
      *out += v.bool_value() ? "true" : "false";
      return absl::OkStatus();
    case Value::Kind::kInt:
      *out += std::to_string(v.int_value());
      return absl::OkStatus();
    case Value::Kind::kFloat: {
      const double d = v.number();
      *out += std::isnan(d)   ? "NaN"
              : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                              : FloatRepr(d);
      return absl::OkStatus();
    }
    case Value::Kind::kString:
      JsonString(v.str(), o.ensure_ascii, out);
      return absl::OkStatus();
    case Value::Kind::kList: {
      if (v.list().empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      *out += '[';
      bool first = true;
      for (const Value& item : v.list()) {
        if (!first) *out += item_sep;
        first = false;
        newline(level + 1);
        if (auto s = JsonAppend(item, o, level + 1, out); !s.ok()) {
          return s;
        }
      }
      newline(level);
      *out += ']';
      return absl::OkStatus();
    }
    case Value::Kind::kDict: {
      if (v.dict().entries.empty()) {
        *out += "{}";
        return absl::OkStatus();
      }
      *out += '{';
      bool first = true;
      std::vector<const std::pair<Value, Value>*> entries;
      for (const auto& entry : v.dict().entries) entries.push_back(&entry);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* a, const auto* b) {
                           return a->first.Repr() < b->first.Repr();
                         });
      }
      for (const auto* entry : entries) {
        const Value& key = entry->first;
        const Value& item = entry->second;
        if (!first) *out += item_sep;
        first = false;
        newline(level + 1);
        // json.dumps writes non-string keys as strings: 1 -> "1",
        // True -> "true", None -> "null".
        std::string key_text;
        if (key.is_string()) {
          key_text = key.str();
        } else if (auto k =
                       JsonAppend(key, JsonOptions{}, level + 1, &key_text);
                   !k.ok()) {
          return k;
        }
        JsonString(key_text, o.ensure_ascii, out);
        *out += ": ";
        if (auto s = JsonAppend(item, o, level + 1, out); !s.ok()) {
          return s;
        }
      }
      newline(level);
      *out += '}';
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("TypeError: Object of type ", v.TypeName(),
                       " is not JSON serializable"));
  }
}

constexpr int kMaxJsonDepth = 64;

absl::StatusOr<Value> FromJson(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxJsonDepth) {
    return absl::InvalidArgumentError("messages: JSON nested too deeply");
  }
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::None();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) {
        return Value::Int(static_cast<int64_t>(u));
      }
      return Value::Float(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::String(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) {
        auto item = FromJson(e, depth + 1);
        if (!item.ok()) return item.status();
        items.push_back(*std::move(item));
      }
      return Value::MakeList(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [k, e] : j.items()) {
        auto item = FromJson(e, depth + 1);
        if (!item.ok()) return item.status();
        (void)d.Set(Value::String(k), *std::move(item));
      }
      return Value::MakeDict(std::move(d));
    }
    default:
      return Value::None();
  }
}

}  // namespace

Value Value::Undefined(std::string name) {
  Value v;
  if (!name.empty()) {
    v.obj_ = std::make_shared<const std::string>(std::move(name));
  }
  return v;
}

const std::string& Value::undefined_name() const {
  static const std::string* const kEmpty = new std::string();
  return obj_ ? Get<std::string>() : *kEmpty;
}
Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.i_ = b ? 1 : 0;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}
Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.weight_ = kItemWeight + static_cast<int64_t>(s.size());
  v.obj_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

namespace {
constexpr int64_t kWeightCap = int64_t{1} << 60;
int64_t AddWeight(int64_t a, int64_t b) {
  return a > kWeightCap - b ? kWeightCap : a + b;
}
}  // namespace

Value Value::MakeList(List items, bool is_tuple) {
  Value v;
  v.kind_ = Kind::kList;
  v.tuple_ = is_tuple;
  for (const Value& item : items) {
    v.depth_ = std::max(v.depth_, item.depth_ + 1);
    v.weight_ = AddWeight(v.weight_, item.weight_);
  }
  if (items.empty()) v.depth_ = 1;
  v.obj_ = std::make_shared<const List>(std::move(items));
  return v;
}
Value Value::MakeDict(Dict d) {
  Value v;
  v.kind_ = Kind::kDict;
  v.depth_ = 1;
  for (const auto& [key, item] : d.entries) {
    v.depth_ = std::max(v.depth_, item.depth_ + 1);
    v.weight_ = AddWeight(v.weight_, AddWeight(key.weight_, item.weight_));
  }
  v.obj_ = std::make_shared<const Dict>(std::move(d));
  return v;
}
Value Value::Namespace(Dict* ns) {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.ns_ = ns;
  return v;
}
Value Value::Function(
    std::string name,
    std::function<absl::StatusOr<Value>(
        std::vector<Value>, std::vector<std::pair<std::string, Value>>)>
        fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.obj_ = std::make_shared<const Callable>(
      Callable{std::move(name), std::move(fn)});
  return v;
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0;
    case Kind::kString:
      return !str().empty();
    case Kind::kList:
      return !list().empty();
    case Kind::kDict:
      return !dict().entries.empty();
    default:
      return true;
  }
}

std::string Value::ToString() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return str();
    default:
      return Repr();
  }
}

std::string Value::Repr() const { return ReprNested(false); }

std::string Value::ReprNested(bool nested) const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return i_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(i_);
    case Kind::kFloat:
      return FloatRepr(f_);
    case Kind::kString:
      return StringRepr(str());
    case Kind::kList: {
      std::string out = tuple_ ? "(" : "[";
      for (size_t i = 0; i < list().size(); ++i) {
        if (i > 0) out += ", ";
        out += (list())[i].ReprNested(true);
      }
      if (tuple_ && list().size() == 1) out += ",";
      out += tuple_ ? ")" : "]";
      return out;
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      if (kind_ == Kind::kNamespace && nested) return "<Namespace>";
      const Dict& d = kind_ == Kind::kDict ? dict() : *ns_;
      std::string out = kind_ == Kind::kDict ? "{" : "<Namespace {";
      bool first = true;
      for (const auto& [k, v] : d.entries) {
        if (!first) out += ", ";
        first = false;
        out += k.ReprNested(true) + ": " + v.ReprNested(true);
      }
      out += kind_ == Kind::kDict ? "}" : "}>";
      return out;
    }
    case Kind::kCallable:
      return "<function " + callable().name + ">";
  }
  return "";
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return tuple_ ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "object";
}

namespace {

// Python's key equality for hashable scalars (1 == 1.0 == True).
bool SameKey(const Value& a, const Value& b) {
  if (a.is_string() || b.is_string()) {
    return a.is_string() && b.is_string() && a.str() == b.str();
  }
  return Equals(a, b);
}

}  // namespace

absl::Status Dict::Set(const Value& key, Value value) {
  auto k = KeyOf(key);
  if (!k.ok()) return k.status();
  if (entries.size() < kIndexFrom) {
    for (auto& [existing, v] : entries) {
      if (SameKey(existing, key)) {
        v = std::move(value);
        return absl::OkStatus();
      }
    }
    entries.emplace_back(key, std::move(value));
    if (entries.size() == kIndexFrom) {
      for (size_t i = 0; i < entries.size(); ++i) {
        index.emplace(*KeyOf(entries[i].first), i);
      }
    }
    return absl::OkStatus();
  }
  auto [it, inserted] = index.try_emplace(*k, entries.size());
  if (inserted) {
    entries.emplace_back(key, std::move(value));
  } else {
    entries[it->second].second = std::move(value);
  }
  return absl::OkStatus();
}

const Value* Dict::Find(const Value& key) const {
  if (entries.size() < kIndexFrom) {
    for (const auto& [existing, v] : entries) {
      if (SameKey(existing, key)) return &v;
    }
    return nullptr;
  }
  auto k = KeyOf(key);
  if (!k.ok()) return nullptr;
  auto it = index.find(*k);
  return it == index.end() ? nullptr : &entries[it->second].second;
}

const Value* Dict::Find(std::string_view key) const {
  if (entries.size() < kIndexFrom) {
    for (const auto& [existing, v] : entries) {
      if (existing.is_string() && existing.str() == key) return &v;
    }
    return nullptr;
  }
  auto it = index.find(absl::StrCat("s", AV(key)));
  return it == index.end() ? nullptr : &entries[it->second].second;
}

bool Equals(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind() == K::kFloat || b.kind() == K::kFloat) {
      return a.number() == b.number();
    }
    return a.int_value() == b.int_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.str() == b.str();
    case K::kList: {
      if (a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!Equals(a.list()[i], b.list()[i])) return false;
      }
      return true;
    }
    case K::kDict: {
      if (a.dict().entries.size() != b.dict().entries.size()) return false;
      for (const auto& [k, v] : a.dict().entries) {
        const Value* other = b.dict().Find(k);
        if (other == nullptr || !Equals(v, *other)) return false;
      }
      return true;
    }
    case K::kNamespace:
      return a.ns() == b.ns();
    case K::kCallable:
      return &a.callable() == &b.callable();
    default:
      return false;
  }
}

absl::StatusOr<bool> Less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat) {
      return a.number() < b.number();
    }
    return a.int_value() < b.int_value();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const List& x = a.list();
    const List& y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equals(x[i], y[i])) continue;
      return Less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("TypeError: '<' not supported between instances of '",
                   a.TypeName(), "' and '", b.TypeName(), "'"));
}

absl::StatusOr<std::string> ToJson(const Value& v, const JsonOptions& options) {
  std::string out;
  if (auto s = JsonAppend(v, options, 0, &out); !s.ok()) return s;
  return out;
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest %.*e form that reads back as d.
  char buf[64];
  for (int prec = 0; prec < 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*e", prec, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  // buf = [-]D[.DDD]e[+-]XX: split into digits and exponent.
  std::string s(buf);
  const size_t e = s.find('e');
  const int exp = std::atoi(s.c_str() + e + 1);
  std::string mant = s.substr(0, e);
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = neg ? "-" : "";
  if (exp >= 16 || exp < -4) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1, std::string::npos);
    }
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+',
                  exp < 0 ? -exp : exp);
    return out + eb;
  }
  if (exp < 0) {
    return out + "0." + std::string(-exp - 1, '0') + digits;
  }
  if (static_cast<int>(digits.size()) <= exp + 1) {
    return out + digits + std::string(exp + 1 - digits.size(), '0') + ".0";
  }
  return out + digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
}

absl::StatusOr<Value> ValueFromJson(std::string_view json_text) {
  auto j = nlohmann::ordered_json::parse(json_text, nullptr,
                                         /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError("messages: not valid JSON");
  }
  return FromJson(j, 0);
}

}  // namespace ckv::chat
