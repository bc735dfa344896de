// Syntax tree of a parsed chat template (see parser.h).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/chat/value.h"

namespace ckv::chat {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // value
    kName,      // name
    kList,      // args
    kTuple,     // args
    kDict,      // args: key, value, key, value, ...
    kAttr,      // args[0].name
    kItem,      // args[0][args[1]]
    kSlice,     // args[0][args[1]:args[2]:args[3]] (null parts omitted)
    kCall,      // args[0](args[1:], kwargs)
    kFilter,    // args[0] | name(args[1:], kwargs)
    kTest,      // args[0] is [not] name(args[1:], kwargs)
    kUnary,     // op args[0]: "-", "+" or "not"
    kBinary,    // args[0] op args[1]: arithmetic, "~", "and", "or"
    kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ... (chained)
    kCondition  // args[1] if args[0] else args[2] (args[2] may be null)
  };
  Kind kind;
  int line = 0;
  int height = 1;  // longest path to a leaf, counting this node
  Value value;
  std::string name;  // name, attribute, filter, test or operator
  bool negated = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // conditions[i] -> bodies[i]; else_body
    kFor,       // for targets in expr [if filter]: body [else else_body]
    kSet,       // set targets (or ns.attr: attr) = expr
    kSetBlock,  // set targets[0]: body
    kMacro,     // macro name(params = defaults): body
    kBreak,
    kContinue,
    kScopedBody,  // generation / filter-less blocks: body rendered as is
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  std::vector<std::string> targets;
  std::string attr;  // set ns.attr
  std::string name;  // macro name
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // per param, null when none
};

}  // namespace ckv::chat
