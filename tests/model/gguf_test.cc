// Tests of the GGUF reader (model/gguf/gguf.h) against the writer
// (model/gguf/gguf_writer.h) and against hand-built hostile files; real
// files from llama.cpp are in gguf_fixture_test.cc.

#include "model/gguf/gguf.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/gguf/gguf_writer.h"

namespace ckv::gguf {
namespace {

using kernels::DType;
using Bytes = std::vector<uint8_t>;

// Little-endian byte builder for hand-made (usually invalid) files.
class Raw {
 public:
  Raw& U32(uint32_t v) { return Pod(v); }
  Raw& U64(uint64_t v) { return Pod(v); }
  Raw& Append(const Bytes& b) {
    b_.insert(b_.end(), b.begin(), b.end());
    return *this;
  }
  Raw& Str(const std::string& s) {
    return U64(s.size()).Append({s.begin(), s.end()});
  }
  Raw& Header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    return U32(0x46554747).U32(version).U64(n_tensors).U64(n_kv);
  }
  // One tensor info record.
  Raw& Tensor(const std::string& name, const std::vector<uint64_t>& dims,
              uint32_t type, uint64_t offset) {
    Str(name).U32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) U64(d);
    return U32(type).U64(offset);
  }
  Raw& Zeros(size_t n) { return Append(Bytes(n)); }
  Raw& PadTo(size_t align) {
    return Zeros((align - b_.size() % align) % align);
  }
  const Bytes& bytes() const { return b_; }

 private:
  template <typename T>
  Raw& Pod(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    return Append(Bytes(p, p + sizeof(T)));
  }
  Bytes b_;
};

absl::StatusOr<std::unique_ptr<GgufFile>> Parse(const Bytes& b,
                                                const ReaderLimits& l = {}) {
  return GgufFile::FromBuffer(b.data(), b.size(), l);
}

// Passes when parsing fails with INVALID_ARGUMENT and a message containing
// `what`.
::testing::AssertionResult Rejects(const Bytes& b, const std::string& what,
                                   const ReaderLimits& l = {}) {
  auto f = Parse(b, l);
  if (f.ok()) return ::testing::AssertionFailure() << "parsed OK";
  if (f.status().code() != absl::StatusCode::kInvalidArgument ||
      !absl::StrContains(f.status().message(), what)) {
    return ::testing::AssertionFailure()
           << "status " << f.status() << " lacks '" << what << "'";
  }
  return ::testing::AssertionSuccess();
}

Bytes Iota(size_t n, uint8_t start = 1) {
  Bytes b(n);
  std::iota(b.begin(), b.end(), start);
  return b;
}

// A scalar value of type t.
Value Make(ValueType t, int64_t i, double f = 0) {
  Value v;
  v.type = t;
  v.i = i;
  v.f = f;
  return v;
}

// An array of element type `elem`; fill the vector that matches `elem`.
Value Array(ValueType elem, std::vector<int64_t> ints,
            std::vector<double> floats = {},
            std::vector<std::string> strings = {},
            std::vector<Value> arrays = {}) {
  Value v;
  v.type = ValueType::kArray;
  v.elem_type = elem;
  v.ints = std::move(ints);
  v.floats = std::move(floats);
  v.strings = std::move(strings);
  v.arrays = std::move(arrays);
  return v;
}

