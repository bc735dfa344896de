#include "model/kv/snapshot_settings.h"

#include <cstring>
#include <limits>
#include <map>
#include <type_traits>
#include <variant>

#include "absl/strings/str_cat.h"
#include "model/kv/checksum.h"

namespace ckv::snapshot_settings {
namespace {

// ------------------------------------------------------------- encoding

class Writer {
 public:
  void Entry(const char* name, int64_t v) { Head(name, 'i', &v, sizeof(v)); }
  void Entry(const char* name, uint64_t v) { Head(name, 'u', &v, sizeof(v)); }
  void Entry(const char* name, double v) { Head(name, 'f', &v, sizeof(v)); }
  void Entry(const char* name, const std::string& v) {
    const uint32_t n = static_cast<uint32_t>(v.size());
    Head(name, 's', &n, sizeof(n));
    out_.append(v);
  }
  // A setting of the schema, by its C++ type.
  template <class T>
  void Setting(const char* name, T v) {
    if constexpr (std::is_floating_point_v<T>) {
      Entry(name, static_cast<double>(v));
    } else if constexpr (std::is_same_v<T, uint64_t>) {
      Entry(name, v);
    } else {
      Entry(name, static_cast<int64_t>(v));
    }
  }
  std::string Finish() const {
    std::string record(sizeof(uint32_t), '\0');
    std::memcpy(record.data(), &count_, sizeof(count_));
    return record + out_;
  }

 private:
  void Head(const char* name, char kind, const void* value, size_t n) {
    const uint32_t len = static_cast<uint32_t>(std::strlen(name));
    out_.append(reinterpret_cast<const char*>(&len), sizeof(len));
    out_.append(name, len);
    out_.push_back(kind);
    out_.append(static_cast<const char*>(value), n);
    ++count_;
  }
  std::string out_;
  uint32_t count_ = 0;
};

// ------------------------------------------------------------- decoding

using Value = std::variant<int64_t, uint64_t, double, std::string>;

absl::Status Corrupt(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("corrupt snapshot: ", what));
}

// Reads the record into name -> value; every length is checked against the
// bytes that remain.
absl::StatusOr<std::map<std::string, Value>> ReadRecord(
    absl::string_view bytes, absl::string_view what) {
  size_t pos = 0;
  auto take = [&](void* dst, size_t n) {
    if (n > bytes.size() - pos) return false;
    std::memcpy(dst, bytes.data() + pos, n);
    pos += n;
    return true;
  };
  auto truncated = [&] {
    return Corrupt(absl::StrCat(what, " settings record truncated"));
  };
  uint32_t count = 0;
  if (!take(&count, sizeof(count))) return truncated();
  std::map<std::string, Value> values;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t len = 0;
    if (!take(&len, sizeof(len)) || len > bytes.size() - pos) {
      return truncated();
    }
    std::string name(bytes.substr(pos, len));
    pos += len;
    char kind = 0;
    if (!take(&kind, 1)) return truncated();
    Value v;
    bool ok = true;
    switch (kind) {
      case 'i': {
        int64_t x = 0;
        ok = take(&x, sizeof(x));
        v = x;
        break;
      }
      case 'u': {
        uint64_t x = 0;
        ok = take(&x, sizeof(x));
        v = x;
        break;
      }
      case 'f': {
        double x = 0;
        ok = take(&x, sizeof(x));
        v = x;
        break;
      }
      case 's': {
        uint32_t n = 0;
        ok = take(&n, sizeof(n)) && n <= bytes.size() - pos;
        if (ok) v = std::string(bytes.substr(pos, n));
        if (ok) pos += n;
        break;
      }
      default:
        return Corrupt(absl::StrCat(what, " setting '", name.substr(0, 64),
                                    "' has an unknown kind"));
    }
    if (!ok) return truncated();
    if (!values.emplace(std::move(name), std::move(v)).second) {
      return Corrupt(absl::StrCat(what, " setting repeated"));
    }
  }
  if (pos != bytes.size()) {
    return Corrupt(absl::StrCat(what, " settings record has trailing bytes"));
  }
  return values;
}

// Takes the entries of a record by name; the first error sticks.
class Reader {
 public:
  Reader(std::map<std::string, Value> values, absl::string_view what)
      : values_(std::move(values)), what_(what) {}

