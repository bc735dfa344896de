#include "model/tokenizer/merge.h"

#include <algorithm>

#include "model/tokenizer/utf8.h"

namespace ckv::tokenizer_internal {
namespace {

// Heap orders: std::push_heap keeps the "largest" element at the front, so
// "less" means "merged later".
bool SpmLater(const Bigram& a, const Bigram& b) {
  return a.score < b.score || (a.score == b.score && a.left > b.left);
}
bool BpeLater(const Bigram& a, const Bigram& b) {
  return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
}

// Splits `text` into one symbol per UTF-8 character (llama.cpp lead-byte
// lengths, clipped at the end) in a doubly linked list.
void SplitChars(absl::string_view text, std::vector<Symbol>* symbols) {
  symbols->clear();
  size_t offs = 0;
  int index = 0;
  while (offs < text.size()) {
    const size_t len = std::min<size_t>(
        Utf8LenFromLead(static_cast<uint8_t>(text[offs])), text.size() - offs);
    Symbol sym;
    sym.start = static_cast<uint32_t>(offs);
    sym.n = static_cast<uint32_t>(len);
    offs += len;
    sym.prev = index - 1;
    sym.next = offs == text.size() ? -1 : index + 1;
    ++index;
    symbols->push_back(sym);
  }
}

// Pops bigrams in `later` order, merging each one that is still current and
// calling add(left, right) for the new neighbour pairs.
template <typename Later, typename AddFn>
void RunMerges(std::vector<Symbol>& symbols, std::vector<Bigram>& heap,
               Later later, AddFn add) {
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Bigram bigram = heap.back();
    heap.pop_back();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    if (left.n == 0 || right.n == 0 || left.n != bigram.left_n ||
        right.n != bigram.right_n) {
      continue;  // outdated: one side already merged with something else
    }
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    add(left.prev, bigram.left);
    add(bigram.left, left.next);
  }
}

}  // namespace

SpmMerger::SpmMerger(const Vocab* vocab, int32_t unk_id) : vocab_(vocab) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const char name[6] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    int32_t id = vocab->Find(absl::string_view(name, 6));
    if (id < 0) {
      const char raw = static_cast<char>(b);
      id = vocab->Find(absl::string_view(&raw, 1));
    }
    byte_token_[b] = id >= 0 ? id : unk_id;
  }
}

void SpmMerger::TryAddBigram(absl::string_view text, int left, int right,
                             MergeWorkspace* ws) const {
  if (left < 0 || right < 0) return;
  const Symbol& l = ws->symbols[left];
  const Symbol& r = ws->symbols[right];
  const int32_t id = vocab_->Find(text.substr(l.start, l.n + r.n));
  if (id < 0) return;
  ws->heap.push_back(Bigram{left, right, l.n, r.n, vocab_->score[id], 0});
  std::push_heap(ws->heap.begin(), ws->heap.end(), SpmLater);
}

void SpmMerger::Encode(absl::string_view text, MergeWorkspace* ws,
                       std::vector<int32_t>* out) const {
  SplitChars(text, &ws->symbols);
  ws->heap.clear();
  for (int i = 1; i < static_cast<int>(ws->symbols.size()); ++i) {
    TryAddBigram(text, i - 1, i, ws);
  }
  RunMerges(ws->symbols, ws->heap, SpmLater,
            [&](int left, int right) { TryAddBigram(text, left, right, ws); });
  if (ws->symbols.empty()) return;
  for (int i = 0; i != -1; i = ws->symbols[i].next) {
    const Symbol& sym = ws->symbols[i];
    const absl::string_view piece = text.substr(sym.start, sym.n);
    const int32_t id = vocab_->Find(piece);
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    for (char c : piece) {
      const int32_t byte_id = byte_token_[static_cast<uint8_t>(c)];
      if (byte_id >= 0) out->push_back(byte_id);
    }
  }
}

BpeMerger::BpeMerger(const Vocab* vocab, const MergeRanks* ranks,
                     BpeOptions options)
    : vocab_(vocab), ranks_(ranks), options_(options) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const char name[6] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    byte_token_[b] = vocab->Find(absl::string_view(name, 6));
  }
}

void BpeMerger::TryAddBigram(absl::string_view word, int left, int right,
                             MergeWorkspace* ws) const {
  if (left < 0 || right < 0) return;
  const Symbol& l = ws->symbols[left];
  const Symbol& r = ws->symbols[right];
  const int rank =
      ranks_->Find(word.substr(l.start, l.n), word.substr(r.start, r.n));
  if (rank < 0) return;
  ws->heap.push_back(Bigram{left, right, l.n, r.n, 0.0f, rank});
  std::push_heap(ws->heap.begin(), ws->heap.end(), BpeLater);
}

void BpeMerger::EmitSymbol(absl::string_view text,
                           std::vector<int32_t>* out) const {
  const int32_t id = vocab_->Find(text);
  if (id >= 0) {
    out->push_back(id);
    return;
  }
  for (size_t i = 0; i < text.size(); ++i) {
    const int32_t byte_id = options_.byte_encode
                                ? vocab_->Find(text.substr(i, 1))
                                : byte_token_[static_cast<uint8_t>(text[i])];
    if (byte_id >= 0) out->push_back(byte_id);
  }
}

void BpeMerger::EncodePiece(absl::string_view piece, MergeWorkspace* ws,
                            std::vector<int32_t>* out) const {
  std::string& word = ws->word;
  word.clear();
  if (options_.byte_encode) {
    for (char c : piece) {
      const absl::string_view u = ByteToUnicode(static_cast<uint8_t>(c));
      word.append(u.data(), u.size());
    }
  } else {
    word.assign(piece.data(), piece.size());
  }
  if (word.empty()) return;
  const bool whole = options_.ignore_merges ||
                     (options_.whole_newline_runs &&
                      word.find_first_not_of('\n') == std::string::npos);
  if (whole) {
    const int32_t id = vocab_->Find(word);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  SplitChars(word, &ws->symbols);
  ws->heap.clear();
  for (int i = 1; i < static_cast<int>(ws->symbols.size()); ++i) {
    TryAddBigram(word, i - 1, i, ws);
  }
  RunMerges(ws->symbols, ws->heap, BpeLater,
            [&](int left, int right) { TryAddBigram(word, left, right, ws); });
  for (int i = 0; i != -1; i = ws->symbols[i].next) {
    const Symbol& sym = ws->symbols[i];
    EmitSymbol(absl::string_view(word).substr(sym.start, sym.n), out);
  }
}

}  // namespace ckv::tokenizer_internal