// A writer holding one value of every scalar type and a range of arrays.
GgufWriter AllTypesWriter() {
  GgufWriter w;
  w.Set("u8", Make(ValueType::kUint8, 255));
  w.Set("i8", Make(ValueType::kInt8, -128));
  w.Set("u16", Make(ValueType::kUint16, 65535));
  w.Set("i16", Make(ValueType::kInt16, -32768));
  w.Set("u32", Make(ValueType::kUint32, 0xffffffffLL));
  w.Set("i32", Make(ValueType::kInt32, std::numeric_limits<int32_t>::min()));
  w.Set("u64", Make(ValueType::kUint64, -1));  // bit pattern 0xff..ff
  w.Set("i64", Make(ValueType::kInt64, std::numeric_limits<int64_t>::min()));
  w.Set("f32", Make(ValueType::kFloat32, 0, -1.5));
  w.Set("f64", Make(ValueType::kFloat64, 0, 3.141592653589793));
  w.SetBool("yes", true);
  w.SetBool("no", false);
  w.SetString("str", "h\xc3\xa9llo");
  w.SetString("empty", "");
  w.SetString("nul", std::string("a\0b", 3));
  w.Set("a_u8", Array(ValueType::kUint8, {0, 7, 255}));
  w.Set("a_i8", Array(ValueType::kInt8, {-128, 127}));
  w.Set("a_u16", Array(ValueType::kUint16, {65535}));
  w.Set("a_i16", Array(ValueType::kInt16, {-32768, 1}));
  w.Set("a_u32", Array(ValueType::kUint32, {0xffffffffLL}));
  w.SetInt32Array("a_i32", {-1, 0, 1 << 30});
  w.Set("a_u64", Array(ValueType::kUint64, {-1, 42}));
  w.Set("a_i64",
        Array(ValueType::kInt64, {std::numeric_limits<int64_t>::max()}));
  w.Set("a_bool", Array(ValueType::kBool, {1, 0, 1}));
  w.SetFloat32Array("a_f32", {0.25, -2.0});
  w.Set("a_f64", Array(ValueType::kFloat64, {}, {1e300, -1e-300}));
  w.SetStringArray("a_str", {"x", "", "long string value"});
  w.SetInt32Array("a_empty", {});
  // [[1, 2], [], [3]] of int32, then [["a"], ["b", "c"]]
  w.Set("a_nested",
        Array(ValueType::kArray, {}, {}, {},
              {Array(ValueType::kInt32, {1, 2}), Array(ValueType::kInt32, {}),
               Array(ValueType::kInt32, {3})}));
  const Value a = Array(ValueType::kString, {}, {}, {"a"});
  const Value bc = Array(ValueType::kString, {}, {}, {"b", "c"});
  w.Set("a_nested_str", Array(ValueType::kArray, {}, {}, {}, {a, bc}));
  return w;
}

