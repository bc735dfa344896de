// Built-in Jinja2 filters, with transformers' tojson.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "model/chat/builtins.h"
#include "model/chat/methods.h"
#include "model/chat/text.h"

namespace ckv::chat {
namespace {

using K = Value::Kind;

absl::Status FilterError(std::string_view filter, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("TypeError: filter '", AV(filter), "': ", AV(what)));
}

// Positional argument i (after the operand) or keyword `key`; undefined when
// absent.
Value Arg(const CallArgs& a, size_t i, std::string_view key) {
  if (i < a.positional.size()) return a.positional[i];
  for (const auto& [k, v] : a.keyword) {
    if (k == key) return v;
  }
  return Value::Undefined();
}

// Jinja's attribute getter: "a.b.0" looks up each dotted part as an item.
absl::StatusOr<Value> GetPath(const Value& item, const Value& path,
                              Budget* budget) {
  if (!path.is_string()) return GetItem(item, path, budget);
  Value v = item;
  size_t start = 0;
  const std::string& p = path.str();
  while (true) {
    const size_t dot = p.find('.', start);
    const std::string part = p.substr(start, dot - start);
    int64_t index = 0;
    auto next = absl::SimpleAtoi(part, &index)
                    ? GetItem(v, Value::Int(index), budget)
                    : GetItem(v, Value::String(part), budget);
    if (!next.ok()) return next.status();
    v = *std::move(next);
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

absl::StatusOr<Value> Length(const Value& v) {
  switch (v.kind()) {
    case K::kUndefined:
      return Value::Int(0);
    case K::kString:
      return Value::Int(CodePointCount(v.str()));
    case K::kList:
      return Value::Int(v.list().size());
    case K::kDict:
      return Value::Int(v.dict().entries.size());
    default:
      return FilterError(
          "length",
          absl::StrCat("object of type '", v.TypeName(), "' has no len()"));
  }
}

// transformers' tojson(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False); separators are not supported.
absl::StatusOr<Value> ToJsonFilter(const Value& v, const CallArgs& a,
                                   Budget* budget) {
  const Value indent = Arg(a, 1, "indent");
  JsonOptions options;
  if (indent.kind() == K::kInt) {
    options.indent =
        static_cast<int>(std::clamp<int64_t>(indent.int_value(), 0, 64));
  } else if (!indent.is_undefined() && !indent.is_none()) {
    return FilterError("tojson", "indent must be an integer");
  }
  options.ensure_ascii = Arg(a, 0, "ensure_ascii").Truthy();
  options.sort_keys = Arg(a, 3, "sort_keys").Truthy();
  if (!Arg(a, 2, "separators").is_undefined() &&
      !Arg(a, 2, "separators").is_none()) {
    return FilterError("tojson", "separators are not supported");
  }
  const int64_t expand = options.indent > 0 ? 8 : 1;
  if (auto st = budget->Charge(v.weight() * expand); !st.ok()) return st;
  auto json = ToJson(v, options);
  if (!json.ok()) return json.status();
  if (auto st = budget->CheckStringSize(json->size()); !st.ok()) return st;
  return Value::String(*std::move(json));
}

// select / reject / selectattr / rejectattr.
absl::StatusOr<Value> Select(std::string_view name, const Value& v,
                             const CallArgs& a, Budget* budget) {
  const bool by_attr = name == "selectattr" || name == "rejectattr";
  const bool keep = name == "select" || name == "selectattr";
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  const size_t first = by_attr ? 1 : 0;
  const Value test = Arg(a, first, "");
  if (!test.is_undefined() && (!test.is_string() || !IsKnownTest(test.str()))) {
    return FilterError(name, "unknown test");
  }
  CallArgs test_args;
  for (size_t i = first + 1; i < a.positional.size(); ++i) {
    test_args.positional.push_back(a.positional[i]);
  }
  List out;
  for (const Value& item : *items) {
    if (auto st = budget->Charge(1); !st.ok()) return st;
    Value subject = item;
    if (by_attr) {
      auto got = GetPath(item, Arg(a, 0, "attribute"), budget);
      if (!got.ok()) return got.status();
      subject = *std::move(got);
    }
    bool pass = subject.Truthy();
    if (!test.is_undefined()) {
      auto r = ApplyTest(test.str(), subject, test_args);
      if (!r.ok()) return r.status();
      pass = *r;
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::MakeList(std::move(out));
}

absl::StatusOr<Value> Map(const Value& v, const CallArgs& a, Budget* budget) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  const Value attribute = Arg(a, 99, "attribute");
  List out;
  for (const Value& item : *items) {
    if (auto st = budget->Charge(1); !st.ok()) return st;
    if (!attribute.is_undefined()) {
      auto got = GetPath(item, attribute, budget);
      if (!got.ok()) return got.status();
      const Value dflt = Arg(a, 99, "default");
      out.push_back(got->is_undefined() && !dflt.is_undefined() ? dflt : *got);
      continue;
    }
    const Value filter = Arg(a, 0, "");
    if (!filter.is_string() || !IsKnownFilter(filter.str()) ||
        filter.str() == "map") {
      return FilterError("map", "needs a filter name or attribute=");
    }
    CallArgs rest;
    for (size_t i = 1; i < a.positional.size(); ++i) {
      rest.positional.push_back(a.positional[i]);
    }
    auto r = ApplyFilter(filter.str(), item, rest, budget);
    if (!r.ok()) return r.status();
    out.push_back(*std::move(r));
  }
  return Value::MakeList(std::move(out));
}

absl::StatusOr<Value> Join(const Value& v, const CallArgs& a, Budget* budget) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  const std::string sep = Arg(a, 0, "d").ToString();
  const Value attribute = Arg(a, 1, "attribute");
  std::string out;
  for (size_t i = 0; i < items->size(); ++i) {
    Value item = (*items)[i];
    if (!attribute.is_undefined()) {
      auto got = GetPath(item, attribute, budget);
      if (!got.ok()) return got.status();
      item = *std::move(got);
    }
    if (i > 0) out += sep;
    out += item.ToString();
    if (auto st = budget->CheckStringSize(out.size()); !st.ok()) return st;
  }
  if (auto st = budget->Charge(out.size()); !st.ok()) return st;
  return Value::String(std::move(out));
}

// Sort key of an item: the attribute, lowercased when case-insensitive.
absl::StatusOr<Value> SortKey(const Value& item, const Value& attribute,
                              bool case_sensitive, Budget* budget) {
  Value k = item;
  if (!attribute.is_undefined() && !attribute.is_none()) {
    auto got = GetPath(item, attribute, budget);
    if (!got.ok()) return got.status();
    k = *std::move(got);
  }
  if (!case_sensitive && k.is_string())
    return Value::String(AsciiLower(k.str()));
  return k;
}

absl::StatusOr<Value> Sort(const Value& v, const CallArgs& a, Budget* budget,
                           bool unique) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  const bool reverse = !unique && Arg(a, 0, "reverse").Truthy();
  const bool case_sensitive = Arg(a, unique ? 0 : 1, "case_sensitive").Truthy();
  const Value attribute = Arg(a, unique ? 1 : 2, "attribute");
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : *items) {
    auto k = SortKey(item, attribute, case_sensitive, budget);
    if (!k.ok()) return k.status();
    keyed.emplace_back(*std::move(k), item);
  }
  if (auto st = budget->Charge(keyed.size() * 20); !st.ok()) return st;
  List out;
  if (unique) {
    std::vector<Value> seen;
    for (const auto& entry : keyed) {
      const Value& k = entry.first;
      if (std::none_of(seen.begin(), seen.end(),
                       [&](const Value& s) { return Equals(s, k); })) {
        if (auto st = budget->Charge(seen.size()); !st.ok()) return st;
        seen.push_back(k);
        out.push_back(entry.second);
      }
    }
    return Value::MakeList(std::move(out));
  }
  absl::Status error;
  std::stable_sort(
      keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
        auto less = reverse ? Less(y.first, x.first) : Less(x.first, y.first);
        if (!less.ok()) {
          error = less.status();
          return false;
        }
        return *less;
      });
  if (!error.ok()) return error;
  for (auto& [k, item] : keyed) out.push_back(item);
  return Value::MakeList(std::move(out));
}

