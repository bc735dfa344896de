// ClusteredKvStore's appending half: reservations, rows appended on the
// host or placed on a device backend's mirrors, prompt segments, closing
// the tail and scheduling index jobs, Commit.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "model/kv/clustered_store.h"

namespace ckv {

using kernels::DType;

// ------------------------------------------------------------ appending

absl::Status ClusteredKvStore::Reserve(int64_t n, AppendKind kind) {
  if (n < 0 || n_tokens_ + n > config_.max_tokens) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV store holds at most ", config_.max_tokens, " tokens; ",
                     n_tokens_, " stored, ", n, " more requested"));
  }
  reserved_ = n;
  committed_in_call_ = 0;
  kind_ = kind;
  if (n == 0) return absl::OkStatus();
  // A prompt forms its own segment: close the tail before it.
  if (kind == AppendKind::kPrompt && open_rows_[0] > 0) {
    CloseOpenRows(open_rows_[0]);
  }
  GrowOpen(open_rows_[0] + n);
  return absl::OkStatus();
}

void ClusteredKvStore::GrowOpen(int64_t rows) {
  const int hd = shape_.head_dim;
  for (int l = 0; l < shape_.n_layers; ++l) {
    RowBuffer& b = open_[l];
    if (rows <= b.capacity) continue;
    const int64_t cap = std::max(rows, b.capacity * 2 + 64);
    for (auto* buf : {&b.k, &b.v}) {
      std::vector<uint16_t> grown(size_t{1} * shape_.n_kv_heads * cap * hd);
      for (int h = 0; h < shape_.n_kv_heads; ++h) {
        // copy_n: buf may be empty (data() null) when no row is open.
        std::copy_n(buf->data() + size_t{1} * h * b.capacity * hd,
                    open_rows_[l] * hd, &grown[size_t{1} * h * cap * hd]);
      }
      buf->swap(grown);
    }
    b.capacity = cap;
  }
}

void ClusteredKvStore::StoreRow(const float* src, uint16_t* dst) const {
  const bool f16 = config_.kv_dtype == DType::kF16;
  for (int i = 0; i < shape_.head_dim; ++i) {
    dst[i] = f16 ? kernels::F32ToF16(src[i]) : kernels::F32ToBF16(src[i]);
  }
}

RowBuffer& ClusteredKvStore::NextRow(int layer, int64_t i, bool* sink,
                                     int64_t** rows) {
  const int64_t pos = n_tokens_ + uncommitted_[layer] + i;
  *sink = pos < config_.sink_tokens;
  *rows = *sink ? &sink_rows_[layer] : &open_rows_[layer];
  return *sink ? sinks_[layer] : open_[layer];
}

bool ClusteredKvStore::EndAppend(int layer, int64_t n) {
  uncommitted_[layer] += n;
  const bool call_done = committed_in_call_ + uncommitted_[layer] == reserved_;
  return kind_ == AppendKind::kPrompt && call_done;
}

void ClusteredKvStore::Append(int layer, int64_t n, const float* k,
                              const float* v) {
  const int hd = shape_.head_dim, n_kv = shape_.n_kv_heads;
  for (int64_t i = 0; i < n; ++i) {
    bool sink;
    int64_t* rows;
    RowBuffer& b = NextRow(layer, i, &sink, &rows);
    b.Touch(*rows);
    for (int h = 0; h < n_kv; ++h) {
      const size_t dst = (size_t{1} * h * b.capacity + *rows) * hd;
      const size_t src = (size_t{1} * i * n_kv + h) * hd;
      StoreRow(k + src, &b.k[dst]);
      StoreRow(v + src, &b.v[dst]);
    }
    ++*rows;
  }
  if (EndAppend(layer, n)) FinishPromptLayer(layer);
}

bool ClusteredKvStore::AppendOnDevice(int layer, int64_t n,
                                      std::vector<AppendTarget>* targets) {
  if (!open_[layer].mirrored() || !sinks_[layer].mirrored()) return false;
  const int hd = shape_.head_dim, n_kv = shape_.n_kv_heads;
  targets->clear();
  for (int64_t i = 0; i < n; ++i) {
    bool sink;
    int64_t* rows;
    RowBuffer& b = NextRow(layer, i, &sink, &rows);
    AppendTarget t;
    t.k = b.PlaceOnMirror(n_kv, hd, *rows, 1, &t.v);
    t.head_stride = b.capacity * hd;
    t.dtype = config_.kv_dtype;
    targets->push_back(t);
    placed_[layer].push_back({sink, *rows});
    ++*rows;
  }
  // FillAppended finishes the prompt's layer once its rows are in.
  if (EndAppend(layer, n)) prompt_layer_due_[layer] = 1;
  return true;
}