void ExpectAllTypes(const GgufFile& f) {
  const auto& m = f.metadata();
  EXPECT_EQ(m.size(), 30u);
  // "u64" holds uint64 max: all bits set, i.e. -1 as int64.
  const std::pair<const char*, int64_t> ints[] = {
      {"u8", 255},           {"i8", -128},
      {"u16", 65535},        {"i16", -32768},
      {"u32", 0xffffffffLL}, {"i32", std::numeric_limits<int32_t>::min()},
      {"u64", -1},           {"i64", std::numeric_limits<int64_t>::min()}};
  for (const auto& [key, want] : ints) EXPECT_EQ(m.at(key).i, want) << key;
  EXPECT_EQ(m.at("u8").type, ValueType::kUint8);
  EXPECT_EQ(m.at("u64").type, ValueType::kUint64);
  EXPECT_EQ(m.at("f32").type, ValueType::kFloat32);
  EXPECT_EQ(m.at("f32").f, -1.5);
  EXPECT_EQ(m.at("f64").f, 3.141592653589793);
  EXPECT_EQ(m.at("yes").type, ValueType::kBool);
  EXPECT_EQ(*f.GetBool("yes"), true);
  EXPECT_EQ(*f.GetBool("no"), false);
  EXPECT_EQ(*f.GetString("str"), "h\xc3\xa9llo");
  EXPECT_EQ(*f.GetString("empty"), "");
  EXPECT_EQ(*f.GetString("nul"), std::string("a\0b", 3));

  EXPECT_EQ(m.at("a_u8").elem_type, ValueType::kUint8);
  EXPECT_EQ(m.at("a_u8").ints, (std::vector<int64_t>{0, 7, 255}));
  EXPECT_EQ(m.at("a_i8").ints, (std::vector<int64_t>{-128, 127}));
  EXPECT_EQ(m.at("a_u16").ints, (std::vector<int64_t>{65535}));
  EXPECT_EQ(m.at("a_i16").ints, (std::vector<int64_t>{-32768, 1}));
  EXPECT_EQ(m.at("a_u32").ints, (std::vector<int64_t>{0xffffffffLL}));
  EXPECT_EQ(**f.GetIntArray("a_i32"), (std::vector<int64_t>{-1, 0, 1 << 30}));
  EXPECT_EQ(m.at("a_u64").ints, (std::vector<int64_t>{-1, 42}));
  EXPECT_EQ(m.at("a_i64").ints,
            (std::vector<int64_t>{std::numeric_limits<int64_t>::max()}));
  EXPECT_EQ(m.at("a_bool").elem_type, ValueType::kBool);
  EXPECT_EQ(m.at("a_bool").ints, (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(**f.GetFloatArray("a_f32"), (std::vector<double>{0.25, -2.0}));
  EXPECT_EQ(**f.GetFloatArray("a_f64"), (std::vector<double>{1e300, -1e-300}));
  EXPECT_EQ(**f.GetStringArray("a_str"),
            (std::vector<std::string>{"x", "", "long string value"}));
  EXPECT_EQ(m.at("a_empty").array_size(), 0u);
  EXPECT_EQ(m.at("a_empty").elem_type, ValueType::kInt32);

  const Value& n = m.at("a_nested");
  EXPECT_EQ(n.elem_type, ValueType::kArray);
  ASSERT_EQ(n.arrays.size(), 3u);
  EXPECT_EQ(n.array_size(), 3u);
  EXPECT_EQ(n.arrays[0].type, ValueType::kArray);
  EXPECT_EQ(n.arrays[0].elem_type, ValueType::kInt32);
  EXPECT_EQ(n.arrays[0].ints, (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(n.arrays[1].ints.empty());
  EXPECT_EQ(n.arrays[2].ints, (std::vector<int64_t>{3}));
  const Value& ns = m.at("a_nested_str");
  ASSERT_EQ(ns.arrays.size(), 2u);
  EXPECT_EQ(ns.arrays[1].strings, (std::vector<std::string>{"b", "c"}));
}

// A small valid file with one tensor of each type. The last tensor's size is
// a multiple of the alignment, so the file has no trailing padding and every
// proper prefix of it is invalid.
GgufWriter TensorsWriter(uint64_t alignment = 32) {
  GgufWriter w(alignment);
  if (alignment != 32) w.SetUint32("general.alignment", alignment);
  w.SetString("general.architecture", "llama");
  w.SetInt32Array("ids", {1, 2, 3});
  w.AddTensor("f32", {3, 2}, DType::kF32, Iota(24));
  w.AddTensor("f16", {5}, DType::kF16, Iota(10, 50));
  w.AddTensor("bf16", {4, 3, 2}, DType::kBF16, Iota(48, 100));
  w.AddTensor("q8", {64, 2, 1, 1}, DType::kQ8_0, Iota(136, 7));  // 4 blocks
  w.AddTensor("last", {16}, DType::kF32, Iota(64, 9));
  return w;
}

void ExpectTensors(const GgufFile& f, const Bytes& file, uint64_t alignment) {
  EXPECT_EQ(f.alignment(), alignment);
  ASSERT_EQ(f.tensors().size(), 5u);
  struct Want {
    const char* name;
    std::vector<int64_t> dims;
    DType type;
    int64_t n_elements, n_bytes;
    Bytes bytes;
  };
  const Want want[] = {
      {"f32", {3, 2}, DType::kF32, 6, 24, Iota(24)},
      {"f16", {5}, DType::kF16, 5, 10, Iota(10, 50)},
      {"bf16", {4, 3, 2}, DType::kBF16, 24, 48, Iota(48, 100)},
      {"q8", {64, 2, 1, 1}, DType::kQ8_0, 128, 136, Iota(136, 7)},
      {"last", {16}, DType::kF32, 16, 64, Iota(64, 9)},
  };
  for (size_t i = 0; i < 5; ++i) {
    SCOPED_TRACE(want[i].name);
    const TensorInfo& t = f.tensors()[i];
    EXPECT_EQ(f.FindTensor(want[i].name), &t);
    EXPECT_EQ(t.name, want[i].name);
    EXPECT_EQ(t.dims, want[i].dims);
    EXPECT_EQ(t.type, want[i].type);
    EXPECT_EQ(t.n_elements, want[i].n_elements);
    EXPECT_EQ(t.n_bytes, want[i].n_bytes);
    EXPECT_EQ(t.rows(), t.n_elements / t.dims[0]);
    EXPECT_EQ(t.offset % alignment, 0u);
    ASSERT_NE(t.data, nullptr);
    const size_t at = static_cast<size_t>(t.data - file.data());
    EXPECT_EQ(at % alignment, 0u);
    ASSERT_LE(at + t.n_bytes, file.size());
    EXPECT_EQ(Bytes(t.data, t.data + t.n_bytes), want[i].bytes);
  }
  EXPECT_EQ(f.tensors()[3].rows(), 2);
  EXPECT_EQ(f.FindTensor("nope"), nullptr);
  // Without trailing padding the last tensor ends exactly at the end.
  if (alignment <= 64) {
    EXPECT_EQ(f.tensors()[4].data + 64, file.data() + file.size());
  }
}

// --------------------------------------------------------------- round trip

TEST(GgufRoundTrip, EveryValueTypeV3AndV2) {
  for (uint8_t version : {3, 2}) {
    Bytes b = AllTypesWriter().Serialize();
    b[4] = version;  // the v2 layout equals v3 (64-bit counts)
    auto f = Parse(b);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ((*f)->version(), version);
    EXPECT_EQ((*f)->alignment(), 32u);
    EXPECT_TRUE((*f)->tensors().empty());
    ExpectAllTypes(**f);
  }
}

TEST(GgufRoundTrip, EmptyFile) {
  const Bytes b = GgufWriter().Serialize();
  EXPECT_EQ(b.size(), 32u);  // 24-byte header padded to the alignment
  auto f = Parse(b);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE((*f)->metadata().empty());
  EXPECT_TRUE((*f)->tensors().empty());
  // Without tensors the padding is optional.
  EXPECT_TRUE(Parse(Raw().Header(3, 0, 0).bytes()).ok());
}

TEST(GgufRoundTrip, TensorsOfEveryTypeV3AndV2) {
  for (uint8_t version : {3, 2}) {
    Bytes b = TensorsWriter().Serialize();
    b[4] = version;  // the v2 layout equals v3
    auto f = Parse(b);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ((*f)->version(), version);
    EXPECT_EQ(*(*f)->GetString("general.architecture"), "llama");
    ExpectTensors(**f, b, 32);
  }
}

TEST(GgufRoundTrip, CustomAlignment) {
  for (uint64_t align : {1u, 8u, 64u, 4096u}) {
    SCOPED_TRACE(align);
    const Bytes b = TensorsWriter(align).Serialize();
    auto f = Parse(b);
    ASSERT_TRUE(f.ok()) << f.status();
    ExpectTensors(**f, b, align);
    EXPECT_EQ(*(*f)->GetInt("general.alignment"), static_cast<int64_t>(align));
  }
}

TEST(GgufGetters, ConversionsAndErrors) {
  const Bytes b = AllTypesWriter().Serialize();
  auto parsed = Parse(b);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const GgufFile& f = **parsed;
  EXPECT_TRUE(f.Has("u8"));
  EXPECT_FALSE(f.Has("absent"));
  EXPECT_EQ(f.Find("absent"), nullptr);
  EXPECT_EQ(*f.GetInt("u64"), -1);  // uint64 keeps its bit pattern
  EXPECT_EQ(*f.GetInt("u32"), 0xffffffffLL);
  EXPECT_EQ(*f.GetInt("yes"), 1);        // bool is an integer type
  EXPECT_EQ(*f.GetFloat("i8"), -128.0);  // any number converts to float
  EXPECT_EQ(*f.GetFloat("f32"), -1.5);
  EXPECT_EQ(*f.GetBool("u8"), true);
  EXPECT_EQ(**f.GetIntArray("a_bool"), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_STREQ(ValueTypeName(static_cast<ValueType>(13)), "unknown");

  for (const absl::Status& st :
       {f.GetString("absent").status(), f.GetInt("absent").status(),
        f.GetFloat("absent").status(), f.GetBool("absent").status(),
        f.GetStringArray("absent").status(), f.GetIntArray("absent").status(),
        f.GetFloatArray("absent").status()}) {
    EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
    EXPECT_TRUE(absl::StrContains(st.message(), "missing GGUF key 'absent'"))
        << st;
  }

  struct Bad {
    absl::Status status;
    const char* want;
  };
  const Bad bad[] = {
      {f.GetString("u32").status(), "'u32' is uint32, expected string"},
      {f.GetInt("f32").status(), "'f32' is float32, expected integer"},
      {f.GetInt("str").status(), "is string, expected integer"},
      {f.GetFloat("str").status(), "'str' is string, expected number"},
      {f.GetFloat("a_f32").status(), "is array, expected number"},
      {f.GetBool("f64").status(), "'f64' is float64, expected bool"},
      {f.GetStringArray("a_i32").status(), "expected array of strings"},
      {f.GetStringArray("str").status(), "expected array of strings"},
      {f.GetIntArray("a_f32").status(), "expected array of integers"},
      {f.GetIntArray("a_nested").status(), "expected array of integers"},
      {f.GetFloatArray("a_i32").status(), "expected array of floats"},
      {f.GetFloatArray("f32").status(), "expected array of floats"},
  };
  for (const Bad& x : bad) {
    EXPECT_EQ(x.status.code(), absl::StatusCode::kInvalidArgument) << x.status;
    EXPECT_TRUE(absl::StrContains(x.status.message(), x.want)) << x.status;
  }
}

// ----------------------------------------------------------- hostile files

TEST(GgufHostile, BadMagicAndVersion) {
  EXPECT_TRUE(Rejects({}, "truncated while reading magic"));
  EXPECT_TRUE(Rejects({'G', 'G', 'U'}, "truncated while reading magic"));
  EXPECT_TRUE(
      Rejects(Raw().U32(0x46554746).U32(3).U64(0).U64(0).bytes(), "bad magic"));
  for (uint32_t v : {0u, 1u, 4u, 0xffffffffu}) {
    EXPECT_TRUE(Rejects(Raw().Header(v, 0, 0).bytes(),
                        absl::StrCat("unsupported GGUF version ", v)));
  }
  EXPECT_TRUE(Rejects(Raw().U32(0x46554747).bytes(), "reading version"));
}

TEST(GgufHostile, TruncatedAtEveryOffset) {
  for (uint64_t align : {32u, 64u}) {
    GgufWriter w = TensorsWriter(align);
    w.Set("u16s", Array(ValueType::kUint16, {1, 2, 3}));
    w.Set("nested", Array(ValueType::kArray, {}, {}, {},
                          {Array(ValueType::kInt8, {-1}),
                           Array(ValueType::kFloat64, {}, {2.0})}));
    w.SetStringArray("tokens", {"a", "bc", ""});
    w.SetFloat32("eps", 1e-5f);
    const Bytes full = w.Serialize();
    ASSERT_TRUE(Parse(full).ok());
    for (size_t n = 0; n < full.size(); ++n) {
      auto f = Parse(Bytes(full.begin(), full.begin() + n));
      ASSERT_FALSE(f.ok()) << "prefix of " << n << " bytes parsed";
      const auto msg = f.status().message();
      EXPECT_TRUE(absl::StrContains(msg, "truncated") ||
                  absl::StrContains(msg, "exceeds the file") ||
                  absl::StrContains(msg, "lies outside the file"))
          << n << ": " << f.status();
    }
  }
  // All-types metadata too (strings, nested arrays), no tensors: every
  // prefix that cuts into the metadata fails; only the trailing padding
  // (under 32 bytes) may be cut.
  const Bytes full = AllTypesWriter().Serialize();
  size_t first_ok = full.size();
  for (size_t n = 0; n < full.size(); ++n) {
    const bool ok = Parse(Bytes(full.begin(), full.begin() + n)).ok();
    if (ok && first_ok == full.size()) first_ok = n;
    EXPECT_EQ(ok, n >= first_ok) << n;
  }
  EXPECT_LT(full.size() - first_ok, 32u);
}

TEST(GgufHostile, HugeCounts) {
  EXPECT_TRUE(Rejects(Raw().Header(3, uint64_t{1} << 62, 0).bytes(),
                      "header counts are absurd"));
  EXPECT_TRUE(Rejects(Raw().Header(3, 0, ~uint64_t{0}).bytes(),
                      "header counts are absurd"));
  // Within the limits but far more than the file holds.
  EXPECT_TRUE(Rejects(Raw().Header(3, 60000, 0).bytes(),
                      "truncated while reading tensor infos"));
  EXPECT_TRUE(Rejects(Raw().Header(3, 0, 60000).bytes(),
                      "truncated while reading metadata key"));
  ReaderLimits small;
  small.max_tensors = 1;
  EXPECT_TRUE(Rejects(Raw().Header(3, 2, 0).bytes(), "2 tensors", small));
}

TEST(GgufHostile, HugeStringLength) {
  EXPECT_TRUE(Rejects(Raw().Header(3, 0, 1).U64(~uint64_t{0}).bytes(),
                      "string too long"));
  EXPECT_TRUE(Rejects(Raw().Header(3, 0, 1).U64(1000).Zeros(10).bytes(),
                      "truncated while reading metadata key"));
  EXPECT_TRUE(Rejects(
      Raw().Header(3, 0, 1).Str("k").U32(8).U64(uint64_t{1} << 40).bytes(),
      "string too long"));
  EXPECT_TRUE(
      Rejects(Raw().Header(3, 1, 0).U64(uint64_t{1} << 63).Zeros(64).bytes(),
              "string too long"));
}

TEST(GgufHostile, HugeArrayLength) {
  for (uint64_t n : {uint64_t{1} << 62, uint64_t{1} << 23, uint64_t{100}}) {
    EXPECT_TRUE(Rejects(
        Raw().Header(3, 0, 1).Str("k").U32(9).U32(4).U64(n).Zeros(64).bytes(),
        "exceeds the file or the limit"))
        << n;
  }
  ReaderLimits small;
  small.max_array_elems = 3;
  EXPECT_TRUE(Rejects(
      Raw().Header(3, 0, 1).Str("k").U32(9).U32(0).U64(4).Zeros(4).bytes(),
      "array length 4 exceeds", small));
}

TEST(GgufHostile, UnknownValueTypes) {
  EXPECT_TRUE(Rejects(Raw().Header(3, 0, 1).Str("k").U32(13).Zeros(8).bytes(),
                      "'k' has unknown value type 13"));
  EXPECT_TRUE(
      Rejects(Raw().Header(3, 0, 1).Str("k").U32(0xffffffff).Zeros(8).bytes(),
              "unknown value type 4294967295"));
  EXPECT_TRUE(Rejects(
      Raw().Header(3, 0, 1).Str("k").U32(9).U32(77).U64(1).Zeros(8).bytes(),
      "unknown array element type 77"));
}

TEST(GgufHostile, DeeplyNestedArrays) {
  // depth d: d arrays nested in each other, the innermost holding one uint8.
  auto nested = [](int depth) {
    Raw r;
    r.Header(3, 0, 1).Str("deep").U32(9);
    for (int i = 1; i < depth; ++i) r.U32(9).U64(1);
    r.U32(0).U64(1).Zeros(1);
    return r.bytes();
  };
  auto ok = Parse(nested(4));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)->Find("deep")->arrays[0].arrays[0].arrays[0].ints,
            std::vector<int64_t>{0});
  EXPECT_TRUE(Rejects(nested(5), "'deep': GGUF arrays nested too deeply"));
  EXPECT_TRUE(Rejects(nested(100000), "nested too deeply"));
}

TEST(GgufHostile, DuplicateKey) {
  Raw r;
  r.Header(3, 0, 2).Str("k").U32(4).U32(1).Str("k").U32(4).U32(2);
  EXPECT_TRUE(Rejects(r.bytes(), "duplicate key"));
}

// A file with the given tensor infos (offsets as given) and `data_bytes`
// bytes of data after the aligned start of the data section.
Bytes WithTensors(
    const std::vector<std::tuple<std::string, std::vector<uint64_t>, uint32_t,
                                 uint64_t>>& infos,
    size_t data_bytes) {
  Raw r;
  r.Header(3, infos.size(), 0);
  for (const auto& [name, dims, type, offset] : infos) {
    r.Tensor(name, dims, type, offset);
  }
  r.PadTo(32).Zeros(data_bytes);
  return r.bytes();
}

TEST(GgufHostile, TensorInfos) {
  ASSERT_TRUE(Parse(WithTensors({{"t", {8}, 0, 0}}, 32)).ok());
  // 4 and 5 (the retired Q4_2/Q4_3), 16 (IQ2_XXS) are not supported.
  EXPECT_TRUE(Rejects(WithTensors({{"t", {8}, 4, 0}}, 32),
                      "tensor 't' has unsupported type 4"));
  EXPECT_TRUE(Rejects(WithTensors({{"t", {256}, 16, 0}}, 1024),
                      "tensor 't' has unsupported type 16"));
  EXPECT_TRUE(Rejects(WithTensors({{"t", {8}, 0xffff, 0}}, 32),
                      "unsupported type 65535"));
  EXPECT_TRUE(Rejects(WithTensors({{"t", {}, 0, 0}}, 32),
                      "tensor 't' has 0 dimensions"));
  EXPECT_TRUE(Rejects(WithTensors({{"t", {1, 1, 1, 1, 1}, 0, 0}}, 32),
                      "tensor 't' has 5 dimensions"));
  // 2^32 * 2^32 elements: the element count would overflow int64 bytes.
  EXPECT_TRUE(Rejects(
      WithTensors({{"t", {uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0}}, 32),
      "tensor 't' has an absurd shape"));
  EXPECT_TRUE(
      Rejects(WithTensors({{"t", {1u << 21, 1u << 21, 1u << 21}, 0, 0}}, 32),
              "absurd shape"));
  EXPECT_TRUE(
      Rejects(WithTensors({{"t", {~uint64_t{0}}, 0, 0}}, 32), "absurd shape"));
  EXPECT_TRUE(Rejects(WithTensors({{"t", {8, 0}, 0, 0}}, 32), "absurd shape"));
  EXPECT_TRUE(Rejects(WithTensors({{"q", {48}, 8, 0}}, 64),
                      "tensor 'q' row length 48 is not a multiple of the "
                      "block size of Q8_0"));
  ASSERT_TRUE(Parse(WithTensors({{"q", {32, 2}, 8, 0}}, 68)).ok());
}

// Block types: rows must be whole blocks; the byte count follows the
// block size (a file one byte short of the last block is rejected).
TEST(GgufHostile, QuantisedBlockCounts) {
  struct Case {
    uint32_t type;
    const char* name;
    uint64_t block;
    uint64_t bytes;
  };
  const Case cases[] = {
      {2, "Q4_0", 32, 18},    {3, "Q4_1", 32, 20},      {6, "Q5_0", 32, 22},
      {7, "Q5_1", 32, 24},    {10, "Q2_K", 256, 84},    {11, "Q3_K", 256, 110},
      {12, "Q4_K", 256, 144}, {13, "Q5_K", 256, 176},   {14, "Q6_K", 256, 210},
      {20, "IQ4_NL", 32, 18}, {23, "IQ4_XS", 256, 136},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const uint64_t full = 3 * c.bytes;  // 3 rows of one block
    auto ok = Parse(WithTensors({{"q", {c.block, 3}, c.type, 0}}, full));
    ASSERT_TRUE(ok.ok()) << ok.status();
    EXPECT_EQ((*ok)->tensors()[0].n_bytes, static_cast<int64_t>(full));
    EXPECT_TRUE(Rejects(WithTensors({{"q", {c.block, 3}, c.type, 0}}, full - 1),
                        "lies outside the file"));
    EXPECT_TRUE(Rejects(
        WithTensors({{"q", {c.block + 16, 3}, c.type, 0}}, 4 * full),
        absl::StrCat("row length ", c.block + 16,
                     " is not a multiple of the block size of ", c.name)));
  }
}

TEST(GgufHostile, TensorPlacement) {
  EXPECT_TRUE(Rejects(WithTensors({{"t", {8}, 0, uint64_t{1} << 62}}, 32),
                      "tensor 't' lies outside the file"));
  EXPECT_TRUE(Rejects(WithTensors({{"t", {8}, 0, ~uint64_t{31}}}, 32),
                      "lies outside the file"));
  EXPECT_TRUE(
      Rejects(WithTensors({{"t", {8}, 0, 32}}, 32), "lies outside the file"));
  EXPECT_TRUE(Rejects(WithTensors({{"t", {9}, 0, 0}}, 32),
                      "lies outside the file (offset 0, 36 bytes, data "
                      "section 32 bytes)"));
  EXPECT_TRUE(Rejects(WithTensors({{"t", {8}, 0, 0}, {"u", {8}, 0, 32}}, 63),
                      "tensor 'u' lies outside the file"));
  EXPECT_TRUE(Rejects(WithTensors({{"t", {4}, 0, 4}}, 32),
                      "tensor 't' offset is not aligned"));
  EXPECT_TRUE(Rejects(WithTensors({{"t", {8}, 0, 0}, {"t", {8}, 0, 0}}, 32),
                      "duplicate tensor name 't'"));
  // Tensor infos whose data section starts past the end of the file.
  Raw r;
  r.Header(3, 1, 0).Tensor("t", {1}, 0, 0);
  EXPECT_TRUE(Rejects(r.bytes(), "truncated while reading tensor data"));
}

TEST(GgufHostile, BadAlignment) {
  // (type, 4-byte payload): uint32 0, 3, 48, 2^21; int32 -32; float32 32.0f;
  // and a string "32".
  const std::pair<uint32_t, uint32_t> bad[] = {
      {4, 0}, {4, 3}, {4, 48}, {4, 1u << 21}, {5, 0xffffffe0}, {6, 0x42000000}};
  for (const auto& [type, payload] : bad) {
    Raw r;
    r.Header(3, 0, 1).Str("general.alignment").U32(type).U32(payload);
    EXPECT_TRUE(Rejects(r.bytes(), "general.alignment must be a power of two"))
        << type << " " << payload;
  }
  Raw str;
  str.Header(3, 0, 1).Str("general.alignment").U32(8).Str("32");
  EXPECT_TRUE(Rejects(str.bytes(), "power of two"));
}

// ----------------------------------------------------------------- Open()

void WriteBytes(const std::string& path, const Bytes& b) {
  FILE* fp = std::fopen(path.c_str(), "wb");
  ASSERT_NE(fp, nullptr) << path;
  // fwrite's buffer must not be null, which an empty vector's data() may be.
  if (!b.empty()) {
    ASSERT_EQ(std::fwrite(b.data(), 1, b.size(), fp), b.size());
  }
  ASSERT_EQ(std::fclose(fp), 0);
}

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/gguf_test_", getpid(), "_", name);
}

TEST(GgufOpen, MapsAFile) {
  const std::string path = TempPath("ok.gguf");
  GgufWriter w = TensorsWriter(64);
  ASSERT_TRUE(w.WriteFile(path).ok());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->path(), path);
  EXPECT_EQ((*f)->alignment(), 64u);
  const TensorInfo* t = (*f)->FindTensor("bf16");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Bytes(t->data, t->data + t->n_bytes), Iota(48, 100));
  // Mapping is page-aligned, so data pointers honour the file's alignment.
  for (const TensorInfo& x : (*f)->tensors()) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(x.data) % 64, 0u) << x.name;
  }
  f->reset();
  std::remove(path.c_str());
}

