#include "model/grammar/json_schema.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/grammar/json_schema_parts.h"
#include "model/grammar/regex.h"
#include "nlohmann/json.hpp"

namespace ckv::grammar {
namespace {

using json = nlohmann::ordered_json;  // properties in schema order

constexpr const char* kPrimitives = R"(
ws ::= [ \t\n]{0,4}
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" char* "\""
char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
number ::= integer ( "." [0-9]{1,16} )? ( [eE] [+-]? [0-9]{1,3} )?
integer ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
boolean ::= "true" | "false"
null ::= "null"
)";

class Converter {
 public:
  Converter(const json& root, const GrammarLimits& limits)
      : root_(root), limits_(limits) {}

  absl::StatusOr<std::string> Run() {
    const std::string top = Visit(root_, "#", 0);
    if (!error_.empty()) return absl::InvalidArgumentError(error_);
    std::string out = absl::StrCat("root ::= ", top, "\n", kPrimitives);
    for (const auto& [name, body] : rules_) {
      absl::StrAppend(&out, name, " ::= ", body, "\n");
    }
    return out;
  }

 private:
  void Fail(const std::string& path, const std::string& what) {
    if (error_.empty())
      error_ = absl::StrCat("json_schema at ", path, ": ", what);
  }

  std::string AddRule(const std::string& body) {
    auto it = by_body_.find(body);
    if (it != by_body_.end()) return it->second;
    const std::string name = absl::StrCat("s", rules_.size());
    rules_[name] = body;
    by_body_[body] = name;
    return name;
  }

  std::string Visit(const json& s, const std::string& path, int depth) {
    if (!error_.empty()) return "value";
    if (depth > limits_.max_nesting_depth) {
      Fail(path,
           absl::StrCat("nesting deeper than ", limits_.max_nesting_depth));
      return "value";
    }
    if (s.is_boolean()) {
      if (!s.get<bool>()) Fail(path, "schema `false` matches nothing");
      return "value";
    }
    if (!s.is_object()) {
      Fail(path, "a schema must be an object or a boolean");
      return "value";
    }
    if (s.contains("$ref")) return Ref(s, path, depth);
    if (s.contains("const")) return GbnfLiteral(s["const"].dump());
    if (s.contains("enum")) return Enum(s, path);
    for (const char* k : {"anyOf", "oneOf"}) {
      if (s.contains(k)) return AnyOf(s, k, path, depth);
    }
    if (s.contains("allOf")) {
      const json& all = s["allOf"];
      if (!all.is_array() || all.size() != 1) {
        Fail(path, "allOf is supported with exactly one schema");
        return "value";
      }
      return Visit(all[0], path + "/allOf/0", depth + 1);
    }
    for (const char* k :
         {"not", "if", "then", "else", "patternProperties", "dependentRequired",
          "dependentSchemas", "propertyNames", "unevaluatedProperties",
          "contains", "uniqueItems", "multipleOf", "minProperties",
          "maxProperties"}) {
      if (s.contains(k)) {
        Fail(path, absl::StrCat("keyword '", k, "' is not supported"));
        return "value";
      }
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array()) {
        for (const json& x : t) {
          if (!x.is_string())
            return Fail(path, "type list of non-strings"), "value";
          types.push_back(x.get<std::string>());
        }
      } else {
        Fail(path, "type must be a string or a list");
        return "value";
      }
    } else if (s.contains("properties") || s.contains("additionalProperties")) {
      types.push_back("object");
    } else if (s.contains("items")) {
      types.push_back("array");
    } else {
      return "value";
    }
    std::vector<std::string> alts;
    for (const std::string& t : types) alts.push_back(Typed(s, t, path, depth));
    if (alts.size() == 1) return alts[0];
    return AddRule(absl::StrJoin(alts, " | "));
  }

