// The tokenizer.ggml.pre names llama.cpp knows, each mapped to its family's
// split patterns and flags. The patterns are llama.cpp's (llama-vocab.cpp),
// which in turn transcribe each model's tokenizer.json; they are data that
// must match exactly, so they are kept verbatim in llama.cpp's regex dialect
// (see AdaptPattern) with non-ASCII characters written as \x{...}.

#include <initializer_list>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/pretokenizer.h"

namespace ckv::tokenizer_internal {
namespace {

// Contractions spelled without (?i:) as llama.cpp does, so that Unicode case
// folding (e.g. U+017F matching 's') cannot change the split.
#define CKV_CONTRACTIONS \
  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
// Tails shared by the tiktoken-style patterns.
#define CKV_WS_TAIL R"(|\s*[\r\n]+|\s+(?!\S)|\s+)"

// GPT-2 split (HF's, with the trailing \s+ that llama.cpp's hand-written
// splitter for this pattern implements).
constexpr char kGpt2[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr char kLlama3[] = CKV_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*)" CKV_WS_TAIL;
constexpr char kQwen2[] = CKV_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*)" CKV_WS_TAIL;
constexpr char kQwen35[] = CKV_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*)" CKV_WS_TAIL;
constexpr char kJais2[] = CKV_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S))"
    R"(|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})";
// Letters that are not CJK, as listed by DeepSeek LLM's tokenizer.json.
constexpr char kDeepseekLetters[] =
    R"(A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF})"
    R"(\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377})"
    R"(\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1})"
    R"(\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556})"
    R"(\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA})"
    R"(\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A})"
    R"(\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D})"
    R"(\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D})"
    R"(\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4})"
    R"(\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC})"
    R"(\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113})"
    R"(\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D})"
    R"(\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E})"
    R"(\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE})"
    R"(\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F})"
    R"(\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06})"
    R"(\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F})"
    R"(\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2})"
    R"(\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943})";
constexpr char kCjkHangul[] =
    R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";
constexpr char kCjkKana[] =
    R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";
constexpr char kAsciiPunctWord[] =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+)"
    R"(|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+)";
constexpr char kPoro[] =
    R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+)";
// Case-run splits in llama.cpp's lookahead form ("upper*lower+" and
// "upper+lower*", where any letter outside a-z / A-Z counts as both).
#define CKV_UPPER_RUN(L) "((?=[" L "])([^a-z]))"
#define CKV_LOWER_RUN(L) "((?=[" L "])([^A-Z]))"
#define CKV_CASE_WORDS(L, SUFFIX)                                     \
  R"([^\r\n\p{L}\p{N}]?)" CKV_UPPER_RUN(L) "*" CKV_LOWER_RUN(         \
      L) "+" SUFFIX                                                   \
         R"(|[^\r\n\p{L}\p{N}]?)" CKV_UPPER_RUN(L) "+" CKV_LOWER_RUN( \
             L) "*" SUFFIX
constexpr char kTekken[] = CKV_CASE_WORDS(
    R"(\p{L})", "") R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*)" CKV_WS_TAIL;
constexpr char kGpt4o[] =
    CKV_CASE_WORDS(R"(\p{L})", CKV_CONTRACTIONS
                   "?") R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*)" CKV_WS_TAIL;
constexpr char kGraniteEmbMulti[] =
    CKV_CASE_WORDS(R"(\p{L}\p{M})", CKV_CONTRACTIONS
                   "?") R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*)" CKV_WS_TAIL;
#define CKV_CATEGORY_WORDS(SUFFIX)                         \
  R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*)"  \
  R"([\p{Ll}\p{Lm}\p{Lo}\p{M}]+)" SUFFIX                   \
  R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+)" \
  R"([\p{Ll}\p{Lm}\p{Lo}\p{M}]*)" SUFFIX
constexpr char kTinyAya[] = CKV_CATEGORY_WORDS(
    CKV_CONTRACTIONS
    "?") R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*)" CKV_WS_TAIL;
