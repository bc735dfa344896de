#include "model/chat/parser.h"
#include "model/chat/text.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "model/chat/builtins.h"

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

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, int max_nesting)
      : toks_(tokens), max_nesting_(max_nesting) {}

  absl::StatusOr<Body> ParseTemplate() {
    std::string end;
    CKV_ASSIGN(body, ParseBody({}, &end));
    return body;
  }

 private:
  // Counts recursion; error past max_nesting.
  class DepthGuard {
   public:
    explicit DepthGuard(Parser* p) : p_(p) { ++p_->depth_; }
    ~DepthGuard() { --p_->depth_; }
    absl::Status Check() const {
      return p_->depth_ > p_->max_nesting_ ? p_->Error("nested too deeply")
                                           : absl::OkStatus();
    }

   private:
    Parser* p_;
  };

  const Token& Cur() const { return toks_[pos_]; }
  const Token& Peek(size_t ahead) const {
    return toks_[std::min(pos_ + ahead, toks_.size() - 1)];
  }
  void Next() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool IsOp(std::string_view op) const {
    return Cur().type == TokenType::kOperator && Cur().text == op;
  }
  bool IsName(std::string_view name) const {
    return Cur().type == TokenType::kName && Cur().text == name;
  }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(
        "template syntax error, line ", Cur().line, ": ", AV(what)));
  }
  absl::Status ExpectOp(std::string_view op) {
    if (SkipOp(op)) return absl::OkStatus();
    return Error(absl::StrCat("expected '", AV(op), "'"));
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Cur().type != TokenType::kName) return Error("expected a name");
    std::string n = Cur().text;
    Next();
    return n;
  }
  absl::Status ExpectBlockEnd() {
    if (Cur().type != TokenType::kBlockEnd) return Error("expected '%}'");
    Next();
    return absl::OkStatus();
  }

  ExprPtr Make(Expr::Kind kind) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = Cur().line;
    return e;
  }
  // Appends a child; error when the tree grows past max_nesting.
  absl::Status Add(Expr* parent, ExprPtr child) {
    if (child) parent->height = std::max(parent->height, child->height + 1);
    parent->args.push_back(std::move(child));
    return parent->height > max_nesting_ ? Error("expression nested too deeply")
                                         : absl::OkStatus();
  }

  // ---- statements ----

  // Parses until `{% NAME` with NAME in `ends` (consumed, stored in *end) or
  // the end of the template (only when `ends` is empty).
  absl::StatusOr<Body> ParseBody(std::initializer_list<std::string_view> ends,
                                 std::string* end) {
    DepthGuard guard(this);
    CKV_TRY(guard.Check());
    Body body;
    while (true) {
      const Token& t = Cur();
      if (t.type == TokenType::kEnd) {
        if (ends.size() == 0) return body;
        return Error(absl::StrCat("unexpected end of template, expected '",
                                  AV(*ends.begin()), "'"));
      }
      if (t.type == TokenType::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->text = t.text;
        Next();
        body.push_back(std::move(s));
      } else if (t.type == TokenType::kVarBegin) {
        Next();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->line = t.line;
        CKV_ASSIGN(e, ParseTuple(true));
        s->expr = std::move(e);
        if (Cur().type != TokenType::kVarEnd) return Error("expected '}}'");
        Next();
        body.push_back(std::move(s));
      } else if (t.type == TokenType::kBlockBegin) {
        Next();
        if (Cur().type != TokenType::kName) return Error("expected a tag name");
        const std::string name = Cur().text;
        if (std::find(ends.begin(), ends.end(), name) != ends.end()) {
          Next();
          *end = name;
          return body;
        }
        CKV_ASSIGN(s, ParseStatement());
        body.push_back(std::move(s));
      } else {
        return Error("unexpected token");
      }
    }
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseStatement() {
    const std::string name = Cur().text;
    auto s = std::make_unique<Stmt>();
    s->line = Cur().line;
    Next();
    if (name == "if") return ParseIf(std::move(s));
    if (name == "for") return ParseFor(std::move(s));
    if (name == "set") return ParseSet(std::move(s));
    if (name == "macro") return ParseMacro(std::move(s));
    if (name == "break" || name == "continue") {
      s->kind = name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      CKV_TRY(ExpectBlockEnd());
      return s;
    }
    if (name == "generation") {
      s->kind = Stmt::Kind::kScopedBody;
      CKV_TRY(ExpectBlockEnd());
      std::string end;
      CKV_ASSIGN(body, ParseBody({"endgeneration"}, &end));
      s->body = std::move(body);
      CKV_TRY(ExpectBlockEnd());
      return s;
    }
    return Error(absl::StrCat("unsupported tag '", name, "'"));
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseIf(std::unique_ptr<Stmt> s) {
    s->kind = Stmt::Kind::kIf;
    while (true) {
      CKV_ASSIGN(cond, ParseTuple(false));
      s->conditions.push_back(std::move(cond));
      CKV_TRY(ExpectBlockEnd());
      std::string end;
      CKV_ASSIGN(body, ParseBody({"elif", "else", "endif"}, &end));
      s->bodies.push_back(std::move(body));
      if (end == "elif") continue;
      if (end == "else") {
        CKV_TRY(ExpectBlockEnd());
        CKV_ASSIGN(else_body, ParseBody({"endif"}, &end));
        s->else_body = std::move(else_body);
      }
      CKV_TRY(ExpectBlockEnd());
      return s;
    }
  }

  // name or name, name, ... (optionally parenthesized).
  absl::StatusOr<std::vector<std::string>> ParseTargets() {
    const bool paren = SkipOp("(");
    std::vector<std::string> names;
    do {
      if (paren && IsOp(")")) break;
      CKV_ASSIGN(n, ExpectName());
      names.push_back(n);
    } while (SkipOp(","));
    if (paren) CKV_TRY(ExpectOp(")"));
    return names;
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseFor(std::unique_ptr<Stmt> s) {
    s->kind = Stmt::Kind::kFor;
    CKV_ASSIGN(targets, ParseTargets());
    s->targets = std::move(targets);
    if (!SkipName("in")) return Error("expected 'in'");
    CKV_ASSIGN(iter, ParseTuple(false));
    s->expr = std::move(iter);
    if (SkipName("if")) {
      CKV_ASSIGN(filter, ParseExpression());
      s->filter = std::move(filter);
    }
    if (IsName("recursive")) return Error("recursive loops are not supported");
    CKV_TRY(ExpectBlockEnd());
    std::string end;
    CKV_ASSIGN(body, ParseBody({"else", "endfor"}, &end));
    s->body = std::move(body);
    if (end == "else") {
      CKV_TRY(ExpectBlockEnd());
      CKV_ASSIGN(else_body, ParseBody({"endfor"}, &end));
      s->else_body = std::move(else_body);
    }
    CKV_TRY(ExpectBlockEnd());
    return s;
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseSet(std::unique_ptr<Stmt> s) {
    s->kind = Stmt::Kind::kSet;
    if (Cur().type == TokenType::kName &&
        Peek(1).type == TokenType::kOperator && Peek(1).text == ".") {
      s->targets.push_back(Cur().text);
      Next();
      Next();
      CKV_ASSIGN(attr, ExpectName());
      s->attr = attr;
    } else {
      CKV_ASSIGN(targets, ParseTargets());
      s->targets = std::move(targets);
    }
    if (SkipOp("=")) {
      CKV_ASSIGN(value, ParseTuple(true));
      s->expr = std::move(value);
      CKV_TRY(ExpectBlockEnd());
      return s;
    }
    if (!s->attr.empty() || s->targets.size() != 1) {
      return Error("expected '='");
    }
    s->kind = Stmt::Kind::kSetBlock;
    CKV_TRY(ExpectBlockEnd());
    std::string end;
    CKV_ASSIGN(body, ParseBody({"endset"}, &end));
    s->body = std::move(body);
    CKV_TRY(ExpectBlockEnd());
    return s;
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseMacro(std::unique_ptr<Stmt> s) {
    s->kind = Stmt::Kind::kMacro;
    CKV_ASSIGN(name, ExpectName());
    s->name = name;
    CKV_TRY(ExpectOp("("));
    while (!IsOp(")")) {
      CKV_ASSIGN(param, ExpectName());
      s->params.push_back(param);
      ExprPtr def;
      if (SkipOp("=")) {
        CKV_ASSIGN(d, ParseExpression());
        def = std::move(d);
      } else if (!s->defaults.empty() && s->defaults.back()) {
        return Error("non-default argument follows default argument");
      }
      s->defaults.push_back(std::move(def));
      if (!SkipOp(",")) break;
    }
    CKV_TRY(ExpectOp(")"));
    CKV_TRY(ExpectBlockEnd());
    std::string end;
    CKV_ASSIGN(body, ParseBody({"endmacro"}, &end));
    s->body = std::move(body);
    if (Cur().type == TokenType::kName) Next();  // {% endmacro name %}
    CKV_TRY(ExpectBlockEnd());
    return s;
  }

  // ---- expressions ----

  bool AtTupleEnd() const {
    return Cur().type == TokenType::kVarEnd ||
           Cur().type == TokenType::kBlockEnd || IsOp(")") || IsName("if") ||
           IsName("recursive");
  }

  absl::StatusOr<ExprPtr> ParseTuple(bool with_condexpr) {
    auto one = [&]() -> absl::StatusOr<ExprPtr> {
      return with_condexpr ? ParseExpression() : ParseOr();
    };
    CKV_ASSIGN(first, one());
    if (!IsOp(",")) return first;
    ExprPtr tuple = Make(Expr::Kind::kTuple);
    CKV_TRY(Add(tuple.get(), std::move(first)));
    while (SkipOp(",")) {
      if (AtTupleEnd()) break;
      CKV_ASSIGN(item, one());
      CKV_TRY(Add(tuple.get(), std::move(item)));
    }
    return tuple;
  }

  absl::StatusOr<ExprPtr> ParseExpression() {
    DepthGuard guard(this);
    CKV_TRY(guard.Check());
    CKV_ASSIGN(expr, ParseOr());
    while (SkipName("if")) {
      ExprPtr cond = Make(Expr::Kind::kCondition);
      CKV_ASSIGN(test, ParseOr());
      CKV_TRY(Add(cond.get(), std::move(test)));
      CKV_TRY(Add(cond.get(), std::move(expr)));
      if (SkipName("else")) {
        CKV_ASSIGN(other, ParseExpression());
        CKV_TRY(Add(cond.get(), std::move(other)));
      } else {
        cond->args.push_back(nullptr);
      }
      expr = std::move(cond);
    }
    return expr;
  }

  absl::StatusOr<ExprPtr> Binary(std::string op, ExprPtr left, ExprPtr right) {
    ExprPtr e = Make(Expr::Kind::kBinary);
    e->name = std::move(op);
    CKV_TRY(Add(e.get(), std::move(left)));
    CKV_TRY(Add(e.get(), std::move(right)));
    return e;
  }

  absl::StatusOr<ExprPtr> ParseOr() {
    CKV_ASSIGN(left, ParseAnd());
    while (SkipName("or")) {
      CKV_ASSIGN(right, ParseAnd());
      CKV_ASSIGN(e, Binary("or", std::move(left), std::move(right)));
      left = std::move(e);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    CKV_ASSIGN(left, ParseNot());
    while (SkipName("and")) {
      CKV_ASSIGN(right, ParseNot());
      CKV_ASSIGN(e, Binary("and", std::move(left), std::move(right)));
      left = std::move(e);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (!IsName("not")) return ParseCompare();
    DepthGuard guard(this);
    CKV_TRY(guard.Check());
    ExprPtr e = Make(Expr::Kind::kUnary);
    e->name = "not";
    Next();
    CKV_ASSIGN(operand, ParseNot());
    CKV_TRY(Add(e.get(), std::move(operand)));
    return e;
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    CKV_ASSIGN(left, ParseMath1());
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (Cur().type == TokenType::kOperator &&
          (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" ||
           Cur().text == "<=" || Cur().text == ">" || Cur().text == ">=")) {
        op = Cur().text;
        Next();
      } else if (IsName("in")) {
        op = "in";
        Next();
      } else if (IsName("not") && Peek(1).type == TokenType::kName &&
                 Peek(1).text == "in") {
        op = "not in";
        Next();
        Next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = Make(Expr::Kind::kCompare);
        CKV_TRY(Add(cmp.get(), std::move(left)));
      }
      CKV_ASSIGN(right, ParseMath1());
      cmp->ops.push_back(op);
      CKV_TRY(Add(cmp.get(), std::move(right)));
    }
    return cmp ? std::move(cmp) : std::move(left);
  }

  absl::StatusOr<ExprPtr> ParseMath1() {
    CKV_ASSIGN(left, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      std::string op = Cur().text;
      Next();
      CKV_ASSIGN(right, ParseConcat());
      CKV_ASSIGN(e, Binary(op, std::move(left), std::move(right)));
      left = std::move(e);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseConcat() {
    CKV_ASSIGN(left, ParseMath2());
    while (SkipOp("~")) {
      CKV_ASSIGN(right, ParseMath2());
      CKV_ASSIGN(e, Binary("~", std::move(left), std::move(right)));
      left = std::move(e);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseMath2() {
    CKV_ASSIGN(left, ParsePow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      std::string op = Cur().text;
      Next();
      CKV_ASSIGN(right, ParsePow());
      CKV_ASSIGN(e, Binary(op, std::move(left), std::move(right)));
      left = std::move(e);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParsePow() {
    CKV_ASSIGN(left, ParseUnary(true));
    while (SkipOp("**")) {
      CKV_ASSIGN(right, ParseUnary(true));
      CKV_ASSIGN(e, Binary("**", std::move(left), std::move(right)));
      left = std::move(e);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    DepthGuard guard(this);
    CKV_TRY(guard.Check());
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      node = Make(Expr::Kind::kUnary);
      node->name = Cur().text;
      Next();
      CKV_ASSIGN(operand, ParseUnary(false));
      CKV_TRY(Add(node.get(), std::move(operand)));
    } else {
      CKV_ASSIGN(primary, ParsePrimary());
      node = std::move(primary);
    }
    CKV_ASSIGN(post, ParsePostfix(std::move(node)));
    if (!with_filter) return post;
    return ParseFilterExpr(std::move(post));
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Cur();
    ExprPtr e = Make(Expr::Kind::kLiteral);
    switch (t.type) {
      case TokenType::kName:
        if (t.text == "true" || t.text == "True") {
          e->value = Value::Bool(true);
        } else if (t.text == "false" || t.text == "False") {
          e->value = Value::Bool(false);
        } else if (t.text == "none" || t.text == "None") {
          e->value = Value::None();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = t.text;
        }
        Next();
        return e;
      case TokenType::kString: {
        std::string s;
        while (Cur().type == TokenType::kString) {
          s += Cur().text;
          Next();
        }
        e->value = Value::String(std::move(s));
        return e;
      }
      case TokenType::kInt:
        e->value = Value::Int(t.int_value);
        Next();
        return e;
      case TokenType::kFloat:
        e->value = Value::Float(t.float_value);
        Next();
        return e;
      default:
        break;
    }
    if (SkipOp("(")) return ParseParenthesized();
    if (SkipOp("[")) return ParseSequence(Expr::Kind::kList, "]");
    if (SkipOp("{")) return ParseDictLiteral();
    return Error("unexpected token in expression");
  }

  absl::StatusOr<ExprPtr> ParseParenthesized() {
    if (SkipOp(")")) return Make(Expr::Kind::kTuple);
    CKV_ASSIGN(first, ParseExpression());
    if (SkipOp(")")) return first;
    CKV_TRY(ExpectOp(","));
    ExprPtr tuple = Make(Expr::Kind::kTuple);
    CKV_TRY(Add(tuple.get(), std::move(first)));
    while (!IsOp(")")) {
      CKV_ASSIGN(item, ParseExpression());
      CKV_TRY(Add(tuple.get(), std::move(item)));
      if (!SkipOp(",")) break;
    }
    CKV_TRY(ExpectOp(")"));
    return tuple;
  }

  absl::StatusOr<ExprPtr> ParseSequence(Expr::Kind kind,
                                        std::string_view close) {
    ExprPtr list = Make(kind);
    while (!IsOp(close)) {
      CKV_ASSIGN(item, ParseExpression());
      CKV_TRY(Add(list.get(), std::move(item)));
      if (!SkipOp(",")) break;
    }
    CKV_TRY(ExpectOp(close));
    return list;
  }

  absl::StatusOr<ExprPtr> ParseDictLiteral() {
    ExprPtr dict = Make(Expr::Kind::kDict);
    while (!IsOp("}")) {
      CKV_ASSIGN(key, ParseExpression());
      CKV_TRY(ExpectOp(":"));
      CKV_ASSIGN(value, ParseExpression());
      CKV_TRY(Add(dict.get(), std::move(key)));
      CKV_TRY(Add(dict.get(), std::move(value)));
      if (!SkipOp(",")) break;
    }
    CKV_TRY(ExpectOp("}"));
    return dict;
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      if (SkipOp(".")) {
        if (Cur().type == TokenType::kInt) {
          ExprPtr item = Make(Expr::Kind::kItem);
          ExprPtr index = Make(Expr::Kind::kLiteral);
          index->value = Value::Int(Cur().int_value);
          Next();
          CKV_TRY(Add(item.get(), std::move(node)));
          CKV_TRY(Add(item.get(), std::move(index)));
          node = std::move(item);
          continue;
        }
        ExprPtr attr = Make(Expr::Kind::kAttr);
        CKV_ASSIGN(name, ExpectName());
        attr->name = name;
        CKV_TRY(Add(attr.get(), std::move(node)));
        node = std::move(attr);
      } else if (SkipOp("[")) {
        CKV_ASSIGN(sub, ParseSubscript(std::move(node)));
        node = std::move(sub);
      } else if (IsOp("(")) {
        CKV_ASSIGN(call, ParseCall(std::move(node)));
        node = std::move(call);
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr target) {
    ExprPtr start;
    if (!IsOp(":")) {
      CKV_ASSIGN(index, ParseExpression());
      if (SkipOp("]")) {
        ExprPtr item = Make(Expr::Kind::kItem);
        CKV_TRY(Add(item.get(), std::move(target)));
        CKV_TRY(Add(item.get(), std::move(index)));
        return item;
      }
      start = std::move(index);
    }
    CKV_TRY(ExpectOp(":"));
    ExprPtr slice = Make(Expr::Kind::kSlice);
    CKV_TRY(Add(slice.get(), std::move(target)));
    CKV_TRY(Add(slice.get(), std::move(start)));
    ExprPtr stop, step;
    if (!IsOp("]") && !IsOp(":")) {
      CKV_ASSIGN(e, ParseExpression());
      stop = std::move(e);
    }
    if (SkipOp(":") && !IsOp("]")) {
      CKV_ASSIGN(e, ParseExpression());
      step = std::move(e);
    }
    CKV_TRY(Add(slice.get(), std::move(stop)));
    CKV_TRY(Add(slice.get(), std::move(step)));
    CKV_TRY(ExpectOp("]"));
    return slice;
  }

  // Parses "(args)" into node->args (after those already there) and kwargs.
  absl::Status ParseArgs(Expr* node) {
    CKV_TRY(ExpectOp("("));
    while (!IsOp(")")) {
      if (IsOp("*") || IsOp("**")) return Error("*args are not supported");
      if (Cur().type == TokenType::kName &&
          Peek(1).type == TokenType::kOperator && Peek(1).text == "=") {
        std::string key = Cur().text;
        Next();
        Next();
        CKV_ASSIGN(value, ParseExpression());
        node->height = std::max(node->height, value->height + 1);
        node->kwargs.emplace_back(std::move(key), std::move(value));
      } else {
        if (!node->kwargs.empty()) {
          return Error("positional argument follows keyword argument");
        }
        CKV_ASSIGN(value, ParseExpression());
        CKV_TRY(Add(node, std::move(value)));
      }
      if (!SkipOp(",")) break;
    }
    return ExpectOp(")");
  }

  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee) {
    ExprPtr call = Make(Expr::Kind::kCall);
    CKV_TRY(Add(call.get(), std::move(callee)));
    CKV_TRY(ParseArgs(call.get()));
    return call;
  }

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (SkipOp("|")) {
        ExprPtr f = Make(Expr::Kind::kFilter);
        CKV_ASSIGN(name, ExpectName());
        f->name = name;
        if (!IsKnownFilter(f->name)) {
          return Error(absl::StrCat("no filter named '", f->name, "'"));
        }
        CKV_TRY(Add(f.get(), std::move(node)));
        if (IsOp("(")) CKV_TRY(ParseArgs(f.get()));
        node = std::move(f);
      } else if (SkipName("is")) {
        ExprPtr t = Make(Expr::Kind::kTest);
        t->negated = SkipName("not");
        CKV_ASSIGN(name, ExpectName());
        t->name = name;
        if (!IsKnownTest(t->name)) {
          return Error(absl::StrCat("no test named '", t->name, "'"));
        }
        CKV_TRY(Add(t.get(), std::move(node)));
        if (IsOp("(")) {
          CKV_TRY(ParseArgs(t.get()));
        } else if (StartsTestArgument()) {
          CKV_ASSIGN(arg, ParsePrimary());
          CKV_ASSIGN(post, ParsePostfix(std::move(arg)));
          CKV_TRY(Add(t.get(), std::move(post)));
        }
        node = std::move(t);
      } else if (IsOp("(")) {
        CKV_ASSIGN(call, ParseCall(std::move(node)));
        node = std::move(call);
      } else {
        return node;
      }
    }
  }

  bool StartsTestArgument() const {
    const Token& t = Cur();
    if (t.type == TokenType::kName) {
      return t.text != "else" && t.text != "or" && t.text != "and" &&
             t.text != "is" && t.text != "if" && t.text != "in" &&
             t.text != "not";
    }
    return t.type == TokenType::kString || t.type == TokenType::kInt ||
           t.type == TokenType::kFloat || IsOp("[") || IsOp("{");
  }

  const std::vector<Token>& toks_;
  size_t pos_ = 0;
  int max_nesting_;
  int depth_ = 0;
};

}  // namespace

absl::StatusOr<Body> Parse(const std::vector<Token>& tokens, int max_nesting) {
  if (tokens.empty()) return Body{};
  return Parser(tokens, max_nesting).ParseTemplate();
}

}  // namespace ckv::chat
