// Request validation (server/service_convert.h): every KV and sampling field
// is range-checked in one place with INVALID_ARGUMENT naming the field;
// dense_layers is bounded by the model; a policy or gqa_selection that is
// set but empty or unknown is refused with the accepted values; a known
// field of the wrong wire type is refused instead of silently dropped; and
// no message quotes more than a short, escaped prefix of client text.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "server/log_text.h"
#include "server/service_convert.h"

namespace ckv::server {
namespace {

constexpr int kLayers = 4;

absl::Status Kv(const v1::KvConfig& p) {
  return MergeKvConfig(KvStoreConfig{}, p, kLayers).status();
}
absl::Status Sampling(const v1::SamplingParams& p) {
  return MergeSampling(SamplingParams{}, p).status();
}

void ExpectInvalid(const absl::Status& s, const std::string& field) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
  EXPECT_TRUE(absl::StrContains(s.message(), field))
      << field << " not named in: " << s.message();
}

TEST(RequestValidationTest, EveryKvFieldIsRangeChecked) {
  struct Case {
    const char* field;
    void (*set)(v1::KvConfig*);
  };
  const Case bad[] = {
      {"kv.budget", [](v1::KvConfig* c) { c->set_budget(0); }},
      {"kv.budget", [](v1::KvConfig* c) { c->set_budget(1 << 21); }},
      {"kv.sink_tokens", [](v1::KvConfig* c) { c->set_sink_tokens(-1); }},
      {"kv.tokens_per_cluster",
       [](v1::KvConfig* c) { c->set_tokens_per_cluster(0); }},
      {"kv.window", [](v1::KvConfig* c) { c->set_window(0); }},
      {"kv.window", [](v1::KvConfig* c) { c->set_window(INT32_MAX); }},
      {"kv.recent_tokens",
       [](v1::KvConfig* c) {
         c->set_budget(8);
         c->set_recent_tokens(9);
       }},
      {"kv.cache_steps", [](v1::KvConfig* c) { c->set_cache_steps(-1); }},
      {"kv.dense_layers", [](v1::KvConfig* c) { c->set_dense_layers(-1); }},
      {"kv.dense_layers",
       [](v1::KvConfig* c) { c->set_dense_layers(kLayers + 1); }},
  };
  for (const Case& c : bad) {
    v1::KvConfig p;
    c.set(&p);
    ExpectInvalid(Kv(p), c.field);
  }
  v1::KvConfig edge;
  edge.set_dense_layers(kLayers);
  edge.set_budget(8);
  edge.set_recent_tokens(8);
  edge.set_sink_tokens(0);
  edge.set_cache_steps(0);
  auto kv = MergeKvConfig(KvStoreConfig{}, edge, kLayers);
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_EQ(kv->dense_layers, kLayers);
}

// Driven by the settings schema (common/settings_schema.h): every numeric
// wire setting is refused just outside each finite end of its range, with
// the schema's wording, so a new entry is checked without a new case here.
TEST(RequestValidationTest, EverySchemaRangeIsEnforced) {
  auto outside = [](const settings::Range& r, bool lower) {
    return lower ? r.lo - 1 : r.hi + 1;
  };
#define CKV_CASES(prefix, Message, merge, name, type, range)            \
  for (bool lower : {true, false}) {                                    \
    const double v = outside(range, lower);                             \
    if (!std::isfinite(v) || std::is_same_v<type, bool> ||              \
        v > static_cast<double>(std::numeric_limits<type>::max()) ||    \
        v < static_cast<double>(std::numeric_limits<type>::lowest())) { \
      continue;                                                         \
    }                                                                   \
    Message p;                                                          \
    p.set_##name(static_cast<type>(v));                                 \
    const absl::Status s = merge(p);                                    \
    ExpectInvalid(s, prefix #name);                                     \
    EXPECT_TRUE(absl::StrContains(                                      \
        s.message(),                                                    \
        settings::RangeRule(range, !std::is_floating_point_v<type>)))   \
        << s.message();                                                 \
  }
#define CKV_KV_CASES(name, type, range, fork, help) \
  CKV_CASES("kv.", v1::KvConfig, Kv, name, type, range)
#define CKV_SAMPLING_CASES(name, type, range, help) \
  CKV_CASES("sampling.", v1::SamplingParams, Sampling, name, type, range)
  CKV_KV_WIRE_NUMBERS(CKV_KV_CASES)
  CKV_SAMPLING_NUMBERS(CKV_SAMPLING_CASES)
#undef CKV_SAMPLING_CASES
#undef CKV_KV_CASES
#undef CKV_CASES
}

// The token-count limit (kMaxTokenSetting) binds requests and the server's
// flags; the engine takes larger counts (budget = INT32_MAX: select all).
TEST(RequestValidationTest, TokenCountLimitBindsRequestsOnly) {
  KvStoreConfig big;
  big.budget = std::numeric_limits<int32_t>::max();
  EXPECT_TRUE(ValidateKvStoreConfig(big).ok());
  v1::KvConfig p;
  p.set_budget(std::numeric_limits<int32_t>::max());
  ExpectInvalid(Kv(p), "kv.budget");
  SamplingParams s;
  s.max_tokens = (1 << 20) + 1;
  EXPECT_TRUE(ValidateSamplingParams(s).ok());
  ExpectInvalid(ValidateSampling(s), "sampling.max_tokens");
}

TEST(RequestValidationTest, ServerDefaultBeyondTheModelIsEveryLayer) {
  KvStoreConfig base;
  base.dense_layers = 9;
  auto kv = MergeKvConfig(base, v1::KvConfig(), kLayers);
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_EQ(kv->dense_layers, kLayers);
}

TEST(RequestValidationTest, EverySamplingFieldIsRangeChecked) {
  struct Case {
    const char* field;
    void (*set)(v1::SamplingParams*);
  };
  const Case bad[] = {
      {"sampling.top_k", [](v1::SamplingParams* p) { p->set_top_k(-3); }},
      {"sampling.temperature",
       [](v1::SamplingParams* p) { p->set_temperature(-0.5f); }},
      {"sampling.temperature",
       [](v1::SamplingParams* p) { p->set_temperature(NAN); }},
      {"sampling.top_p", [](v1::SamplingParams* p) { p->set_top_p(0.0f); }},
      {"sampling.top_p", [](v1::SamplingParams* p) { p->set_top_p(1.5f); }},
      {"sampling.max_tokens",
       [](v1::SamplingParams* p) { p->set_max_tokens(-1); }},
      {"sampling.max_tokens",
       [](v1::SamplingParams* p) { p->set_max_tokens(1 << 21); }},
      {"sampling.stop", [](v1::SamplingParams* p) { p->add_stop(""); }},
      {"sampling.stop",
       [](v1::SamplingParams* p) { p->add_stop(std::string(257, 'x')); }},
      {"sampling.stop",
       [](v1::SamplingParams* p) {
         for (int i = 0; i < 17; ++i) p->add_stop(std::string(1, 's'));
       }},
  };
  for (const Case& c : bad) {
    v1::SamplingParams p;
    c.set(&p);
    ExpectInvalid(Sampling(p), c.field);
  }
  v1::SamplingParams ok;
  ok.set_top_k(0);
  ok.set_top_p(1.0f);
  ok.set_max_tokens(0);
  ok.add_stop(std::string(256, 'x'));
  EXPECT_TRUE(Sampling(ok).ok()) << Sampling(ok);
}

TEST(RequestValidationTest, PolicyAndGqaSelectionMustBeKnownWhenSet) {
  v1::KvConfig p;
  p.set_policy("");
  ExpectInvalid(Kv(p), "kv.policy");
  EXPECT_TRUE(
      absl::StrContains(Kv(p).message(), "full, clusterkv, quest, streaming"))
      << Kv(p).message();
  p.set_policy("Quest");
  ExpectInvalid(Kv(p), "kv.policy");
  p.set_policy("quest");
  EXPECT_TRUE(Kv(p).ok());
  v1::KvConfig g;
  g.set_gqa_selection("");
  ExpectInvalid(Kv(g), "kv.gqa_selection");
  EXPECT_TRUE(absl::StrContains(Kv(g).message(), "per_query_head, per_kv_head"))
      << Kv(g).message();
  g.set_gqa_selection("per_kv_head");
  EXPECT_TRUE(Kv(g).ok());
  EXPECT_TRUE(Kv(v1::KvConfig()).ok());  // unset: the defaults
}

TEST(RequestValidationTest, UnknownValuesAreQuotedShortAndEscaped) {
  v1::KvConfig p;
  p.set_policy("x\n[2026-01-01 00:00:00.000] [info] rpc=FORGED\xe2\x80\xae" +
               std::string(1 << 20, 'a'));
  const absl::Status s = Kv(p);
  ExpectInvalid(s, "kv.policy");
  EXPECT_LT(s.message().size(), 300u) << s.message();
  EXPECT_FALSE(absl::StrContains(s.message(), "\n"));
  EXPECT_FALSE(absl::StrContains(s.message(), "\xe2\x80\xae"));
  EXPECT_TRUE(absl::StrContains(s.message(), "x\\x0a[2026")) << s.message();
}

// Wire bytes of a KvConfig whose field 1 (policy, a string) arrives as a
// varint: parsed, it lands in the unknown fields.
TEST(RequestValidationTest, KnownFieldWithTheWrongWireTypeIsRefused) {
  v1::KvConfig p;
  ASSERT_TRUE(p.ParseFromString(std::string("\x08\x05", 2)));
  EXPECT_FALSE(p.has_policy());
  ExpectInvalid(Kv(p), "kv.policy");
  // top_k (field 2, an int32) sent length-delimited.
  v1::SamplingParams s;
  ASSERT_TRUE(s.ParseFromString(std::string("\x12\x01x", 3)));
  ExpectInvalid(Sampling(s), "sampling.top_k");
  // A field number this server does not know (a newer client's): ignored.
  v1::KvConfig newer;
  ASSERT_TRUE(newer.ParseFromString(std::string("\x98\x06\x01", 3)));
  EXPECT_TRUE(Kv(newer).ok()) << Kv(newer);
}

TEST(EscapeTextTest, KeepsPrintableTextAndEscapesTheRest) {
  EXPECT_EQ(EscapeText("abc-XYZ_0.9 ok"), "abc-XYZ_0.9 ok");
  EXPECT_EQ(EscapeText("caf\xc3\xa9 \xe6\x97\xa5"), "caf\xc3\xa9 \xe6\x97\xa5");
  EXPECT_EQ(EscapeText("a\nb\rc\td\x1b"), "a\\x0ab\\x0dc\\x09d\\x1b");
  EXPECT_EQ(EscapeText("back\\slash"), "back\\\\slash");
  EXPECT_EQ(EscapeText("\xe2\x80\xae"
                       "evil"),
            "\\u{202E}evil");
  EXPECT_EQ(EscapeText("\xe2\x81\xa6x\xe2\x80\xa8y\xc2\x85"),
            "\\u{2066}x\\u{2028}y\\u{0085}");
  EXPECT_EQ(EscapeText("\xff\xc3"), "\\xff\\xc3");           // invalid UTF-8
  EXPECT_EQ(EscapeText("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_EQ(EscapeText("\x7f"), "\\x7f");
  EXPECT_EQ(EscapeText(std::string(10, 'a'), 4), "aaaa...(10 bytes)");
  EXPECT_EQ(EscapeLogField("a b=c"), "a\\x20b=c");
  // A character cut by the prefix is escaped, not emitted broken.
  EXPECT_EQ(EscapeText("ab\xc3\xa9", 3), "ab\\xc3...(4 bytes)");
}

}  // namespace
}  // namespace ckv::server