constexpr char kYoutu[] = CKV_CATEGORY_WORDS(
    CKV_CONTRACTIONS "?") R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*)" CKV_WS_TAIL;
// Kimi-K2: llama.cpp splits it with hand-written code whose behaviour is this
// pattern (Han runs by llama.cpp's own Han ranges; a word is any run of
// non-Han letters, whatever their case, with an optional contraction).
#define CKV_HAN                                                           \
  R"(\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-)"    \
  R"(\x{2B73F}\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}\x{2CEB0}-\x{2EBEF})" \
  R"(\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F})"
constexpr char kKimiK2[] =
    "[" CKV_HAN R"(]+|[^\r\n\p{L}\p{N}]?(?:(?![)" CKV_HAN R"(])\p{L})+)"
    "(?:'[sStTmMdD]|'[rR][eE]|'[vV][eE]|'[lL][lL])?"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*)" CKV_WS_TAIL;
// AFMoE's digit rule (hand-written in llama.cpp): a run of digits splits
// into its leading len % 3 digits, then groups of three.
constexpr char kDigitGroups[] = R"(\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N})))";
constexpr char kAfmoeScripts[] =
    R"([\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{F900}-\x{FAFF}\x{3040}-\x{309F})"
    R"(\x{30A0}-\x{30FF}\x{FF65}-\x{FF9F}\x{2F00}-\x{2FDF}\x{E40}-\x{E7F})"
    R"(\x{E80}-\x{EFF}\x{1780}-\x{17FF}\x{1000}-\x{109F}\x{AA60}-\x{AA7F})"
    R"(\x{A9E0}-\x{A9FF}\x{AC00}-\x{D7AF}\x{1100}-\x{11FF}]+)";

// Regex families; several pre names share one.
enum class Family {
  kDefault,
  kLlama3,
  kJais2,
  kDeepseekLlm,
  kDeepseek3,
  kSpark25,
  kYoutu,
  kDeepseekCoder,
  kFalcon,
  kStarcoder,
  kGpt2,
  kQwen2,
  kQwen35,
  kPoro,
  kViking,
  kTekken,
  kChameleon,
  kGpt4o,
  kGraniteEmbMulti,
  kTinyAya,
  kSuperBpe,
  kBailingMoe,
  kSeedCoder,
  kUfakzeka,
  kLaguna,
  kExaoneMoe,
  kGemma4,
  kMiniCpm5,
  kKimiK2,
  kAfmoe,
  kWhitespace,
};