  // Sets *dst from the entry `name` when there is one.
  template <class T>
  void Setting(const char* name, T* dst) {
    const Value* v = Take(name);
    if (v == nullptr) return;
    if constexpr (std::is_floating_point_v<T>) {
      const double* x = std::get_if<double>(v);
      if (x == nullptr) return Fail(name);
      *dst = static_cast<T>(*x);
    } else if constexpr (std::is_same_v<T, uint64_t>) {
      const uint64_t* x = std::get_if<uint64_t>(v);
      if (x == nullptr) return Fail(name);
      *dst = *x;
    } else {
      const int64_t* x = std::get_if<int64_t>(v);
      using Limits = std::numeric_limits<T>;
      if (x == nullptr || *x < static_cast<int64_t>(Limits::lowest()) ||
          *x > static_cast<int64_t>(Limits::max())) {
        return Fail(name);
      }
      *dst = static_cast<T>(*x);
    }
  }
  // The named setting `name` (ParseSettingValue).
  template <class E>
  void Named(const char* name, E* dst) {
    const Value* v = Take(name);
    if (v == nullptr) return;
    const std::string* s = std::get_if<std::string>(v);
    if (s == nullptr) return Fail(name);
    E e{};
    if (auto st = ParseSettingValue(*s, &e); !st.ok()) {
      if (status_.ok()) {
        status_ = absl::FailedPreconditionError(
            absl::StrCat("snapshot does not fit this server: ", what_,
                         " setting ", name, ": ", st.message()));
      }
      return;
    }
    *dst = e;
  }
  // OK, or the first error; FAILED_PRECONDITION for a name left unread.
  absl::Status Finish() const {
    if (!status_.ok() || values_.empty()) return status_;
    return absl::FailedPreconditionError(
        absl::StrCat("snapshot does not fit this server: its ", what_,
                     " setting '", values_.begin()->first.substr(0, 64),
                     "' is unknown here (written by a newer version?)"));
  }

 private:
  const Value* Take(const char* name) {
    auto it = values_.find(name);
    if (it == values_.end()) return nullptr;
    taken_ = std::move(it->second);
    values_.erase(it);
    return &taken_;
  }
  void Fail(const char* name) {
    if (status_.ok()) {
      status_ = Corrupt(absl::StrCat(what_, " setting ", name,
                                     " has the wrong kind or does not fit"));
    }
  }

  std::map<std::string, Value> values_;
  Value taken_;
  std::string what_;
  absl::Status status_;
};

}  // namespace

