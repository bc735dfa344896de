// Construction of ckv::Tokenizer: GGUF metadata -> TokenizerConfig -> tables,
// special ids and end-of-generation set as llama.cpp's llama_vocab::load.

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/tokenizer_impl.h"

namespace ckv {
namespace {

using tokenizer_internal::AttrFromGgufType;
using tokenizer_internal::kAttrControl;
using tokenizer_internal::kAttrNormal;
using tokenizer_internal::kAttrUnknown;
using tokenizer_internal::kAttrUnused;
using tokenizer_internal::kAttrUserDefined;
using tokenizer_internal::Vocab;

constexpr char kModelKey[] = "tokenizer.ggml.model";
constexpr char kPreKey[] = "tokenizer.ggml.pre";
constexpr char kTokensKey[] = "tokenizer.ggml.tokens";
constexpr char kScoresKey[] = "tokenizer.ggml.scores";
constexpr char kTypesKey[] = "tokenizer.ggml.token_type";
constexpr char kMergesKey[] = "tokenizer.ggml.merges";
constexpr char kAddBosKey[] = "tokenizer.ggml.add_bos_token";
constexpr char kAddEosKey[] = "tokenizer.ggml.add_eos_token";
constexpr char kBosKey[] = "tokenizer.ggml.bos_token_id";
constexpr char kEosKey[] = "tokenizer.ggml.eos_token_id";

bool IsBpeType(TokenizerType t) {
  return t == TokenizerType::kBpe || t == TokenizerType::kGemma4 ||
         t == TokenizerType::kWhitespaceBpe || t == TokenizerType::kHybridDna;
}

absl::Status Annotate(const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat("tokenizer: ", s.message()));
}

// Reads an optional integer key into *out; wrong types are errors.
absl::Status ReadOptionalInt(const gguf::GgufFile& f, const char* key,
                             std::optional<int64_t>* out) {
  if (!f.Has(key)) return absl::OkStatus();
  absl::StatusOr<int64_t> v = f.GetInt(key);
  if (!v.ok()) return Annotate(v.status());
  *out = *v;
  return absl::OkStatus();
}

absl::Status ReadOptionalBool(const gguf::GgufFile& f, const char* key,
                              std::optional<bool>* out) {
  if (!f.Has(key)) return absl::OkStatus();
  absl::StatusOr<bool> v = f.GetBool(key);
  if (!v.ok()) return Annotate(v.status());
  *out = *v;
  return absl::OkStatus();
}

// tokenizer.ggml.scores: float32 or int32 array, optional.
absl::Status ReadScores(const gguf::GgufFile& f, std::vector<float>* out) {
  if (!f.Has(kScoresKey)) return absl::OkStatus();
  absl::StatusOr<const std::vector<double>*> floats =
      f.GetFloatArray(kScoresKey);
  if (floats.ok()) {
    out->assign((*floats)->begin(), (*floats)->end());
    return absl::OkStatus();
  }
  absl::StatusOr<const std::vector<int64_t>*> ints = f.GetIntArray(kScoresKey);
  if (!ints.ok()) return Annotate(floats.status());
  out->assign((*ints)->begin(), (*ints)->end());
  return absl::OkStatus();
}

absl::Status ReadTokenTypes(const gguf::GgufFile& f,
                            std::vector<int32_t>* out) {
  if (!f.Has(kTypesKey)) return absl::OkStatus();
  absl::StatusOr<const std::vector<int64_t>*> ints = f.GetIntArray(kTypesKey);
  if (!ints.ok()) return Annotate(ints.status());
  out->reserve((*ints)->size());
  for (int64_t t : **ints) {
    out->push_back(static_cast<int32_t>(std::clamp<int64_t>(t, -1, 1000)));
  }
  return absl::OkStatus();
}

// tokenizer.ggml.model -> type; UNIMPLEMENTED for models llama.cpp knows
// but that have no vocabulary to tokenize with (none / no_vocab) and for
// unknown names.
absl::StatusOr<TokenizerType> TypeForModel(const std::string& model) {
  static const std::pair<const char*, TokenizerType> kModels[] = {
      {"llama", TokenizerType::kSentencePiece},
      {"gpt2", TokenizerType::kBpe},
      {"gemma4", TokenizerType::kGemma4},
      {"t5", TokenizerType::kUnigram},
      {"rwkv", TokenizerType::kRwkv},
      {"bert", TokenizerType::kWordPiece},
      {"plamo2", TokenizerType::kPlamo2},
      {"hybriddna", TokenizerType::kHybridDna},
      {"whitespace", TokenizerType::kWhitespaceBpe},
  };
  for (const auto& [name, type] : kModels) {
    if (model == name) return type;
  }
  return absl::UnimplementedError(
      absl::StrCat("tokenizer: unsupported ", kModelKey, " '", model, "'"));
}

// tokenizer.ggml.precompiled_charsmap: an int8/uint8 array, optional.
absl::Status ReadCharsmap(const gguf::GgufFile& f, std::vector<uint8_t>* out) {
  constexpr char kKey[] = "tokenizer.ggml.precompiled_charsmap";
  if (!f.Has(kKey)) return absl::OkStatus();
  absl::StatusOr<const std::vector<int64_t>*> ints = f.GetIntArray(kKey);
  if (!ints.ok()) return Annotate(ints.status());
  out->reserve((*ints)->size());
  for (int64_t v : **ints) out->push_back(static_cast<uint8_t>(v));
  return absl::OkStatus();
}

absl::Status ReadModelAndLists(const gguf::GgufFile& f, TokenizerConfig* c) {
  absl::StatusOr<std::string> model = f.GetString(kModelKey);
  if (!model.ok()) return Annotate(model.status());
  absl::StatusOr<TokenizerType> type = TypeForModel(*model);
  if (!type.ok()) return type.status();
  c->type = *type;
  if (f.Has(kPreKey)) {
    absl::StatusOr<std::string> pre = f.GetString(kPreKey);
    if (!pre.ok()) return Annotate(pre.status());
    c->pre = *pre;
  }
  absl::StatusOr<const std::vector<std::string>*> tokens =
      f.GetStringArray(kTokensKey);
  if (!tokens.ok()) return Annotate(tokens.status());
  c->tokens = **tokens;
  // Kimi-K2 vocabularies may come without merges, as llama.cpp accepts.
  const bool merges_optional = c->pre == "kimi-k2" && !f.Has(kMergesKey);
  if (IsBpeType(c->type) && !merges_optional) {
    absl::StatusOr<const std::vector<std::string>*> merges =
        f.GetStringArray(kMergesKey);
    if (!merges.ok()) return Annotate(merges.status());
    c->merges = **merges;
  }
  if (absl::Status s = ReadCharsmap(f, &c->precompiled_charsmap); !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadScores(f, &c->scores); !s.ok()) return s;
  return ReadTokenTypes(f, &c->token_types);
}

absl::Status ReadSpecial(const gguf::GgufFile& f, TokenizerConfig* c) {
  const std::pair<const char*, std::optional<int64_t>*> ids[] = {
      {kBosKey, &c->bos_id},
      {kEosKey, &c->eos_id},
      {"tokenizer.ggml.unknown_token_id", &c->unk_id},
      {"tokenizer.ggml.eot_token_id", &c->eot_id},
      {"tokenizer.ggml.eom_token_id", &c->eom_id},
      {"tokenizer.ggml.fim_pre_token_id", &c->fim_pre_id},
      {"tokenizer.ggml.fim_suf_token_id", &c->fim_suf_id},
      {"tokenizer.ggml.fim_mid_token_id", &c->fim_mid_id},
      {"tokenizer.ggml.prefix_token_id", &c->fim_pre_id},
      {"tokenizer.ggml.suffix_token_id", &c->fim_suf_id},
      {"tokenizer.ggml.middle_token_id", &c->fim_mid_id},
      {"tokenizer.ggml.fim_pad_token_id", &c->fim_pad_id},
      {"tokenizer.ggml.fim_rep_token_id", &c->fim_rep_id},
      {"tokenizer.ggml.fim_sep_token_id", &c->fim_sep_id},
      {"tokenizer.ggml.seperator_token_id",
       &c->sep_id},  // llama.cpp's spelling
  };
  for (const auto& [key, out] : ids) {
    if (absl::Status s = ReadOptionalInt(f, key, out); !s.ok()) return s;
  }
  const std::pair<const char*, std::optional<bool>*> flags[] = {
      {kAddBosKey, &c->add_bos},
      {kAddEosKey, &c->add_eos},
      {"tokenizer.ggml.add_space_prefix", &c->add_space_prefix},
      {"tokenizer.ggml.remove_extra_whitespaces", &c->remove_extra_whitespaces},
      {"tokenizer.ggml.normalizer.lowercase", &c->lowercase},
      {"tokenizer.ggml.normalizer.strip_accents", &c->strip_accents},
  };
  for (const auto& [key, out] : flags) {
    if (absl::Status s = ReadOptionalBool(f, key, out); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Fills vocab texts, scores, attributes and the text index (moves tokens).
absl::Status BuildVocab(TokenizerConfig& c, Vocab* v) {
  const size_t n = c.tokens.size();
  if (n == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer: ", kTokensKey, " is empty"));
  }
  if (n > (1u << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer: ", kTokensKey, " has too many entries"));
  }
  if (!c.scores.empty() && c.scores.size() < n) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer: ", kScoresKey, " has ", c.scores.size(),
                     " entries, fewer than the ", n, " tokens"));
  }
  if (!c.token_types.empty() && c.token_types.size() < n) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer: ", kTypesKey, " has ", c.token_types.size(),
                     " entries, fewer than the ", n, " tokens"));
  }
  v->text = std::move(c.tokens);
  v->score.assign(n, 0.0f);
  v->attr.assign(n, kAttrNormal);
  v->index.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (v->text[i].empty()) v->text[i] = absl::StrCat("[EMPTY_", i, "]");
    if (!c.scores.empty()) v->score[i] = c.scores[i];
    if (!c.token_types.empty()) v->attr[i] = AttrFromGgufType(c.token_types[i]);
  }
  for (size_t i = 0; i < n; ++i) {
    auto [it, inserted] = v->index.emplace(v->text[i], static_cast<int32_t>(i));
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer: duplicate token in ", kTokensKey, ": ids ",
                       it->second, " and ", i));
    }
  }
  return absl::OkStatus();
}

