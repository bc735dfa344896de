// Values of the chat-template interpreter: the Python objects a Jinja2
// template sees (undefined, None, bool, int, float, str, list/tuple, dict,
// namespace, callable), with Python's truthiness, equality, ordering, str()
// and repr(), and json.dumps as transformers' `tojson` calls it.
//
// Strings, lists and dicts are immutable once built (as in Jinja's immutable
// sandbox) and shared by pointer, so copying a Value is cheap and no value
// can reach itself. Namespaces, the only mutable objects, are owned by the
// render that created them and referenced by raw pointer.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace ckv::chat {

class Value;
struct Dict;
struct Callable;

using List = std::vector<Value>;

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable
  };

  Value() = default;  // undefined
  static Value Undefined(std::string name = "");
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  static Value MakeList(List items, bool is_tuple = false);
  static Value MakeDict(Dict d);
  static Value Namespace(Dict* ns);
  static Value Function(
      std::string name,
      std::function<absl::StatusOr<Value>(
          std::vector<Value>, std::vector<std::pair<std::string, Value>>)>
          fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_number() const {
    return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
  }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }

  bool bool_value() const { return i_ != 0; }
  // Int or bool as an integer.
  int64_t int_value() const { return i_; }
  // Any number as a double.
  double number() const {
    return kind_ == Kind::kFloat ? f_ : static_cast<double>(i_);
  }
  const std::string& str() const { return Get<std::string>(); }
  const List& list() const { return Get<List>(); }
  const Dict& dict() const { return Get<Dict>(); }
  Dict* ns() const { return ns_; }
  const Callable& callable() const { return Get<Callable>(); }
  // Name of an undefined value (for error messages), may be empty.
  const std::string& undefined_name() const;
  // Container nesting (0 for scalars) and weight: about the bytes the value
  // would take written out as a tree (kItemWeight per value plus string
  // bytes; shared parts counted each time they appear). Repr, ToJson and
  // Equals cost O(weight).
  static constexpr int64_t kItemWeight = 48;
  int depth() const { return depth_; }
  int64_t weight() const { return weight_; }

  // Python bool(x).
  bool Truthy() const;
  // Python str(x); undefined renders as "".
  std::string ToString() const;
  // Python repr(x). A namespace inside another value prints as
  // "<Namespace>" (namespaces may refer to each other).
  std::string Repr() const;
  // Python type name, for error messages.
  std::string TypeName() const;

 private:
  std::string ReprNested(bool nested) const;

  template <typename T>
  const T& Get() const {
    return *static_cast<const T*>(obj_.get());
  }

  Kind kind_ = Kind::kUndefined;
  bool tuple_ = false;
  int depth_ = 0;
  int64_t weight_ = kItemWeight;
  union {
    int64_t i_ = 0;
    double f_;
    Dict* ns_;
  };
  // The string (also an undefined value's name), list, dict or callable.
  std::shared_ptr<const void> obj_;
};

// An insertion-ordered Python dict. Keys are scalars (str, int, float, bool,
// None); 1, 1.0 and True are the same key, as in Python. Small dicts are
// searched linearly; larger ones keep an index.
struct Dict {
  std::vector<std::pair<Value, Value>> entries;
  // Key identity -> entry, only once entries.size() > kIndexFrom.
  absl::flat_hash_map<std::string, size_t> index;
  static constexpr size_t kIndexFrom = 16;

  // Inserts or replaces; error when the key is not hashable.
  absl::Status Set(const Value& key, Value value);
  // nullptr when absent.
  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
};

struct Callable {
  std::string name;
  std::function<absl::StatusOr<Value>(
      std::vector<Value>, std::vector<std::pair<std::string, Value>>)>
      fn;
};

// Python a == b.
bool Equals(const Value& a, const Value& b);
// Python a < b; TypeError for kinds Python cannot order.
absl::StatusOr<bool> Less(const Value& a, const Value& b);

struct JsonOptions {
  int indent = -1;  // < 0: None (separators ", " and ": ")
  bool ensure_ascii = false;
  bool sort_keys = false;
};
// json.dumps(v, indent=..., ensure_ascii=..., sort_keys=...). TypeError for
// undefined, namespaces and callables.
absl::StatusOr<std::string> ToJson(const Value& v,
                                   const JsonOptions& options = {});

// Python float repr (shortest round-trip form: 1.0, 0.1, 1e+16, inf, nan).
std::string FloatRepr(double d);

// Builds a value from JSON text (objects keep their key order).
absl::StatusOr<Value> ValueFromJson(std::string_view json_text);

}  // namespace ckv::chat
