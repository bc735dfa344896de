// PLaMo-2 encoder (tokenizer.ggml.model "plamo2"), as llama.cpp's: over code
// points, the segmentation with the lowest total cost, where a token costs
// minus round(score * 1e4) and a code point no token covers costs 1e7 and
// becomes the byte tokens of its UTF-8 encoding. Among equal costs the
// longer token at a position wins, the byte fallback last.

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "model/tokenizer/other_models.h"
#include "model/tokenizer/utf8.h"

namespace ckv::tokenizer_internal {
namespace {

constexpr int64_t kUnknownCost = 10000000;
constexpr int64_t kInvalidScore = -20000000;  // rounded scores <= this: unused

// "<0xXX>" (either hex case) -> the byte, else -1.
int ByteOfToken(absl::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') {
    return -1;
  }
  int value = 0;
  for (char c : text.substr(3, 2)) {
    const int d = (c >= '0' && c <= '9')   ? c - '0'
                  : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                  : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                           : -1;
    if (d < 0) return -1;
    value = value * 16 + d;
  }
  return value;
}

class Plamo2 : public OtherModel {
 public:
  explicit Plamo2(const Vocab* vocab) : vocab_(vocab) {}

  // Indexes the candidate tokens (every non-byte token whose rounded score
  // is usable); INVALID_ARGUMENT if a byte token <0x00>..<0xFF> is missing.
  absl::Status Init() {
    bytes_.assign(256, -1);
    for (int32_t id = 0; id < vocab_->size(); ++id) {
      const std::string& text = vocab_->text[id];
      if (vocab_->attr[id] & kAttrByte) {
        const int b = ByteOfToken(text);
        if (b >= 0) bytes_[b] = id;
        continue;
      }
      const double scaled = std::round(double{vocab_->score[id]} * 1e4);
      if (!std::isfinite(scaled) || scaled <= double{kInvalidScore}) continue;
      const int64_t score =
          static_cast<int64_t>(std::min(scaled, double{INT32_MAX}));
      candidates_[text] = {id, score};
      max_len_ = std::max(max_len_, CodePoints(text));
    }
    for (int b = 0; b < 256; ++b) {
      if (bytes_[b] < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("plamo2 vocabulary has no byte token for byte ", b));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Encode(absl::string_view text,
                      std::vector<int32_t>* out) const override {
    std::vector<size_t> offsets;  // byte offset of each code point, then end
    std::vector<uint32_t> cps;
    for (size_t i = 0; i < text.size();) {
      uint32_t cp = 0xFFFD;
      const int len = DecodeUtf8Char(text.substr(i), &cp);
      if (len <= 0) {
        return absl::InvalidArgumentError("plamo2: text is not valid UTF-8");
      }
      if (!(i == 0 && cp == 0xFEFF)) {  // a leading BOM is skipped
        offsets.push_back(i);
        cps.push_back(cp);
      }
      i += static_cast<size_t>(len);
    }
    offsets.push_back(text.size());
    const size_t n = cps.size();
    std::vector<int64_t> cost(n + 1, 0);
    std::vector<int32_t> best_len(n + 1, 1), best_id(n + 1, -1);
    for (size_t i = n; i-- > 0;) {
      cost[i] = INT64_MAX;
      for (size_t k = std::min(n - i, max_len_); k >= 1; --k) {
        auto it = candidates_.find(
            text.substr(offsets[i], offsets[i + k] - offsets[i]));
        if (it == candidates_.end()) continue;
        const int64_t c = cost[i + k] - it->second.score;
        if (c < cost[i]) {
          cost[i] = c;
          best_len[i] = static_cast<int32_t>(k);
          best_id[i] = it->second.id;
        }
      }
      if (cost[i + 1] + kUnknownCost < cost[i]) {
        cost[i] = cost[i + 1] + kUnknownCost;
        best_len[i] = 1;
        best_id[i] = -1;
      }
    }
    for (size_t i = 0; i < n; i += static_cast<size_t>(best_len[i])) {
      if (best_id[i] >= 0) {
        out->push_back(best_id[i]);
        continue;
      }
      for (size_t b = offsets[i]; b < offsets[i + 1]; ++b) {
        out->push_back(bytes_[static_cast<uint8_t>(text[b])]);
      }
    }
    return absl::OkStatus();
  }

 private:
  struct Candidate {
    int32_t id;
    int64_t score;  // round(score * 1e4)
  };

  static size_t CodePoints(absl::string_view s) {
    size_t n = 0;
    for (char c : s) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
    return n;
  }

  const Vocab* vocab_;
  std::vector<int32_t> bytes_;
  absl::flat_hash_map<std::string, Candidate> candidates_;
  size_t max_len_ = 0;  // longest candidate, in code points
};

}  // namespace

absl::StatusOr<std::unique_ptr<OtherModel>> MakePlamo2(const Vocab* vocab) {
  auto model = std::make_unique<Plamo2>(vocab);
  if (absl::Status s = model->Init(); !s.ok()) return s;
  return std::unique_ptr<OtherModel>(std::move(model));
}

}  // namespace ckv::tokenizer_internal