// `configured` if set and in range, else `fallback` if in range, else -1.
int32_t PickId(const Vocab& v, const std::optional<int64_t>& configured,
               int64_t fallback) {
  if (configured && *configured >= 0 && *configured < v.size()) {
    return static_cast<int32_t>(*configured);
  }
  return fallback >= 0 && fallback < v.size() ? static_cast<int32_t>(fallback)
                                              : -1;
}

// First token (in list order) whose text is one of `texts`, or -1.
int32_t FindByText(const Vocab& v, std::initializer_list<const char*> texts) {
  for (const char* t : texts) {
    const int32_t id = v.Find(t);
    if (id >= 0) return id;
  }
  return -1;
}

// Picks the configured id, else auto-detects by text (marking it control).
int32_t DetectSpecial(Vocab* v, const std::optional<int64_t>& configured,
                      std::initializer_list<const char*> texts) {
  int32_t id = PickId(*v, configured, -1);
  if (id >= 0) return id;
  id = FindByText(*v, texts);
  if (id >= 0) v->attr[id] |= kAttrControl;
  return id;
}

// llama.cpp's default BOS / EOS / UNK ids for a tokenizer type.
struct DefaultIds {
  int64_t bos, eos, unk;
};
DefaultIds DefaultsFor(TokenizerType type) {
  switch (type) {
    case TokenizerType::kSentencePiece:
    case TokenizerType::kPlamo2:
      return {1, 2, 0};
    case TokenizerType::kBpe:
    case TokenizerType::kWhitespaceBpe:
    case TokenizerType::kHybridDna:
      return {11, 11, -1};
    case TokenizerType::kWordPiece:
      return {101, -1, 100};
    case TokenizerType::kUnigram:
      return {-1, 1, 2};
    case TokenizerType::kGemma4:
    case TokenizerType::kRwkv:
      return {-1, -1, -1};
  }
  return {-1, -1, -1};
}

