#include "model/tokenizer/vocab.h"

namespace ckv::tokenizer_internal {

uint32_t AttrFromGgufType(int64_t type) {
  switch (type) {
    case 1:
      return kAttrNormal;
    case 2:
      return kAttrUnknown;
    case 3:
      return kAttrControl;
    case 4:
      return kAttrUserDefined;
    case 5:
      return kAttrUnused;
    case 6:
      return kAttrByte;
    default:
      return kAttrUndefined;  // 0 = undefined, anything else
  }
}

void MergeRanks::Build(const std::vector<std::string>& rules) {
  size_t total = 0;
  for (const std::string& r : rules) total += r.size();
  arena_.clear();
  arena_.reserve(total);  // never reallocated below: keys stay valid
  ranks_.clear();
  ranks_.reserve(rules.size());
  for (size_t i = 0; i < rules.size(); ++i) {
    const std::string& rule = rules[i];
    const size_t base = arena_.size();
    arena_.append(rule);
    const absl::string_view stored(arena_.data() + base, rule.size());
    const size_t pos = rule.size() > 1 ? rule.find(' ', 1) : std::string::npos;
    Key key;
    if (pos != std::string::npos) {
      key = Key(stored.substr(0, pos), stored.substr(pos + 1));
    }
    ranks_.emplace(key, static_cast<int>(i));
  }
}

}  // namespace ckv::tokenizer_internal