absl::StatusOr<Value> Items(const Value& v) {
  if (v.is_undefined()) return Value::MakeList({});
  if (!v.is_dict()) {
    return FilterError("items", "can only get item pairs from a mapping");
  }
  List out;
  for (const auto& [k, item] : v.dict().entries) {
    out.push_back(Value::MakeList({k, item}, /*is_tuple=*/true));
  }
  return Value::MakeList(std::move(out));
}

absl::StatusOr<Value> FirstOrLast(const Value& v, bool last) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  if (items->empty()) return Value::Undefined("first");
  return last ? items->back() : items->front();
}

Value ToInt(const Value& v, const Value& dflt) {
  const Value fallback = dflt.is_undefined() ? Value::Int(0) : dflt;
  if (v.kind() == K::kInt || v.kind() == K::kBool)
    return Value::Int(v.int_value());
  if (v.kind() == K::kFloat) {
    const double d = v.number();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return fallback;
    return Value::Int(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    int64_t i = 0;
    const std::string s(absl::StripAsciiWhitespace(v.str()));
    if (absl::SimpleAtoi(s, &i)) return Value::Int(i);
    double d = 0;
    if (absl::SimpleAtod(s, &d) && std::isfinite(d) && std::fabs(d) < 9.2e18) {
      return Value::Int(static_cast<int64_t>(d));
    }
  }
  return fallback;
}

Value ToFloat(const Value& v, const Value& dflt) {
  const Value fallback = dflt.is_undefined() ? Value::Float(0) : dflt;
  if (v.is_number()) return Value::Float(v.number());
  double d = 0;
  if (v.is_string() &&
      absl::SimpleAtod(absl::StripAsciiWhitespace(v.str()), &d)) {
    return Value::Float(d);
  }
  return fallback;
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

absl::StatusOr<Value> Reverse(const Value& v) {
  if (v.is_string()) {
    std::vector<std::string_view> cps = SplitCodePoints(v.str());
    std::string out;
    for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
    return Value::String(std::move(out));
  }
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  std::reverse(items->begin(), items->end());
  return Value::MakeList(*std::move(items));
}

absl::StatusOr<Value> MinMaxSum(std::string_view name, const Value& v,
                                const CallArgs& a, Budget* budget) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  const Value attribute = Arg(a, name == "sum" ? 0 : 1, "attribute");
  Value acc = name == "sum"
                  ? (Arg(a, 1, "start").is_undefined() ? Value::Int(0)
                                                       : Arg(a, 1, "start"))
                  : Value::Undefined("min/max of empty sequence");
  for (const Value& item : *items) {
    auto k = SortKey(item, attribute, true, budget);
    if (!k.ok()) return k.status();
    if (name == "sum") {
      auto r = BinaryOp("+", acc, *k, budget);
      if (!r.ok()) return r.status();
      acc = *std::move(r);
      continue;
    }
    if (acc.is_undefined()) {
      acc = *k;
      continue;
    }
    auto less = name == "min" ? Less(*k, acc) : Less(acc, *k);
    if (!less.ok()) return less.status();
    if (*less) acc = *k;
  }
  return acc;
}

constexpr std::string_view kFilters[] = {
    "abs",      "attr",  "capitalize", "count",  "d",          "default",
    "dictsort", "e",     "escape",     "first",  "float",      "int",
    "items",    "join",  "last",       "length", "list",       "lower",
    "map",      "max",   "min",        "reject", "rejectattr", "replace",
    "reverse",  "round", "safe",       "select", "selectattr", "sort",
    "string",   "sum",   "title",      "tojson", "trim",       "unique",
    "upper"};

}  // namespace