std::string EncodeKv(const KvStoreConfig& c) {
  Writer w;
#define CKV_PUT_NAMED(name, ...) \
  w.Entry(#name, std::string(SettingValueName(c.name)));
#define CKV_PUT(name, ...) w.Setting(#name, c.name);
  CKV_KV_WIRE_NAMES(CKV_PUT_NAMED)
  CKV_KV_ENGINE_NAMES(CKV_PUT_NAMED)
  CKV_KV_WIRE_NUMBERS(CKV_PUT)
  CKV_KV_ENGINE_NUMBERS(CKV_PUT)
#undef CKV_PUT
#undef CKV_PUT_NAMED
  return w.Finish();
}

absl::Status DecodeKv(absl::string_view record, KvStoreConfig* c) {
  auto values = ReadRecord(record, "KV");
  if (!values.ok()) return values.status();
  Reader r(*std::move(values), "KV");
#define CKV_GET_NAMED(name, ...) r.Named(#name, &c->name);
#define CKV_GET(name, ...) r.Setting(#name, &c->name);
  CKV_KV_WIRE_NAMES(CKV_GET_NAMED)
  CKV_KV_ENGINE_NAMES(CKV_GET_NAMED)
  CKV_KV_WIRE_NUMBERS(CKV_GET)
  CKV_KV_ENGINE_NUMBERS(CKV_GET)
#undef CKV_GET
#undef CKV_GET_NAMED
  return r.Finish();
}

std::string EncodeSampling(const SamplingParams& s) {
  Writer w;
#define CKV_PUT(name, ...) w.Setting(#name, s.name);
  CKV_SAMPLING_NUMBERS(CKV_PUT)
#undef CKV_PUT
  return w.Finish();
}

absl::Status DecodeSampling(absl::string_view record, SamplingParams* s) {
  auto values = ReadRecord(record, "sampling");
  if (!values.ok()) return values.status();
  Reader r(*std::move(values), "sampling");
#define CKV_GET(name, ...) r.Setting(#name, &s->name);
  CKV_SAMPLING_NUMBERS(CKV_GET)
#undef CKV_GET
  return r.Finish();
}

uint64_t LayoutFingerprint(uint64_t h, const KvShape& shape,
                           const KvStoreConfig& c) {
  auto add = [&h](const char* name, const std::string& value) {
    h = Fnv1a64(h, name, std::strlen(name) + 1);
    h = Fnv1a64(h, value.data(), value.size() + 1);
  };
  for (int32_t v :
       {shape.n_layers, shape.n_heads, shape.n_kv_heads, shape.head_dim}) {
    h = Fnv1a64(h, &v, sizeof(v));
  }
  // The policy and build_all_indexes decide which indexes are stored.
  add("policy", KvPolicyName(c.policy));
  add("build_all_indexes", absl::StrCat(c.build_all_indexes));
#define CKV_LAYOUT(name, fork, value) \
  if (fork == settings::Fork::kLayout) add(#name, value);
#define CKV_NUMBER(name, type, range, fork, help) \
  CKV_LAYOUT(name, fork, absl::StrCat(c.name))
#define CKV_NAMED(name, fork, help) \
  CKV_LAYOUT(name, fork, SettingValueName(c.name))
  CKV_KV_WIRE_NUMBERS(CKV_NUMBER)
  CKV_KV_ENGINE_NUMBERS(CKV_NUMBER)
  CKV_KV_WIRE_NAMES(CKV_NAMED)
  CKV_KV_ENGINE_NAMES(CKV_NAMED)
#undef CKV_NAMED
#undef CKV_NUMBER
#undef CKV_LAYOUT
  return h;
}

// ----------------------------------------------------- format version 1

absl::Status DecodeKvV1(const KvIntsV1& v, uint64_t seed, int64_t max_tokens,
                        KvStoreConfig* c) {
  auto in = [](int32_t x, int32_t lo, int32_t hi) {
    return x >= lo && x <= hi;
  };
  const int32_t dtype = v[12];
  if (!IsRegisteredPolicy(static_cast<KvPolicy>(v[0])) || !in(v[7], 0, 1) ||
      !in(v[8], 0, 1) || !in(v[13], 0, 2) || !in(v[14], 0, 1) ||
      !in(v[15], 0, 1) ||
      (dtype != static_cast<int32_t>(kernels::DType::kF16) &&
       dtype != static_cast<int32_t>(kernels::DType::kBF16))) {
    return Corrupt("KV config enum out of range");
  }
  c->policy = static_cast<KvPolicy>(v[0]);
  c->budget = v[1];
  c->sink_tokens = v[2];
  c->tokens_per_cluster = v[3];
  c->window = v[4];
  c->kmeans_max_iters = v[5];
  c->cache_steps = v[6];
  c->cache_mode = static_cast<CacheMode>(v[7]);
  c->gqa_selection = static_cast<GqaSelection>(v[8]);
  c->recent_tokens = v[9];
  c->dense_layers = v[10];
  c->quest_page_size = v[11];
  c->kv_dtype = static_cast<kernels::DType>(dtype);
  c->metric = static_cast<ClusterMetric>(v[13]);
  c->async_clustering = v[14] != 0;
  c->build_all_indexes = v[15] != 0;
  c->seed = seed;
  c->max_tokens = max_tokens;
  return absl::OkStatus();
}

uint64_t StoreFingerprintV1(const KvShape& shape, const KvStoreConfig& c) {
  const std::array<int64_t, 15> fields = {1,  // the format version
                                          shape.n_layers,
                                          shape.n_heads,
                                          shape.n_kv_heads,
                                          shape.head_dim,
                                          static_cast<int64_t>(c.policy),
                                          c.sink_tokens,
                                          c.tokens_per_cluster,
                                          c.window,
                                          c.kmeans_max_iters,
                                          c.dense_layers,
                                          c.quest_page_size,
                                          static_cast<int64_t>(c.kv_dtype),
                                          static_cast<int64_t>(c.metric),
                                          c.build_all_indexes};
  const uint64_t h = Fnv1a64(kFnvOffset, fields.data(), sizeof(fields));
  return Fnv1a64(h, &c.seed, sizeof(c.seed));
}

}  // namespace ckv::snapshot_settings