void ClusteredKvStore::FillAppended(int layer, int64_t n, const uint16_t* k,
                                    const uint16_t* v) {
  const int hd = shape_.head_dim, n_kv = shape_.n_kv_heads;
  std::vector<PlacedRow>& placed = placed_[layer];
  size_t& next = placed_filled_[layer];
  for (int64_t i = 0; i < n && next < placed.size(); ++i, ++next) {
    const PlacedRow& p = placed[next];
    RowBuffer& b = p.sink ? sinks_[layer] : open_[layer];
    for (int h = 0; h < n_kv; ++h) {  // the mirror already holds these bits
      const size_t dst = (size_t{1} * h * b.capacity + p.row) * hd;
      const size_t src = (size_t{1} * i * n_kv + h) * hd;
      std::memcpy(&b.k[dst], k + src, sizeof(uint16_t) * hd);
      std::memcpy(&b.v[dst], v + src, sizeof(uint16_t) * hd);
    }
  }
  if (next < placed.size()) return;
  placed.clear();
  next = 0;
  if (prompt_layer_due_[layer]) {  // as Append does with the last rows
    prompt_layer_due_[layer] = 0;
    FinishPromptLayer(layer);
  }
}

// The prompt's last rows of `layer` are in: copy them into the pending
// segments (one per prompt block, or one) and start indexing that layer (on
// the worker when there is one).
void ClusteredKvStore::FinishPromptLayer(int layer) {
  const int64_t rows = open_rows_[layer];
  if (rows == 0) return;  // the whole prompt went to the sinks
  if (pending_.empty()) {
    const int64_t end = open_first_pos_ + rows;
    for (int64_t pos = open_first_pos_; pos < end;) {
      const int64_t next =
          prompt_block_ > 0
              ? std::min(end, (pos / prompt_block_ + 1) * prompt_block_)
              : end;
      pending_.push_back(std::make_shared<Segment>(
          Segment::NextUid(), pos, next - pos, shape_, env_.arena));
      pos = next;
    }
  }
  const int hd = shape_.head_dim;
  for (const auto& seg : pending_) {
    const int64_t first = seg->first_pos() - open_first_pos_;
    for (int h = 0; h < shape_.n_kv_heads; ++h) {
      const size_t src = (size_t{1} * h * open_[layer].capacity + first) * hd;
      std::memcpy(seg->mutable_keys(layer, h), &open_[layer].k[src],
                  size_t{2} * seg->size() * hd);
      std::memcpy(seg->mutable_values(layer, h), &open_[layer].v[src],
                  size_t{2} * seg->size() * hd);
    }
    if (NeedsIndex(layer)) ScheduleIndex(seg, {layer});
  }
}

void ClusteredKvStore::ScheduleIndex(const std::shared_ptr<Segment>& seg,
                                     std::vector<int> layers) {
  if (layers.empty()) return;
  auto job = [config = config_, indexes = indexes_, seg, layers,
              device = env_.index_builder] {
    if (device != nullptr) {
      IndexSegmentLayers(config, indexes, *seg, layers, *device);
      return;
    }
    CpuIndexBuilder builder;  // on the calling (worker) thread
    IndexSegmentLayers(config, indexes, *seg, layers, builder);
  };
  if (worker_ == nullptr) {
    job();
    return;
  }
  // Segments closed by decoding: the session's next step waits for them.
  const JobUrgency urgency =
      kind_ == AppendKind::kPrompt ? JobUrgency::kBulk : JobUrgency::kUrgent;
  const int64_t ticket = worker_->Submit(std::move(job), urgency);
  for (int l : layers) seg->layer(l).ticket = ticket;
}

// Moves the first `rows` open rows of every layer into a new segment.
void ClusteredKvStore::CloseOpenRows(int64_t rows) {
  auto seg = std::make_shared<Segment>(Segment::NextUid(), open_first_pos_,
                                       rows, shape_, env_.arena);
  const int hd = shape_.head_dim;
  std::vector<int> sparse;
  for (int l = 0; l < shape_.n_layers; ++l) {
    RowBuffer& b = open_[l];
    b.Touch(0);  // the rest moves down
    for (int h = 0; h < shape_.n_kv_heads; ++h) {
      uint16_t* k = &b.k[size_t{1} * h * b.capacity * hd];
      uint16_t* v = &b.v[size_t{1} * h * b.capacity * hd];
      std::memcpy(seg->mutable_keys(l, h), k, size_t{2} * rows * hd);
      std::memcpy(seg->mutable_values(l, h), v, size_t{2} * rows * hd);
      const size_t rest = size_t{2} * (open_rows_[l] - rows) * hd;
      std::memmove(k, k + rows * hd, rest);
      std::memmove(v, v + rows * hd, rest);
    }
    open_rows_[l] -= rows;
    if (NeedsIndex(l)) sparse.push_back(l);
  }
  open_first_pos_ += rows;
  segments_.push_back(seg);
  ScheduleIndex(seg, std::move(sparse));
}

void ClusteredKvStore::Commit(int64_t n) {
  n_tokens_ += n;
  committed_in_call_ += n;
  std::fill(uncommitted_.begin(), uncommitted_.end(), 0);
  if (committed_in_call_ < reserved_) return;
  if (kind_ == AppendKind::kPrompt) {
    if (!pending_.empty()) {
      for (auto& seg : pending_) {
        open_first_pos_ += seg->size();
        segments_.push_back(std::move(seg));
      }
      pending_.clear();
      std::fill(open_rows_.begin(), open_rows_.end(), 0);
    }
  } else {
    while (open_rows_[0] >= config_.window) CloseOpenRows(config_.window);
  }
  reserved_ = 0;
  committed_in_call_ = 0;
}

}  // namespace ckv