  std::string Typed(const json& s, const std::string& t,
                    const std::string& path, int depth) {
    if (t == "string") return String(s, path);
    if (t == "integer") return Integer(s, path);
    if (t == "number") return Number(s, path);
    if (t == "boolean") return "boolean";
    if (t == "null") return "null";
    if (t == "object") return Object(s, path, depth);
    if (t == "array") return Array(s, path, depth);
    Fail(path, absl::StrCat("unknown type '", t, "'"));
    return "value";
  }

  std::string Ref(const json& s, const std::string& path, int depth) {
    if (!s["$ref"].is_string())
      return Fail(path, "$ref must be a string"), "value";
    const std::string ref = s["$ref"].get<std::string>();
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    const json* target = nullptr;
    if (ref == "#") {
      target = &root_;
    } else {
      for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
        const std::string p = prefix;
        if (ref.rfind(p, 0) != 0) continue;
        const std::string key = p.substr(2, p.size() - 3);
        const std::string name = ref.substr(p.size());
        if (root_.contains(key) && root_[key].is_object() &&
            root_[key].contains(name)) {
          target = &root_[key][name];
        }
      }
    }
    if (target == nullptr) {
      Fail(path, absl::StrCat("$ref '", ref,
                              "' is not '#', '#/$defs/NAME' or "
                              "'#/definitions/NAME' of this schema"));
      return "value";
    }
    // Named before its body, so recursive references resolve to it.
    const std::string name = absl::StrCat("r", refs_.size());
    refs_[ref] = name;
    const std::string body = Visit(*target, ref, depth + 1);
    rules_[name] = body;
    return name;
  }

  std::string Enum(const json& s, const std::string& path) {
    const json& e = s["enum"];
    if (!e.is_array() || e.empty()) {
      Fail(path, "enum must be a non-empty array");
      return "value";
    }
    if (e.size() > static_cast<size_t>(limits_.max_enum_values)) {
      Fail(path, absl::StrCat("enum has ", e.size(), " values; the limit is ",
                              limits_.max_enum_values));
      return "value";
    }
    std::vector<std::string> alts;
    for (const json& v : e) alts.push_back(GbnfLiteral(v.dump()));
    return AddRule(absl::StrJoin(alts, " | "));
  }

  std::string AnyOf(const json& s, const char* key, const std::string& path,
                    int depth) {
    const json& list = s[key];
    if (!list.is_array() || list.empty()) {
      Fail(path, absl::StrCat(key, " must be a non-empty array"));
      return "value";
    }
    std::vector<std::string> alts;
    for (size_t i = 0; i < list.size(); ++i) {
      alts.push_back(
          Visit(list[i], absl::StrCat(path, "/", key, "/", i), depth + 1));
    }
    return AddRule(absl::StrJoin(alts, " | "));
  }

  std::string String(const json& s, const std::string& path) {
    int lo = 0, hi = -1;
    if (!Count(s, "minLength", path, &lo) ||
        !Count(s, "maxLength", path, &hi)) {
      return "value";
    }
    if (s.contains("format")) {
      if (!s["format"].is_string())
        return Fail(path, "format must be a string"), "value";
      const std::string f = s["format"].get<std::string>();
      const std::string body = FormatGbnf(f);
      if (body.empty()) {
        Fail(path, absl::StrCat("format '", f, "' is not supported"));
        return "value";
      }
      if (s.contains("pattern") || s.contains("minLength") ||
          s.contains("maxLength")) {
        Fail(path, "format cannot be combined with pattern or length bounds");
        return "value";
      }
      return AddRule(absl::StrCat("\"\\\"\" ", body, " \"\\\"\""));
    }
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string())
        return Fail(path, "pattern must be a string"), "value";
      if (s.contains("minLength") || s.contains("maxLength")) {
        Fail(path, "pattern cannot be combined with length bounds");
        return "value";
      }
      auto body = RegexToGbnf(s["pattern"].get<std::string>(), limits_);
      if (!body.ok()) {
        Fail(path, std::string(body.status().message()));
        return "value";
      }
      return AddRule(absl::StrCat("\"\\\"\" ", *body, " \"\\\"\""));
    }
    if (lo == 0 && hi == -1) return "string";
    if (hi != -1 && hi < lo)
      return Fail(path, "maxLength < minLength"), "value";
    return AddRule(
        hi == -1 ? absl::StrCat("\"\\\"\" char{", lo, ",} \"\\\"\"")
                 : absl::StrCat("\"\\\"\" char{", lo, ",", hi, "} \"\\\"\""));
  }

  // A non-negative integer keyword (absent: *v unchanged).
  bool Count(const json& s, const char* key, const std::string& path, int* v) {
    if (!s.contains(key)) return true;
    const json& x = s[key];
    if (!x.is_number_integer() || x.get<int64_t>() < 0 ||
        x.get<int64_t>() > limits_.max_repeat) {
      Fail(path, absl::StrCat(key, " must be an integer in [0, ",
                              limits_.max_repeat, "]"));
      return false;
    }
    *v = static_cast<int>(x.get<int64_t>());
    return true;
  }

  // An integral bound (absent: *v unchanged); false on a non-integer.
  bool Bound(const json& s, const char* key, const std::string& path,
             int64_t* v, int64_t adjust) {
    if (!s.contains(key)) return true;
    const json& x = s[key];
    double d = x.is_number() ? x.get<double>() : NAN;
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 1e15) {
      Fail(path, absl::StrCat(key, " must be an integer of at most 15 digits"));
      return false;
    }
    *v = static_cast<int64_t>(d) + adjust;
    return true;
  }

  std::string Integer(const json& s, const std::string& path) {
    int64_t lo = kNoLow, hi = kNoHigh;
    if (!Bound(s, "minimum", path, &lo, 0) ||
        !Bound(s, "exclusiveMinimum", path, &lo, 1) ||
        !Bound(s, "maximum", path, &hi, 0) ||
        !Bound(s, "exclusiveMaximum", path, &hi, -1)) {
      return "value";
    }
    if (lo == kNoLow && hi == kNoHigh) return "integer";
    if (lo > hi) return Fail(path, "the integer range is empty"), "value";
    return AddRule(IntegerRangeGbnf(lo, hi));
  }

  std::string Number(const json& s, const std::string& path) {
    if (s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum")) {
      Fail(path, "exclusive bounds are supported on integers only");
      return "value";
    }
    int64_t lo = kNoLow, hi = kNoHigh;
    if (!Bound(s, "minimum", path, &lo, 0) ||
        !Bound(s, "maximum", path, &hi, 0)) {
      return "value";
    }
    if (lo == kNoLow && hi == kNoHigh) return "number";
    if (lo > hi) return Fail(path, "the number range is empty"), "value";
    return AddRule(NumberRangeGbnf(lo, hi));
  }

  std::string Object(const json& s, const std::string& path, int depth) {
    const json* props = s.contains("properties") ? &s["properties"] : nullptr;
    if (props != nullptr && !props->is_object()) {
      return Fail(path, "properties must be an object"), "value";
    }
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array())
        return Fail(path, "required must be a list"), "value";
      for (const json& r : s["required"]) {
        if (!r.is_string())
          return Fail(path, "required names must be strings"), "value";
        required.insert(r.get<std::string>());
        if (props == nullptr || !props->contains(r.get<std::string>())) {
          Fail(path, absl::StrCat("required property '", r.get<std::string>(),
                                  "' has no schema in properties"));
          return "value";
        }
      }
    }
    if (props == nullptr || props->empty()) {
      const json* extra = s.contains("additionalProperties")
                              ? &s["additionalProperties"]
                              : nullptr;
      if (extra != nullptr && extra->is_object()) {
        const std::string v =
            Visit(*extra, path + "/additionalProperties", depth + 1);
        const std::string kv = absl::StrCat("string ws \":\" ws ", v, " ws");
        return AddRule(absl::StrCat("\"{\" ws ( ", kv, " ( \",\" ws ", kv,
                                    " )* )? \"}\""));
      }
      if (extra != nullptr && extra->is_boolean() && !extra->get<bool>()) {
        return AddRule("\"{\" ws \"}\"");
      }
      return "object";
    }
    std::vector<std::string> kvs;
    std::vector<bool> req;
    for (auto it = props->begin(); it != props->end(); ++it) {
      const std::string v =
          Visit(it.value(), path + "/properties/" + it.key(), depth + 1);
      kvs.push_back(absl::StrCat(GbnfLiteral(json(it.key()).dump()),
                                 " ws \":\" ws ", v, " ws"));
      req.push_back(required.count(it.key()) > 0);
    }
    // first(i): properties i.. with none emitted yet; rest(i): after one.
    std::string first = "\"\"", rest = "\"\"";
    for (size_t i = kvs.size(); i-- > 0;) {
      const std::string next_rest = AddRule(
          req[i] ? absl::StrCat("\",\" ws ", kvs[i], " ", rest)
                 : absl::StrCat("\",\" ws ", kvs[i], " ", rest, " | ", rest));
      const std::string next_first =
          AddRule(req[i] ? absl::StrCat(kvs[i], " ", rest)
                         : absl::StrCat(kvs[i], " ", rest, " | ", first));
      rest = next_rest;
      first = next_first;
    }
    return AddRule(absl::StrCat("\"{\" ws ", first, " \"}\""));
  }

  std::string Array(const json& s, const std::string& path, int depth) {
    int lo = 0, hi = -1;
    if (!Count(s, "minItems", path, &lo) || !Count(s, "maxItems", path, &hi)) {
      return "value";
    }
    if (hi != -1 && hi < lo) return Fail(path, "maxItems < minItems"), "value";
    if (s.contains("prefixItems")) {
      return Fail(path, "keyword 'prefixItems' is not supported"), "value";
    }
    const std::string item = s.contains("items")
                                 ? Visit(s["items"], path + "/items", depth + 1)
                                 : "value";
    if (hi == 0) return AddRule("\"[\" ws \"]\"");
    const std::string more_lo = absl::StrCat(std::max(lo, 1) - 1);
    const std::string more = hi == -1
                                 ? absl::StrCat("{", more_lo, ",}")
                                 : absl::StrCat("{", more_lo, ",", hi - 1, "}");
    std::string items =
        absl::StrCat(item, " ws ( \",\" ws ", item, " ws )", more);
    if (lo == 0) items = absl::StrCat("( ", items, " )?");
    return AddRule(absl::StrCat("\"[\" ws ", items, " \"]\""));
  }

  const json& root_;
  const GrammarLimits& limits_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> by_body_;
  std::map<std::string, std::string> refs_;
  std::string error_;
};

}  // namespace

std::string GbnfLiteral(absl::string_view bytes) {
  std::string out = "\"";
  for (unsigned char c : bytes) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out + "\"";
}

const std::string& JsonObjectGbnf() {
  static const std::string* g =
      new std::string(absl::StrCat("root ::= object\n", kPrimitives));
  return *g;
}

absl::StatusOr<std::string> JsonSchemaToGbnf(absl::string_view schema_json,
                                             const GrammarLimits& limits) {
  if (schema_json.size() > limits.max_source_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("json_schema: ", schema_json.size(),
                     " bytes; the limit is ", limits.max_source_bytes));
  }
  json schema = json::parse(schema_json.begin(), schema_json.end(), nullptr,
                            /*allow_exceptions=*/false);
  if (schema.is_discarded()) {
    return absl::InvalidArgumentError("json_schema: not valid JSON");
  }
  return Converter(schema, limits).Run();
}

}  // namespace ckv::grammar