// Texts llama.cpp recognizes as end of turn (in its order of preference).
constexpr std::initializer_list<const char*> kEotTexts = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
    "<end_of_utterance>"};

// llama.cpp's attribute fixes by token text: control tokens named "unused"
// are unused too (Unigram may then match them); gpt-oss's message markers
// are user-defined (always matched and rendered).
void MarkByText(Vocab* v) {
  for (int32_t id = 0; id < v->size(); ++id) {
    if ((v->attr[id] & kAttrControl) &&
        v->text[id].find("unused") != std::string::npos) {
      v->attr[id] |= kAttrUnused;
    }
  }
  for (const char* text :
       {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    const int32_t id = v->Find(text);
    if (id >= 0) v->attr[id] = kAttrUserDefined;
  }
}

absl::Status ResolveSpecialIds(const TokenizerConfig& c, bool no_default_bos,
                               Tokenizer::Impl* impl) {
  Vocab& v = impl->vocab;
  const DefaultIds d = DefaultsFor(c.type);
  impl->bos = PickId(v, c.bos_id, no_default_bos ? -1 : d.bos);
  impl->eos = PickId(v, c.eos_id, d.eos);
  impl->unk = PickId(v, c.unk_id, d.unk);
  if (c.add_bos) impl->add_bos = *c.add_bos;
  if (c.add_eos) impl->add_eos = *c.add_eos;
  if (impl->add_bos && impl->bos < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer: ", kAddBosKey, " is true, but ", kBosKey, " is not set"));
  }
  if (impl->add_eos && impl->eos < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer: ", kAddEosKey, " is true, but ", kEosKey, " is not set"));
  }
  if (c.type == TokenizerType::kWordPiece) {
    impl->sep = PickId(v, c.sep_id, 102);
    if (impl->sep < 0 || impl->unk < 0) {
      return absl::InvalidArgumentError(
          "tokenizer: a bert vocabulary needs tokenizer.ggml.seperator_token_id"
          " and tokenizer.ggml.unknown_token_id (or ids 102 and 100)");
    }
  }
  impl->eot = DetectSpecial(&v, c.eot_id, kEotTexts);
  impl->eom = DetectSpecial(&v, c.eom_id, {"<|eom_id|>"});
  // FIM prefix / suffix / middle: only marked control, as llama.cpp does.
  DetectSpecial(
      &v, c.fim_pre_id,
      {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
       "<\xEF\xBD\x9C"
       "fim\xE2\x96\x81"
       "begin\xEF\xBD\x9C>",
       "<PRE>", "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"});
  DetectSpecial(
      &v, c.fim_suf_id,
      {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
       "<\xEF\xBD\x9C"
       "fim\xE2\x96\x81"
       "hole\xEF\xBD\x9C>",
       "<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"});
  DetectSpecial(
      &v, c.fim_mid_id,
      {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
       "<\xEF\xBD\x9C"
       "fim\xE2\x96\x81"
       "end\xEF\xBD\x9C>",
       "<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"});
  MarkByText(&v);
  return absl::OkStatus();
}

// Texts llama.cpp treats as end of generation wherever they appear.
constexpr std::initializer_list<const char*> kEogTexts = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
    "[e~["};

