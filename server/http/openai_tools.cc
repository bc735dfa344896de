#include "server/http/openai_tools.h"

#include <cctype>
#include <cstring>
#include <random>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/grammar/json_schema.h"

namespace ckv::server::http {
namespace {

using Json = nlohmann::ordered_json;

// JSON text that never throws (invalid UTF-8 replaced).
std::string Text(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

absl::Status Bad(absl::string_view field, absl::string_view what) {
  return FieldError(field, absl::StrCat("'", field, "' ", what));
}

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
          c == '-')) {
      return false;
    }
  }
  return true;
}

absl::Status ReadTool(const Json& t, const std::string& field,
                      std::set<std::string>& names, ToolDef& def) {
  if (!t.is_object() || !t.contains("type") || t["type"] != "function") {
    return Bad(field, "must be {\"type\": \"function\", \"function\": {...}}");
  }
  if (!t.contains("function") || !t["function"].is_object()) {
    return Bad(field + ".function", "is required (an object)");
  }
  const Json& f = t["function"];
  if (!f.contains("name") || !f["name"].is_string() ||
      !ValidName(f["name"].get<std::string>())) {
    return Bad(field + ".function.name",
               "is required: 1 to 64 of a-z, A-Z, 0-9, _ and -");
  }
  def.name = f["name"].get<std::string>();
  if (!names.insert(def.name).second) {
    return Bad(field + ".function.name",
               absl::StrCat("'", def.name, "' is defined twice"));
  }
  if (f.contains("description") && !f["description"].is_null() &&
      !f["description"].is_string()) {
    return Bad(field + ".function.description", "must be a string");
  }
  if (f.contains("parameters") && !f["parameters"].is_null()) {
    if (!f["parameters"].is_object()) {
      return Bad(field + ".function.parameters",
                 "must be a JSON Schema object");
    }
    def.parameters = Text(f["parameters"]);
  }
  def.json = Text(t);
  return absl::OkStatus();
}

absl::Status ReadToolChoice(const Json& c, OpenAiRequest& r) {
  if (c.is_string()) {
    const std::string v = c.get<std::string>();
    if (v == "auto") {
      r.tool_choice = ToolChoice::kAuto;
    } else if (v == "none") {
      r.tool_choice = ToolChoice::kNone;
    } else if (v == "required") {
      r.tool_choice = ToolChoice::kRequired;
    } else {
      return Bad("tool_choice",
                 "must be \"auto\", \"none\", \"required\" or {\"type\": "
                 "\"function\", \"function\": {\"name\": ...}}");
    }
    return absl::OkStatus();
  }
  if (!c.is_object() || !c.contains("type") || c["type"] != "function" ||
      !c.contains("function") || !c["function"].is_object() ||
      !c["function"].contains("name") || !c["function"]["name"].is_string()) {
    return Bad("tool_choice",
               "must be \"auto\", \"none\", \"required\" or {\"type\": "
               "\"function\", \"function\": {\"name\": ...}}");
  }
  r.tool_choice = ToolChoice::kNamed;
  r.tool_choice_name = c["function"]["name"].get<std::string>();
  return absl::OkStatus();
}

// {"$ref": ...} of a tool's parameters, moved under the combined schema's
// $defs as "t<i>_<name>" ("#" -> "t<i>_"), so tools' definitions cannot
// collide.
void RenameRefs(Json& s, const std::string& prefix) {
  if (s.is_object()) {
    for (auto& [k, v] : s.items()) {
      if (k == "$ref" && v.is_string()) {
        const std::string ref = v.get<std::string>();
        for (const char* p : {"#/$defs/", "#/definitions/"}) {
          if (ref.rfind(p, 0) == 0) {
            v = absl::StrCat("#/$defs/", prefix, ref.substr(strlen(p)));
          }
        }
        if (ref == "#") v = absl::StrCat("#/$defs/", prefix);
      } else {
        RenameRefs(v, prefix);
      }
    }
  } else if (s.is_array()) {
    for (Json& v : s) RenameRefs(v, prefix);
  }
}

// The JSON Schema of one call: {"name": const, <args_key>: parameters}.
Json CallSchema(const ToolDef& t, const char* args_key, int index, Json& defs) {
  Json params = t.parameters.empty()
                    ? Json{{"type", "object"}, {"properties", Json::object()}}
                    : Json::parse(t.parameters);
  const std::string prefix = absl::StrCat("t", index, "_");
  RenameRefs(params, prefix);
  for (const char* key : {"$defs", "definitions"}) {
    if (!params.contains(key) || !params[key].is_object()) continue;
    for (auto& [name, def] : params[key].items()) {
      defs[prefix + name] = def;
    }
    params.erase(key);
  }
  defs[prefix] = params;
  Json props = Json::object();
  props["name"] = Json{{"const", t.name}};
  props[args_key] = Json{{"$ref", "#/$defs/" + prefix}};
  return Json{{"type", "object"},
              {"properties", props},
              {"required", Json::array({"name", args_key})}};
}

}  // namespace