// --weights-memory's names round-trip; others are refused naming the choices.
TEST(GgufOpen, FileMemoryNamesParse) {
  for (FileMemory m :
       {FileMemory::kAuto, FileMemory::kMap, FileMemory::kHugePages}) {
    auto parsed = ParseFileMemory(FileMemoryName(m));
    ASSERT_TRUE(parsed.ok()) << FileMemoryName(m);
    EXPECT_EQ(*parsed, m);
  }
  auto bad = ParseFileMemory("hugepages");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "huge-pages"))
      << bad.status();
}

// The same file read into huge-page memory (file_memory.h) gives the same
// metadata and tensor bytes, aligned as mapped; kAuto leaves a small file
// mapped (below HugePagesHelp's 64 MiB), and bad files fail alike.
TEST(GgufOpen, HugePagesHoldTheSameBytes) {
  const std::string path = TempPath("huge.gguf");
  GgufWriter w = TensorsWriter(64);
  ASSERT_TRUE(w.WriteFile(path).ok());
  auto mapped = GgufFile::Open(path);
  auto copied = GgufFile::Open(path, {}, FileMemory::kHugePages);
  auto automatic = GgufFile::Open(path, {}, FileMemory::kAuto);
  ASSERT_TRUE(mapped.ok() && copied.ok() && automatic.ok());
  EXPECT_EQ((*mapped)->memory(), FileMemory::kMap);
  EXPECT_EQ((*copied)->memory(), FileMemory::kHugePages);
  EXPECT_EQ((*automatic)->memory(), FileMemory::kMap);
  EXPECT_FALSE(HugePagesHelp(1 << 20));
  ASSERT_EQ((*copied)->tensors().size(), (*mapped)->tensors().size());
  for (size_t i = 0; i < (*mapped)->tensors().size(); ++i) {
    const TensorInfo& a = (*mapped)->tensors()[i];
    const TensorInfo& b = (*copied)->tensors()[i];
    EXPECT_EQ(a.name, b.name);
    ASSERT_EQ(a.n_bytes, b.n_bytes) << a.name;
    EXPECT_NE(a.data, b.data) << a.name;
    EXPECT_EQ(std::memcmp(a.data, b.data, a.n_bytes), 0) << a.name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) % 64, 0u) << b.name;
  }
  EXPECT_EQ((*copied)->metadata().size(), (*mapped)->metadata().size());
  EXPECT_EQ((*copied)->placed_bytes(), (*mapped)->placed_bytes());
  EXPECT_GT((*mapped)->placed_bytes(), 0u);
  std::remove(path.c_str());

  const std::string bad = TempPath("bad_huge.gguf");
  Bytes b = GgufWriter().Serialize();
  b[4] = 1;
  WriteBytes(bad, b);
  auto v1 = GgufFile::Open(bad, {}, FileMemory::kHugePages);
  EXPECT_TRUE(absl::StrContains(v1.status().message(),
                                "unsupported GGUF version 1"))
      << v1.status();
  std::remove(bad.c_str());
}

