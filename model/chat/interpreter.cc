#include "model/chat/interpreter.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "model/chat/builtins.h"
#include "model/chat/text.h"

namespace ckv::chat {
namespace {

#define CKV_TRY(expr)         \
  do {                        \
    absl::Status _s = (expr); \
    if (!_s.ok()) return _s;  \
  } while (0)

#define CKV_ASSIGN(lhs, expr)                   \
  auto lhs##_or = (expr);                       \
  if (!lhs##_or.ok()) return lhs##_or.status(); \
  auto lhs = *std::move(lhs##_or)

struct Scope;
using ScopePtr = std::shared_ptr<Scope>;

// Variables of one scope; lookups fall back to the parent.
struct Scope {
  ScopePtr parent;
  absl::flat_hash_map<std::string, Value> vars;

  const Value* Find(const std::string& name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};

using Kwargs = std::vector<std::pair<std::string, Value>>;

absl::Status TypeError(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("TypeError: ", AV(what)));
}

class Interpreter {
 public:
  Interpreter(const TemplateLimits& limits, const TemplateDate& date)
      : budget_(limits), date_(date) {}

  // Macros close over their scope and namespaces may hold macros: clearing
  // both breaks every reference cycle.
  ~Interpreter() {
    for (const ScopePtr& s : macro_scopes_) s->vars.clear();
    for (const auto& ns : namespaces_) *ns = Dict();
  }

  absl::StatusOr<std::string> Render(const Body& body, const Value& context) {
    auto globals = std::make_shared<Scope>();
    InstallGlobals(globals.get());
    if (context.is_dict()) {
      CKV_TRY(CheckValue(context));
      for (const auto& [k, v] : context.dict().entries) {
        if (k.is_string()) globals->vars[k.str()] = v;
      }
    } else if (!context.is_undefined()) {
      return absl::InvalidArgumentError("template context must be a dict");
    }
    auto top = std::make_shared<Scope>();
    top->parent = globals;
    std::string out;
    CKV_TRY(Exec(body, top, &out));
    return out;
  }

 private:
  const TemplateLimits& limits() const { return budget_.limits(); }

  absl::Status CheckValue(const Value& v) const {
    if (v.depth() > limits().max_value_depth) {
      return absl::ResourceExhaustedError(
          absl::StrCat("template built a value nested deeper than ",
                       limits().max_value_depth));
    }
    if (v.weight() > limits().max_value_weight) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "template built a value larger than ", limits().max_value_weight));
    }
    return absl::OkStatus();
  }