absl::Status ReadTools(const Json& body, OpenAiRequest& r) {
  if (body.contains("tools") && !body["tools"].is_null()) {
    const Json& tools = body["tools"];
    if (!tools.is_array()) return Bad("tools", "must be a list");
    if (tools.size() > kMaxTools) {
      return Bad("tools",
                 absl::StrCat("holds more than ", kMaxTools, " tools"));
    }
    std::set<std::string> names;
    for (size_t i = 0; i < tools.size(); ++i) {
      if (auto s = ReadTool(tools[i], absl::StrCat("tools.[", i, "]"), names,
                            r.tools.emplace_back());
          !s.ok()) {
        return s;
      }
    }
  }
  if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
    if (auto s = ReadToolChoice(body["tool_choice"], r); !s.ok()) return s;
  }
  if (body.contains("parallel_tool_calls") &&
      !body["parallel_tool_calls"].is_null()) {
    if (!body["parallel_tool_calls"].is_boolean()) {
      return Bad("parallel_tool_calls", "must be true or false");
    }
    r.parallel_tool_calls = body["parallel_tool_calls"].get<bool>();
  }
  if (r.tools.empty() && (r.tool_choice == ToolChoice::kRequired ||
                          r.tool_choice == ToolChoice::kNamed)) {
    return Bad("tool_choice", "needs 'tools' to choose from");
  }
  if (r.tool_choice == ToolChoice::kNamed) {
    bool found = false;
    for (const ToolDef& t : r.tools) found |= t.name == r.tool_choice_name;
    if (!found) {
      return Bad("tool_choice", absl::StrCat("names '", r.tool_choice_name,
                                             "', which is not in 'tools'"));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadToolCalls(const Json& m, const std::string& field,
                           ChatTurn& turn) {
  if (m.contains("tool_call_id") && !m["tool_call_id"].is_null()) {
    if (!m["tool_call_id"].is_string()) {
      return Bad(field + ".tool_call_id", "must be a string");
    }
    turn.tool_call_id = m["tool_call_id"].get<std::string>();
  }
  if (m.contains("name") && !m["name"].is_null()) {
    if (!m["name"].is_string()) return Bad(field + ".name", "must be a string");
    turn.name = m["name"].get<std::string>();
  }
  if (!m.contains("tool_calls") || m["tool_calls"].is_null()) {
    return absl::OkStatus();
  }
  const Json& calls = m["tool_calls"];
  if (turn.role != "assistant" || !calls.is_array()) {
    return Bad(field + ".tool_calls",
               "must be a list, on an assistant message");
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string f = absl::StrCat(field, ".tool_calls.[", i, "]");
    const Json& c = calls[i];
    if (!c.is_object() || !c.contains("function") ||
        !c["function"].is_object() || !c["function"].contains("name") ||
        !c["function"]["name"].is_string()) {
      return Bad(f,
                 "must be {\"id\", \"type\": \"function\", \"function\": "
                 "{\"name\", \"arguments\"}}");
    }
    ToolCallIn& in = turn.tool_calls.emplace_back();
    if (c.contains("id") && c["id"].is_string()) in.id = c["id"];
    in.name = c["function"]["name"].get<std::string>();
    const Json& args = c["function"].contains("arguments")
                           ? c["function"]["arguments"]
                           : Json();
    if (args.is_string()) {
      in.arguments = args.get<std::string>();
    } else if (args.is_object()) {
      in.arguments = Text(args);
    } else if (!args.is_null()) {
      return Bad(f + ".function.arguments", "must be a JSON string");
    }
  }
  return absl::OkStatus();
}

std::string TemplateMessagesJson(const std::vector<ChatTurn>& messages) {
  Json list = Json::array();
  for (const ChatTurn& m : messages) {
    Json j{{"role", m.role}, {"content", m.content}};
    if (!m.tool_calls.empty()) {
      Json calls = Json::array();
      for (const ToolCallIn& c : m.tool_calls) {
        Json args = Json::parse(c.arguments, nullptr, false);
        if (!args.is_object()) args = c.arguments;  // as sent
        calls.push_back(
            Json{{"id", c.id},
                 {"type", "function"},
                 {"function", Json{{"name", c.name}, {"arguments", args}}}});
      }
      j["tool_calls"] = calls;
    }
    if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
    if (!m.name.empty()) j["name"] = m.name;
    list.push_back(std::move(j));
  }
  return Text(list);
}

std::string TemplateToolsJson(const OpenAiRequest& r) {
  if (!ToolsActive(r)) return "";
  std::string out = "[";
  for (size_t i = 0; i < r.tools.size(); ++i) {
    if (i > 0) out += ",";
    out += r.tools[i].json;
  }
  return out + "]";
}

absl::StatusOr<std::optional<grammar::ConstraintSpec>> ForcedToolGrammar(
    chat::ToolCallSyntax syntax, const OpenAiRequest& r) {
  if (r.tool_choice != ToolChoice::kRequired &&
      r.tool_choice != ToolChoice::kNamed) {
    return std::nullopt;
  }
  const char* args_key =
      syntax == chat::ToolCallSyntax::kLlama3Json ? "parameters" : "arguments";
  Json defs = Json::object();
  Json alternatives = Json::array();
  for (size_t i = 0; i < r.tools.size(); ++i) {
    const ToolDef& t = r.tools[i];
    if (r.tool_choice == ToolChoice::kNamed && t.name != r.tool_choice_name) {
      continue;
    }
    alternatives.push_back(CallSchema(t, args_key, static_cast<int>(i), defs));
  }
  Json schema = alternatives.size() == 1 ? alternatives[0]
                                         : Json{{"anyOf", alternatives}};
  schema["$defs"] = defs;
  auto gbnf = grammar::JsonSchemaToGbnf(Text(schema), grammar::GrammarLimits());
  if (!gbnf.ok()) {
    return FieldError("tools", absl::StrCat("tools: a parameters schema: ",
                                            gbnf.status().message()));
  }
  // The schema's start rule becomes `call`, inside the family's syntax.
  std::string text = *std::move(gbnf);
  const std::string kRoot = "root ::= ";
  if (text.rfind(kRoot, 0) != 0) {
    return absl::InternalError("json schema grammar has no leading root rule");
  }
  text.replace(0, kRoot.size(), "call ::= ");
  std::string root;
  switch (syntax) {
    case chat::ToolCallSyntax::kHermes:
      root = "root ::= \"<tool_call>\\n\" call \"\\n</tool_call>\"\n";
      break;
    case chat::ToolCallSyntax::kMistral:
    case chat::ToolCallSyntax::kGranite:
      // [TOOL_CALLS] / <|tool_call|> is a control token, which the
      // grammar's vocabulary index leaves out: the bare list.
      root = "root ::= \"[\" call \"]\"\n";
      break;
    default:
      root = "root ::= call\n";
  }
  return grammar::ConstraintSpec{grammar::ConstraintSpec::kGbnf, root + text};
}

std::string NewToolCallId() {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % (sizeof kAlphabet - 1)];
  return id;
}

std::string WithToolCalls(const std::string& body_json,
                          const std::string& content,
                          const std::vector<ToolCallOut>& calls) {
  Json j = Json::parse(body_json);
  Json& message = j["choices"][0]["message"];
  message["content"] =
      content.empty() && !calls.empty() ? Json(nullptr) : Json(content);
  if (!calls.empty()) {
    Json list = Json::array();
    for (const ToolCallOut& c : calls) {
      list.push_back(Json{{"id", c.id},
                          {"type", "function"},
                          {"function", Json{{"name", c.call.name},
                                            {"arguments", c.call.arguments}}}});
    }
    message["tool_calls"] = list;
  }
  return Text(j);
}

std::vector<std::string> ToolCallChunks(const ResponseHead& head, int index,
                                        const ToolCallOut& call, bool first,
                                        int choice) {
  auto chunk = [&](Json call_delta, bool with_role) {
    Json delta = Json::object();
    if (with_role) delta["role"] = "assistant";
    delta["tool_calls"] = Json::array({std::move(call_delta)});
    Json c{{"index", choice},
           {"delta", delta},
           {"logprobs", nullptr},
           {"finish_reason", nullptr}};
    Json j{{"id", head.id},
           {"object", "chat.completion.chunk"},
           {"created", head.created},
           {"model", head.model},
           {"choices", Json::array({c})}};
    return Text(j);
  };
  return {chunk(Json{{"index", index},
                     {"id", call.id},
                     {"type", "function"},
                     {"function",
                      Json{{"name", call.call.name}, {"arguments", ""}}}},
                first),
          chunk(Json{{"index", index},
                     {"function", Json{{"arguments", call.call.arguments}}}},
                false)};
}

}  // namespace ckv::server::http