bool IsKnownFilter(std::string_view name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) !=
         std::end(kFilters);
}

absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& v,
                                  const CallArgs& a, Budget* budget) {
  if (auto st = budget->Charge(1); !st.ok()) return st;
  if (name == "length" || name == "count") return Length(v);
  if (name == "tojson") return ToJsonFilter(v, a, budget);
  if (name == "items") return Items(v);
  if (name == "select" || name == "reject" || name == "selectattr" ||
      name == "rejectattr") {
    return Select(name, v, a, budget);
  }
  if (name == "map") return Map(v, a, budget);
  if (name == "join") return Join(v, a, budget);
  if (name == "list") {
    auto items = Iterate(v);
    if (!items.ok()) return items.status();
    return Value::MakeList(*std::move(items));
  }
  if (name == "first" || name == "last") return FirstOrLast(v, name == "last");
  if (name == "sort") return Sort(v, a, budget, /*unique=*/false);
  if (name == "unique") return Sort(v, a, budget, /*unique=*/true);
  if (name == "dictsort") {
    auto items = Items(v);
    if (!items.ok()) return items.status();
    CallArgs sort_args;
    sort_args.keyword = {
        {"reverse", Arg(a, 2, "reverse")},
        {"case_sensitive", Arg(a, 0, "case_sensitive")},
        {"attribute", Value::String(Arg(a, 1, "by").is_string() &&
                                            Arg(a, 1, "by").str() == "value"
                                        ? "1"
                                        : "0")}};
    return Sort(*items, sort_args, budget, /*unique=*/false);
  }
  if (name == "reverse") return Reverse(v);
  if (name == "min" || name == "max" || name == "sum") {
    return MinMaxSum(name, v, a, budget);
  }
  if (name == "default" || name == "d") {
    const bool boolean = Arg(a, 1, "boolean").Truthy();
    const bool use_default = v.is_undefined() || (boolean && !v.Truthy());
    if (!use_default) return v;
    const Value d = Arg(a, 0, "default_value");
    return d.is_undefined() ? Value::String("") : d;
  }
  if (name == "attr") {
    const Value n = Arg(a, 0, "name");
    if (!n.is_string()) return FilterError("attr", "name must be a string");
    return GetAttr(v, n.str(), budget);
  }
  if (name == "int") return ToInt(v, Arg(a, 0, "default"));
  if (name == "float") return ToFloat(v, Arg(a, 0, "default"));
  if (name == "abs") {
    if (v.kind() == K::kFloat) return Value::Float(std::fabs(v.number()));
    return UnaryOp(v.is_number() && v.int_value() < 0 ? "-" : "+", v);
  }
  if (name == "round") {
    if (!v.is_number()) return FilterError("round", "needs a number");
    const Value p = Arg(a, 0, "precision");
    const double scale = std::pow(
        10.0,
        p.kind() == K::kInt ? std::clamp<int64_t>(p.int_value(), -20, 20) : 0);
    return Value::Float(std::nearbyint(v.number() * scale) / scale);
  }
  if (name == "safe") return v;
  // The rest work on str(v).
  const std::string s = v.ToString();
  if (auto st = budget->Charge(s.size()); !st.ok()) return st;
  if (name == "string") return Value::String(s);
  if (name == "trim") {
    const Value chars = Arg(a, 0, "chars");
    std::optional<std::string> set;
    if (chars.is_string()) set = chars.str();
    return Value::String(PyStrip(s, set, StripSide::kBoth));
  }
  if (name == "lower") return Value::String(AsciiLower(s));
  if (name == "upper") return Value::String(AsciiUpper(s));
  if (name == "title") return Value::String(PyTitle(s));
  if (name == "capitalize") return Value::String(PyCapitalize(s));
  if (name == "escape" || name == "e") return Value::String(HtmlEscape(s));
  if (name == "replace") {
    auto method = BindMethod(Value::String(s), "replace", budget);
    std::vector<Value> pos = a.positional;
    return method->callable().fn(std::move(pos), {});
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no filter named '", AV(name), "'"));
}

}  // namespace ckv::chat