  absl::Status Append(std::string_view text, std::string* out) {
    CKV_TRY(budget_.Charge(text.size()));
    if (out->size() + text.size() >
        static_cast<size_t>(limits().max_output_bytes)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "template output exceeds ", limits().max_output_bytes, " bytes"));
    }
    out->append(text);
    return absl::OkStatus();
  }

  // ---- globals ----

  void InstallGlobals(Scope* g) {
    g->vars["raise_exception"] =
        Value::Function("raise_exception", [](std::vector<Value> pos, Kwargs) {
          return absl::StatusOr<Value>(absl::InvalidArgumentError(
              pos.empty() ? std::string() : pos[0].ToString()));
        });
    g->vars["strftime_now"] =
        Value::Function("strftime_now", [this](std::vector<Value> pos, Kwargs) {
          if (pos.empty() || !pos[0].is_string()) {
            return absl::StatusOr<Value>(
                TypeError("strftime_now() needs a format string"));
          }
          if (pos[0].str().size() > 4096) {
            return absl::StatusOr<Value>(
                TypeError("strftime_now() format too long"));
          }
          return absl::StatusOr<Value>(Value::String(
              FormatDate(pos[0].str(), date_.year, date_.month, date_.day)));
        });
    g->vars["namespace"] =
        Value::Function("namespace", [this](std::vector<Value> pos, Kwargs kw) {
          return MakeNamespace(pos, kw);
        });
    g->vars["dict"] =
        Value::Function("dict", [](std::vector<Value> pos, Kwargs kw) {
          Dict d;
          if (!pos.empty() && pos[0].is_dict()) d = pos[0].dict();
          for (auto& [k, v] : kw) (void)d.Set(Value::String(k), v);
          return absl::StatusOr<Value>(Value::MakeDict(std::move(d)));
        });
    g->vars["range"] = Value::Function(
        "range", [this](std::vector<Value> pos, Kwargs) { return Range(pos); });
  }

  absl::StatusOr<Value> MakeNamespace(const std::vector<Value>& pos,
                                      const Kwargs& kw) {
    CKV_TRY(budget_.Charge(64));
    namespaces_.push_back(std::make_unique<Dict>());
    Dict* ns = namespaces_.back().get();
    if (!pos.empty() && pos[0].is_dict()) *ns = pos[0].dict();
    for (const auto& [k, v] : kw) CKV_TRY(ns->Set(Value::String(k), v));
    return Value::Namespace(ns);
  }

  absl::StatusOr<Value> Range(const std::vector<Value>& pos) {
    if (pos.empty() || pos.size() > 3) {
      return TypeError("range expected 1 to 3 arguments");
    }
    for (const Value& p : pos) {
      if (p.kind() != Value::Kind::kInt && p.kind() != Value::Kind::kBool) {
        return TypeError("range() arguments must be integers");
      }
    }
    const int64_t start = pos.size() == 1 ? 0 : pos[0].int_value();
    const int64_t stop =
        pos.size() == 1 ? pos[0].int_value() : pos[1].int_value();
    const int64_t step = pos.size() == 3 ? pos[2].int_value() : 1;
    if (step == 0) {
      return absl::InvalidArgumentError(
          "ValueError: range() arg 3 must not be zero");
    }
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
      if (static_cast<int64_t>(out.size()) >= limits().max_loop_iterations) {
        return absl::ResourceExhaustedError("range() too long");
      }
      CKV_TRY(budget_.Charge(1));
      out.push_back(Value::Int(i));
      if (__builtin_add_overflow(i, step, &i)) break;
    }
    return Value::MakeList(std::move(out));
  }

  // ---- statements ----

  absl::Status Exec(const Body& body, const ScopePtr& scope, std::string* out) {
    for (const auto& stmt : body) {
      CKV_TRY(ExecStmt(*stmt, scope, out));
      if (flow_ != Flow::kNormal) return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  absl::Status ExecStmt(const Stmt& s, const ScopePtr& scope,
                        std::string* out) {
    CKV_TRY(budget_.Charge(1));
    switch (s.kind) {
      case Stmt::Kind::kText:
        return Append(s.text, out);
      case Stmt::Kind::kOutput: {
        CKV_ASSIGN(v, Eval(*s.expr, scope));
        if (v.is_string()) return Append(v.str(), out);
        CKV_TRY(budget_.Charge(v.weight()));  // repr() of a container
        return Append(v.ToString(), out);
      }
      case Stmt::Kind::kIf:
        for (size_t i = 0; i < s.conditions.size(); ++i) {
          CKV_ASSIGN(cond, Eval(*s.conditions[i], scope));
          if (cond.Truthy()) return Exec(s.bodies[i], scope, out);
        }
        return Exec(s.else_body, scope, out);
      case Stmt::Kind::kFor:
        return ExecFor(s, scope, out);
      case Stmt::Kind::kSet:
        return ExecSet(s, scope);
      case Stmt::Kind::kSetBlock: {
        std::string text;
        CKV_TRY(Exec(s.body, scope, &text));
        scope->vars[s.targets[0]] = Value::String(std::move(text));
        return absl::OkStatus();
      }
      case Stmt::Kind::kMacro:
        DefineMacro(s, scope);
        return absl::OkStatus();
      case Stmt::Kind::kBreak:
      case Stmt::Kind::kContinue:
        if (loop_depth_ == 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("line ", s.line, ": break/continue outside a loop"));
        }
        flow_ = s.kind == Stmt::Kind::kBreak ? Flow::kBreak : Flow::kContinue;
        return absl::OkStatus();
      case Stmt::Kind::kScopedBody:
        return Exec(s.body, scope, out);
    }
    return absl::OkStatus();
  }

  // Binds for-loop or set targets to `v` (unpacked when several).
  absl::Status Bind(const std::vector<std::string>& targets, const Value& v,
                    Scope* scope) {
    if (targets.size() == 1) {
      scope->vars[targets[0]] = v;
      return absl::OkStatus();
    }
    CKV_ASSIGN(items, Iterate(v));
    if (items.size() != targets.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ValueError: expected ", targets.size(),
                       " values to unpack, got ", items.size()));
    }
    for (size_t i = 0; i < targets.size(); ++i) {
      scope->vars[targets[i]] = items[i];
    }
    return absl::OkStatus();
  }

  absl::Status ExecSet(const Stmt& s, const ScopePtr& scope) {
    CKV_ASSIGN(v, Eval(*s.expr, scope));
    if (s.attr.empty()) return Bind(s.targets, v, scope.get());
    const Value* target = scope->Find(s.targets[0]);
    if (target == nullptr || target->kind() != Value::Kind::kNamespace) {
      return TypeError(absl::StrCat("cannot assign attribute on '",
                                    s.targets[0], "': not a namespace"));
    }
    return target->ns()->Set(Value::String(s.attr), std::move(v));
  }

  static Value LoopInfo(const List& items, size_t i) {
    const int64_t n = items.size();
    const int64_t k = i;
    Dict d;
    (void)d.Set(Value::String("index"), Value::Int(k + 1));
    (void)d.Set(Value::String("index0"), Value::Int(k));
    (void)d.Set(Value::String("revindex"), Value::Int(n - k));
    (void)d.Set(Value::String("revindex0"), Value::Int(n - k - 1));
    (void)d.Set(Value::String("first"), Value::Bool(k == 0));
    (void)d.Set(Value::String("last"), Value::Bool(k == n - 1));
    (void)d.Set(Value::String("length"), Value::Int(n));
    (void)d.Set(Value::String("depth"), Value::Int(1));
    (void)d.Set(Value::String("depth0"), Value::Int(0));
    (void)d.Set(Value::String("previtem"),
                k > 0 ? items[k - 1] : Value::Undefined("previtem"));
    (void)d.Set(Value::String("nextitem"),
                k + 1 < n ? items[k + 1] : Value::Undefined("nextitem"));
    return Value::MakeDict(std::move(d));
  }

  absl::Status ExecFor(const Stmt& s, const ScopePtr& scope, std::string* out) {
    CKV_ASSIGN(iterable, Eval(*s.expr, scope));
    CKV_ASSIGN(all, Iterate(iterable));
    List items;
    for (const Value& item : all) {
      if (!s.filter) {
        items.push_back(item);
        continue;
      }
      CKV_TRY(budget_.CountIteration());
      auto test_scope = std::make_shared<Scope>();
      test_scope->parent = scope;
      CKV_TRY(Bind(s.targets, item, test_scope.get()));
      CKV_ASSIGN(keep, Eval(*s.filter, test_scope));
      if (keep.Truthy()) items.push_back(item);
    }
    ++loop_depth_;
    absl::Status status;
    for (size_t i = 0; i < items.size() && status.ok(); ++i) {
      status = budget_.CountIteration();
      if (!status.ok()) break;
      auto body_scope = std::make_shared<Scope>();
      body_scope->parent = scope;
      status = Bind(s.targets, items[i], body_scope.get());
      if (!status.ok()) break;
      body_scope->vars["loop"] = LoopInfo(items, i);
      status = Exec(s.body, body_scope, out);
      const Flow flow = flow_;
      flow_ = Flow::kNormal;
      if (flow == Flow::kBreak) break;
    }
    --loop_depth_;
    CKV_TRY(status);
    if (items.empty()) return Exec(s.else_body, scope, out);
    return absl::OkStatus();
  }

  void DefineMacro(const Stmt& s, const ScopePtr& scope) {
    macro_scopes_.push_back(scope);
    const Stmt* def = &s;
    scope->vars[s.name] = Value::Function(
        s.name, [this, def, scope](std::vector<Value> pos, Kwargs kw) {
          return CallMacro(*def, scope, pos, kw);
        });
  }

  absl::StatusOr<Value> CallMacro(const Stmt& def, const ScopePtr& defining,
                                  const std::vector<Value>& pos,
                                  const Kwargs& kw) {
    if (call_depth_ >= limits().max_call_depth) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "macro calls nested deeper than ", limits().max_call_depth));
    }
    if (pos.size() > def.params.size()) {
      return TypeError(absl::StrCat("macro '", def.name,
                                    "' takes not more than ", def.params.size(),
                                    " argument(s)"));
    }
    auto scope = std::make_shared<Scope>();
    scope->parent = defining;
    for (const auto& [k, v] : kw) {
      if (std::find(def.params.begin(), def.params.end(), k) ==
          def.params.end()) {
        return TypeError(
            absl::StrCat("macro '", def.name, "' has no argument '", k, "'"));
      }
      scope->vars[k] = v;
    }
    for (size_t i = 0; i < def.params.size(); ++i) {
      if (i < pos.size()) {
        scope->vars[def.params[i]] = pos[i];
      } else if (!scope->vars.contains(def.params[i])) {
        if (def.defaults[i]) {
          CKV_ASSIGN(d, Eval(*def.defaults[i], scope));
          scope->vars[def.params[i]] = d;
        } else {
          scope->vars[def.params[i]] = Value::Undefined(def.params[i]);
        }
      }
    }
    ++call_depth_;
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    std::string out;
    absl::Status status = Exec(def.body, scope, &out);
    loop_depth_ = saved_loop_depth;
    flow_ = Flow::kNormal;
    --call_depth_;
    CKV_TRY(status);
    return Value::String(std::move(out));
  }

  // ---- expressions ----

  absl::StatusOr<Value> Eval(const Expr& e, const ScopePtr& scope) {
    CKV_TRY(budget_.Charge(1));
    CKV_ASSIGN(v, EvalInner(e, scope));
    CKV_TRY(CheckValue(v));
    return v;
  }

  absl::StatusOr<CallArgs> EvalArgs(const Expr& e, size_t first,
                                    const ScopePtr& scope) {
    CallArgs args;
    for (size_t i = first; i < e.args.size(); ++i) {
      CKV_ASSIGN(v, Eval(*e.args[i], scope));
      args.positional.push_back(std::move(v));
    }
    for (const auto& [k, x] : e.kwargs) {
      CKV_ASSIGN(v, Eval(*x, scope));
      args.keyword.emplace_back(k, std::move(v));
    }
    return args;
  }

  absl::StatusOr<Value> EvalInner(const Expr& e, const ScopePtr& scope) {
    using EK = Expr::Kind;
    switch (e.kind) {
      case EK::kLiteral:
        return e.value;
      case EK::kName: {
        const Value* v = scope->Find(e.name);
        return v != nullptr ? *v : Value::Undefined(e.name);
      }
      case EK::kList:
      case EK::kTuple: {
        CKV_ASSIGN(args, EvalArgs(e, 0, scope));
        return Value::MakeList(std::move(args.positional),
                               e.kind == EK::kTuple);
      }
      case EK::kDict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          CKV_ASSIGN(k, Eval(*e.args[i], scope));
          CKV_ASSIGN(v, Eval(*e.args[i + 1], scope));
          CKV_TRY(d.Set(k, std::move(v)));
        }
        return Value::MakeDict(std::move(d));
      }
      case EK::kAttr: {
        CKV_ASSIGN(obj, Eval(*e.args[0], scope));
        return GetAttr(obj, e.name, &budget_);
      }
      case EK::kItem: {
        CKV_ASSIGN(obj, Eval(*e.args[0], scope));
        CKV_ASSIGN(key, Eval(*e.args[1], scope));
        return GetItem(obj, key, &budget_);
      }
      case EK::kSlice:
        return EvalSlice(e, scope);
      case EK::kCall:
        return EvalCall(e, scope);
      case EK::kFilter: {
        CKV_ASSIGN(operand, Eval(*e.args[0], scope));
        CKV_ASSIGN(args, EvalArgs(e, 1, scope));
        return ApplyFilter(e.name, operand, args, &budget_);
      }
      case EK::kTest: {
        CKV_ASSIGN(operand, Eval(*e.args[0], scope));
        CKV_ASSIGN(args, EvalArgs(e, 1, scope));
        CKV_ASSIGN(r, ApplyTest(e.name, operand, args));
        return Value::Bool(r != e.negated);
      }
      case EK::kUnary: {
        CKV_ASSIGN(operand, Eval(*e.args[0], scope));
        if (e.name == "not") return Value::Bool(!operand.Truthy());
        return UnaryOp(e.name, operand);
      }
      case EK::kBinary: {
        CKV_ASSIGN(left, Eval(*e.args[0], scope));
        if (e.name == "and" && !left.Truthy()) return left;
        if (e.name == "or" && left.Truthy()) return left;
        CKV_ASSIGN(right, Eval(*e.args[1], scope));
        if (e.name == "and" || e.name == "or") return right;
        return BinaryOp(e.name, left, right, &budget_);
      }
      case EK::kCompare: {
        CKV_ASSIGN(left, Eval(*e.args[0], scope));
        for (size_t i = 0; i < e.ops.size(); ++i) {
          CKV_ASSIGN(right, Eval(*e.args[i + 1], scope));
          CKV_ASSIGN(r, Compare(e.ops[i], left, right));
          if (!r) return Value::Bool(false);
          left = std::move(right);
        }
        return Value::Bool(true);
      }
      case EK::kCondition: {
        CKV_ASSIGN(cond, Eval(*e.args[0], scope));
        if (cond.Truthy()) return Eval(*e.args[1], scope);
        if (e.args[2]) return Eval(*e.args[2], scope);
        return Value::Undefined("conditional expression");
      }
    }
    return absl::InternalError("unknown expression");
  }

  absl::StatusOr<Value> EvalSlice(const Expr& e, const ScopePtr& scope) {
    CKV_ASSIGN(obj, Eval(*e.args[0], scope));
    Value parts[3];
    for (int i = 0; i < 3; ++i) {
      if (!e.args[i + 1]) continue;
      CKV_ASSIGN(p, Eval(*e.args[i + 1], scope));
      parts[i] = std::move(p);
    }
    CKV_TRY(budget_.Charge(obj.is_list()     ? obj.list().size()
                           : obj.is_string() ? obj.str().size()
                                             : 1));
    return GetSlice(obj, parts[0], parts[1], parts[2]);
  }

  absl::StatusOr<Value> EvalCall(const Expr& e, const ScopePtr& scope) {
    CKV_ASSIGN(callee, Eval(*e.args[0], scope));
    CKV_ASSIGN(args, EvalArgs(e, 1, scope));
    if (callee.is_undefined()) return UndefinedError(callee);
    if (callee.kind() != Value::Kind::kCallable) {
      return TypeError(
          absl::StrCat("'", callee.TypeName(), "' object is not callable"));
    }
    return callee.callable().fn(std::move(args.positional),
                                std::move(args.keyword));
  }

  enum class Flow { kNormal, kBreak, kContinue };

  Budget budget_;
  TemplateDate date_;
  Flow flow_ = Flow::kNormal;
  int loop_depth_ = 0;
  int call_depth_ = 0;
  std::vector<ScopePtr> macro_scopes_;
  std::vector<std::unique_ptr<Dict>> namespaces_;
};

}  // namespace

absl::StatusOr<std::string> RenderBody(const Body& body, const Value& context,
                                       const TemplateLimits& limits,
                                       const TemplateDate& date) {
  Interpreter interpreter(limits, date);
  return interpreter.Render(body, context);
}

}  // namespace ckv::chat