// Drops `drop` from the sorted set `eog` when every text in `when` names a
// member, giving the dropped token attribute `attr` (llama.cpp's exceptions).
void DropEogIf(Vocab* v, std::vector<int32_t>* eog, const char* drop,
               std::initializer_list<const char*> when, uint32_t attr) {
  auto member = [&](const char* text) {
    const int32_t id = v->Find(text);
    return id >= 0 && std::binary_search(eog->begin(), eog->end(), id);
  };
  if (!member(drop)) return;
  for (const char* t : when) {
    if (!member(t)) return;
  }
  const int32_t id = v->Find(drop);
  eog->erase(std::lower_bound(eog->begin(), eog->end(), id));
  v->attr[id] = attr;
}

// End-of-generation set: FIM pad/repo/file-sep, tokens llama.cpp recognizes
// by text (marked control), EOS, EOT and EOM, less llama.cpp's exceptions.
void BuildEogSet(const TokenizerConfig& c, Tokenizer::Impl* impl) {
  Vocab& v = impl->vocab;
  std::vector<int32_t> eog;
  const int32_t fim[] = {
      DetectSpecial(
          &v, c.fim_pad_id,
          {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}),
      DetectSpecial(&v, c.fim_rep_id,
                    {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
                     "<reponame>"}),
      DetectSpecial(&v, c.fim_sep_id, {"<|file_sep|>"}),
  };
  for (int32_t id : fim) eog.push_back(id);
  for (const char* text : kEogTexts) {
    const int32_t id = v.Find(text);
    if (id < 0) continue;
    v.attr[id] |= kAttrControl;
    eog.push_back(id);
  }
  eog.push_back(impl->eos);
  eog.push_back(impl->eot);
  eog.push_back(impl->eom);
  eog.erase(std::remove(eog.begin(), eog.end(), -1), eog.end());
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  // o200k_harmony / solar-open: <|end|> ends a message, not the generation.
  DropEogIf(&v, &eog, "<|end|>", {"<|return|>", "<|call|>"}, kAttrUserDefined);
  DropEogIf(&v, &eog, "<|end|>", {"<|calls|>", "<|flush|>"}, kAttrUserDefined);
  // Gemma 4: </s> is an ordinary token.
  DropEogIf(&v, &eog, "</s>", {"<|tool_response>"}, kAttrNormal);
  impl->eog_ids = std::move(eog);
}