std::vector<std::string> FamilyPatterns(Family f) {
  switch (f) {
    case Family::kDefault:
      return {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"};
    case Family::kLlama3:
      return {kLlama3};
    case Family::kJais2:
      return {kJais2};
    case Family::kDeepseekLlm:
      return {"[\r\n]",
              absl::StrCat(R"(\s?[)", kDeepseekLetters, "]+"),
              R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F})"
              R"(\x{3000}-\x{3002}]+)",
              R"(\s+$)",
              kCjkHangul,
              R"(\p{N}+)"};
    case Family::kDeepseek3:
      return {R"(\p{N}{1,3})", kCjkKana,
              absl::StrCat(kAsciiPunctWord,
                           R"(| ?[\p{P}\p{S}]+[\r\n]*)" CKV_WS_TAIL)};
    case Family::kSpark25:
      return {R"(\p{N}{1,3})", kCjkKana,
              absl::StrCat(kAsciiPunctWord,
                           R"(| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+)"),
              R"(\p{N})"};
    case Family::kYoutu:
      return {R"([\x{AC00}-\x{D7A3}\x{3131}-\x{318E}]+)"
              R"(|[\x{FF01}\x{2026}\x{201C}\x{201D}\x{2018}\x{2019}\x{2014})"
              R"(\x{FF1A}\x{FF1B}\x{FF0C}\x{3001}-\x{303F}\x{FE30}-\x{FE4F}]+)"
              R"(|[\x{3105}-\x{312F}]+|[\x{4E00}-\x{9FA5}\x{3040}-\x{309F})"
              R"(\x{30A0}-\x{30FF}]+)",
              kYoutu};
    case Family::kDeepseekCoder:
      return {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjkHangul, R"(\p{N})"};
    case Family::kFalcon:
      return {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"};
    case Family::kStarcoder:
      return {R"(\p{N})", kGpt2};
    case Family::kGpt2:
      return {kGpt2};
    case Family::kQwen2:
      return {kQwen2};
    case Family::kQwen35:
      return {kQwen35};
    case Family::kPoro:
      return {kPoro};
    case Family::kViking:
      return {kPoro, R"(\p{N})"};
    case Family::kTekken:
      return {kTekken};
    case Family::kChameleon:
      return {"<sentinel:[0-9]+>",       "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
              "([\\t\\n]|    |  )",      R"(\p{N})",
              R"([\p{P}!-/:-@\[-`{-~])", kGpt2};
    case Family::kGpt4o:
      return {kGpt4o};
    case Family::kGraniteEmbMulti:
      return {kGraniteEmbMulti};
    case Family::kTinyAya:
      // \b after ASCII digits, as std::regex's ASCII \w sees it.
      return {R"(\d{1,3}(?=(?:\d{3})*(?![0-9A-Za-z_])))", kTinyAya};
    case Family::kSuperBpe:
      return {R"(\p{N}+)", R"((?=(\d{3})+(?!\d)))"};
    case Family::kBailingMoe:
      return {R"('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE]))"
              R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*)"
              R"(|\s*[\r\n]|\s+(?!\S)|\s+)"};
    case Family::kSeedCoder:
      return {
          CKV_CONTRACTIONS
          R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+)" CKV_WS_TAIL};
    case Family::kUfakzeka:
      return {
          R"([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*)" CKV_WS_TAIL};
    case Family::kLaguna:
      return {R"([^\n]+|[\n]+)", kQwen2};
    case Family::kExaoneMoe:
      return {CKV_CONTRACTIONS
              R"(|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N})"
              R"(| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)"};
    case Family::kGemma4:
      return {R"([^\n]+|[\n]+)"};
    case Family::kMiniCpm5:
      return {
          R"(\p{N}{1,3})", CKV_CONTRACTIONS
          R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*)" CKV_WS_TAIL};
    case Family::kKimiK2:
      return {kKimiK2};
    case Family::kAfmoe:
      return {kDigitGroups, kAfmoeScripts,
              absl::StrCat(kAsciiPunctWord,
                           R"(| ?[\p{P}\p{S}]+[\r\n]*)" CKV_WS_TAIL)};
    case Family::kWhitespace:
      return {R"(\S+)"};
  }
  return {};
}

// Flags beyond the patterns (llama.cpp's per-name settings).
enum Flag : unsigned {
  kNone = 0,
  kIgnoreMerges = 1u << 0,
  kAddBos = 1u << 1,
  kRawUtf8Spaces = 1u << 2,  // no byte-level encoding, ' ' -> U+2581
  kGemma4Quirks = 1u << 3,   // whole newline runs, BOS always added
  kNoDefaultBos = 1u << 4,
  kRawUtf8 = 1u << 5,  // no byte-level encoding, spaces kept
};

struct PreEntry {
  std::initializer_list<const char*> names;
  Family family;
  unsigned flags;
};