TEST(GgufOpen, Errors) {
  const std::string missing = TempPath("missing.gguf");
  auto f = GgufFile::Open(missing);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(f.status().message(), missing)) << f.status();

  auto dir = GgufFile::Open(::testing::TempDir());
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(dir.status().message(), "not a regular file"))
      << dir.status();

  // A FIFO must not block Open() (nobody writes to it).
  const std::string fifo = TempPath("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_TRUE(absl::StrContains(GgufFile::Open(fifo).status().message(),
                                "not a regular file"));
  std::remove(fifo.c_str());

  const std::string empty = TempPath("empty.gguf");
  WriteBytes(empty, {});
  auto e = GgufFile::Open(empty);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(e.status().message(), empty)) << e.status();
  EXPECT_TRUE(absl::StrContains(e.status().message(), "truncated"));
  std::remove(empty.c_str());

  const std::string bad = TempPath("bad.gguf");
  Bytes b = GgufWriter().Serialize();
  b[4] = 1;
  WriteBytes(bad, b);
  auto v1 = GgufFile::Open(bad);
  EXPECT_TRUE(absl::StrContains(
      v1.status().message(), absl::StrCat(bad, ": unsupported GGUF version 1")))
      << v1.status();
  std::remove(bad.c_str());
}

}  // namespace
}  // namespace ckv::gguf