void BuildSpecialCache(Tokenizer::Impl* impl) {
  const Vocab& v = impl->vocab;
  for (int32_t id = 0; id < v.size(); ++id) {
    if (v.attr[id] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) {
      impl->special_ids.push_back(id);
    }
  }
  std::stable_sort(impl->special_ids.begin(), impl->special_ids.end(),
                   [&v](int32_t a, int32_t b) {
                     return v.text[a].size() > v.text[b].size();
                   });
}

// BPE tables: merge ranks, pre-tokenizer and merger per the pre-tokenizer
// spec (gemma4: always the "gemma4" spec).
absl::Status BuildBpe(const TokenizerConfig& c,
                      const tokenizer_internal::PreTokenizerSpec& spec,
                      Tokenizer::Impl* impl) {
  absl::StatusOr<std::unique_ptr<tokenizer_internal::Pretokenizer>> pretok =
      tokenizer_internal::Pretokenizer::Create(spec.patterns);
  if (!pretok.ok()) return Annotate(pretok.status());
  impl->pretok = std::move(*pretok);
  impl->add_bos = spec.add_bos;
  impl->escape_whitespaces = spec.escape_whitespaces;
  impl->add_space_prefix = c.add_space_prefix.value_or(false);
  // llama.cpp lowercases "whitespace" segments unless the pre-tokenizer is
  // "whitespace" itself, and the normalizer key overrides both.
  impl->lowercase = c.lowercase.value_or(c.pre != "whitespace");
  if (c.type == TokenizerType::kHybridDna) {
    impl->dna_oov = impl->vocab.Find("<oov>");
  }
  impl->ranks.Build(c.merges);
  tokenizer_internal::BpeOptions options;
  options.ignore_merges = spec.ignore_merges;
  options.byte_encode = spec.byte_encode;
  options.whole_newline_runs = spec.whole_newline_runs;
  impl->bpe = std::make_unique<tokenizer_internal::BpeMerger>(
      &impl->vocab, &impl->ranks, options);
  return absl::OkStatus();
}

absl::StatusOr<tokenizer_internal::PreTokenizerSpec> SpecFor(
    const TokenizerConfig& c) {
  absl::StatusOr<tokenizer_internal::PreTokenizerSpec> spec =
      tokenizer_internal::PreTokenizerSpecFor(
          c.type == TokenizerType::kGemma4 ? "gemma4" : c.pre);
  if (!spec.ok()) {
    return absl::UnimplementedError(
        absl::StrCat("tokenizer: ", kPreKey, ": ", spec.status().message()));
  }
  return spec;
}