// Every tokenizer.ggml.pre name llama.cpp accepts.
const std::initializer_list<PreEntry>& PreTable() {
  static const std::initializer_list<PreEntry> table = {
      {{"default"}, Family::kDefault, kNone},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
        "midm-2.0", "lfm2", "jina-v5-nano"},
       Family::kLlama3,
       kIgnoreMerges | kAddBos},
      {{"dbrx", "smaug-bpe"}, Family::kLlama3, kNone},
      {{"glm4", "chatglm-bpe"}, Family::kLlama3, kNoDefaultBos},
      {{"jais-2"}, Family::kJais2, kNone},
      {{"deepseek-llm"}, Family::kDeepseekLlm, kNone},
      {{"deepseek-v3", "hunyuan-dense", "hy_v4", "joyai-llm"},
       Family::kDeepseek3,
       kNone},
      {{"spark2_5"}, Family::kSpark25, kNone},
      {{"youtu"}, Family::kYoutu, kIgnoreMerges},
      {{"deepseek-coder"}, Family::kDeepseekCoder, kNone},
      {{"falcon"}, Family::kFalcon, kNone},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone",
        "minerva-7b", "mellum2"},
       Family::kStarcoder,
       kNone},
      {{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es",
        "jina-v2-de", "a.x-4.0", "mellum", "modern-bert", "jina-v1-en",
        "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais", "trillion",
        "granite-docling", "exaone4"},
       Family::kGpt2,
       kNone},
      {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2",
        "hunyuan", "solar-open", "grok-2"},
       Family::kQwen2,
       kNone},
      {{"qwen35"}, Family::kQwen35, kNone},
      {{"poro-chat", "bloom", "gpt3-finnish"}, Family::kPoro, kNone},
      {{"viking"}, Family::kViking, kNone},
      {{"tekken"}, Family::kTekken, kIgnoreMerges | kAddBos},
      {{"chameleon"}, Family::kChameleon, kAddBos},
      {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"},
       Family::kGpt4o,
       kNone},
      {{"granite-embed-multi-97m"}, Family::kGraniteEmbMulti, kIgnoreMerges},
      {{"tiny_aya", "cohere2moe"}, Family::kTinyAya, kNone},
      {{"superbpe"}, Family::kSuperBpe, kNone},
      {{"bailingmoe", "bailingmoe2", "llada-moe"}, Family::kBailingMoe, kNone},
      {{"seed-coder"}, Family::kSeedCoder, kNone},
      {{"ufakzeka"}, Family::kUfakzeka, kNone},
      {{"laguna"}, Family::kLaguna, kNone},
      {{"exaone-moe"}, Family::kExaoneMoe, kNone},
      {{"gemma4", "granite-embed-multi-311m"},
       Family::kGemma4,
       kRawUtf8Spaces | kGemma4Quirks},
      {{"sarvam-moe"}, Family::kGemma4, kRawUtf8Spaces},
      {{"minicpm5"}, Family::kMiniCpm5, kIgnoreMerges},
      {{"kimi-k2"}, Family::kKimiK2, kNone},
      {{"afmoe"}, Family::kAfmoe, kNone},
      {{"whitespace"}, Family::kWhitespace, kRawUtf8},
  };
  return table;
}

}  // namespace

absl::StatusOr<PreTokenizerSpec> PreTokenizerSpecFor(absl::string_view pre) {
  const absl::string_view name = pre.empty() ? "default" : pre;
  for (const PreEntry& e : PreTable()) {
    for (const char* n : e.names) {
      if (name != n) continue;
      PreTokenizerSpec spec;
      spec.patterns = FamilyPatterns(e.family);
      spec.ignore_merges = (e.flags & kIgnoreMerges) != 0;
      spec.add_bos = (e.flags & kAddBos) != 0;
      spec.byte_encode = (e.flags & (kRawUtf8Spaces | kRawUtf8)) == 0;
      spec.escape_whitespaces = (e.flags & kRawUtf8Spaces) != 0;
      spec.whole_newline_runs = (e.flags & kGemma4Quirks) != 0;
      spec.force_add_bos = (e.flags & kGemma4Quirks) != 0;
      spec.no_default_bos = (e.flags & kNoDefaultBos) != 0;
      return spec;
    }
  }
  return absl::NotFoundError(absl::StrCat("unknown pre-tokenizer '", pre, "'"));
}

std::vector<std::string> KnownPreTokenizerNames() {
  std::vector<std::string> names;
  for (const PreEntry& e : PreTable()) {
    for (const char* n : e.names) names.emplace_back(n);
  }
  return names;
}

}  // namespace ckv::tokenizer_internal