// Type-specific tables (the BPE ones are built by BuildBpe).
absl::Status BuildAlgorithm(const TokenizerConfig& c, Tokenizer::Impl* impl) {
  switch (c.type) {
    case TokenizerType::kSentencePiece:
      impl->add_bos = true;
      impl->add_space_prefix = c.add_space_prefix.value_or(true);
      impl->spm = std::make_unique<tokenizer_internal::SpmMerger>(
          &impl->vocab, PickId(impl->vocab, c.unk_id, 0));
      return absl::OkStatus();
    case TokenizerType::kUnigram: {
      impl->add_eos = true;
      impl->add_space_prefix = c.add_space_prefix.value_or(false);
      tokenizer_internal::UnigramOptions options;
      options.add_space_prefix = impl->add_space_prefix;
      options.remove_extra_whitespaces =
          c.remove_extra_whitespaces.value_or(false);
      options.unk_id = PickId(impl->vocab, c.unk_id, 2);
      absl::StatusOr<std::unique_ptr<tokenizer_internal::OtherModel>> m =
          tokenizer_internal::MakeUnigram(&impl->vocab, options,
                                          c.precompiled_charsmap);
      if (!m.ok()) return Annotate(m.status());
      impl->other = std::move(*m);
      return absl::OkStatus();
    }
    case TokenizerType::kRwkv:
      impl->other = tokenizer_internal::MakeRwkv(&impl->vocab);
      return absl::OkStatus();
    case TokenizerType::kWordPiece: {
      tokenizer_internal::WordPieceOptions options;
      options.lowercase = c.lowercase.value_or(true);
      options.strip_accents = c.strip_accents.value_or(options.lowercase);
      options.unk_id = PickId(impl->vocab, c.unk_id, 100);
      impl->other = tokenizer_internal::MakeWordPiece(&impl->vocab, options);
      return absl::OkStatus();
    }
    case TokenizerType::kPlamo2: {
      absl::StatusOr<std::unique_ptr<tokenizer_internal::OtherModel>> m =
          tokenizer_internal::MakePlamo2(&impl->vocab);
      if (!m.ok()) return Annotate(m.status());
      impl->other = std::move(*m);
      return absl::OkStatus();
    }
    case TokenizerType::kBpe:
    case TokenizerType::kGemma4:
    case TokenizerType::kWhitespaceBpe:
    case TokenizerType::kHybridDna:
      break;
  }
  return absl::OkStatus();
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(
    const gguf::GgufFile& file) {
  TokenizerConfig config;
  if (absl::Status s = ReadModelAndLists(file, &config); !s.ok()) return s;
  if (absl::Status s = ReadSpecial(file, &config); !s.ok()) return s;
  return FromConfig(std::move(config));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromConfig(
    TokenizerConfig config) {
  auto impl = std::make_unique<Impl>();
  impl->type = config.type;
  const bool bpe = IsBpeType(config.type);
  tokenizer_internal::PreTokenizerSpec spec;
  if (bpe) {
    absl::StatusOr<tokenizer_internal::PreTokenizerSpec> s = SpecFor(config);
    if (!s.ok()) return s.status();
    spec = std::move(*s);
  }
  if (absl::Status s = BuildVocab(config, &impl->vocab); !s.ok()) return s;
  if (absl::Status s = bpe ? BuildBpe(config, spec, impl.get())
                           : BuildAlgorithm(config, impl.get());
      !s.ok()) {
    return s;
  }
  // Gemma 4 always adds BOS; WordPiece always adds [CLS] (and [SEP]).
  if (spec.force_add_bos || config.type == TokenizerType::kWordPiece) {
    config.add_bos = true;
  }
  if (absl::Status s =
          ResolveSpecialIds(config, spec.no_default_bos, impl.get());
      !s.ok()) {
    return s;
  }
  BuildEogSet(config, impl.get());
  BuildSpecialCache(impl.get());
  impl->pieces.resize(impl->vocab.size());
  for (int32_t id = 0; id < impl->vocab.size(); ++id) {
    impl->pieces[id] = tokenizer_internal::ComputePiece(*impl, id);
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

}  // namespace ckv
