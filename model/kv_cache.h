// The KV cache interface the transformer talks to. Attention never reads K,V
// directly: each layer appends its new keys/values, then asks the cache which
// rows each query head should attend to (a list of KvSpans). A dense cache
// answers "everything so far"; the clustered store answers with sinks, the
// selected clusters and the tail.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/op_types.h"

namespace ckv {

// What the query heads of one layer attend to. per_head[h] indexes into
// `spans`; the cache owns the memory the spans point to until the next call.
struct AttendSet {
  std::vector<kernels::KvSpan> spans;
  std::vector<kernels::KvSpanList> per_head;

  void Clear() {
    spans.clear();
    per_head.clear();
  }
};

// The rows of `s` at positions >= min_pos. `s` must be a plain run (no
// index list, no explicit positions, rows in position order): row i is at
// position first_pos + i.
inline kernels::KvSpan SpanFrom(const kernels::KvSpan& s, int64_t min_pos) {
  const int64_t skip = std::clamp<int64_t>(min_pos - s.first_pos, 0, s.count);
  if (skip == 0) return s;
  kernels::KvSpan out = s;
  const int64_t bytes = skip * kernels::RowBytes(s.dtype, s.stride);
  out.k = static_cast<const uint8_t*>(s.k) + bytes;
  out.v = static_cast<const uint8_t*>(s.v) + bytes;
  out.count -= skip;
  out.first_pos += skip;
  return out;
}

// Oldest position a sliding window of `window` keys (> 0) lets any of the
// n_q queries see.
inline int64_t WindowStart(const int64_t* q_pos, int n_q, int64_t window) {
  const int64_t first = *std::min_element(q_pos, q_pos + n_q);
  return first - window + 1;
}

// Query of one layer: n_q tokens, all heads, post-RoPE.
struct LayerQuery {
  const float* q = nullptr;        // [n_q][n_heads][head_dim]
  const int64_t* q_pos = nullptr;  // [n_q]
  int n_q = 0;
};

// Where one appended token's K and V go when a backend writes them on its
// device (KvCache::AppendOnDevice): KV head h's row at k + h * head_stride
// elements (likewise v), 16-bit rows of the cache's type; device addresses
// the host never dereferences.
struct AppendTarget {
  uint16_t* k = nullptr;
  uint16_t* v = nullptr;
  int64_t head_stride = 0;                      // elements
  kernels::DType dtype = kernels::DType::kF16;  // F16 or BF16
};

// How appended tokens are grouped. kPrompt: the tokens of one Forward call
// (a prefill call) close as one segment at its end. kGenerated: decoded or
// appended tokens join the tail, which closes a segment every `window`.
enum class AppendKind { kPrompt, kGenerated };

class KvCache {
 public:
  virtual ~KvCache() = default;

  // Tokens whose K,V are stored in every layer (positions 0..n-1).
  virtual int64_t num_tokens() const = 0;

  // Prepares to append n tokens of `kind`. Fails (RESOURCE_EXHAUSTED) without
  // side effects if they do not fit; on success Append/Select/Commit follow.
  // Reserve(0, ...) drops an unused reservation.
  virtual absl::Status Reserve(int64_t n, AppendKind kind) = 0;

  // Stores K,V of the n reserved tokens of `layer` at positions
  // num_tokens()..num_tokens()+n-1. k, v: [n][n_kv_heads][head_dim], F32.
  virtual void Append(int layer, int64_t n, const float* k, const float* v) = 0;

  // Fills `out` with the rows each query head attends for `query`, which
  // includes the rows appended for this layer but not yet committed.
  virtual void Select(int layer, const LayerQuery& query, AttendSet* out) = 0;

  // Optional, in place of Append on a backend whose K,V are in device
  // memory: a cache that keeps device rows for what it appends (mirrors)
  // records the n reserved tokens of `layer` as appended and returns in
  // `targets` (n entries) where the backend writes their K,V; Select then
  // names those rows. Their host rows, which stay authoritative, arrive
  // through FillAppended before Commit; nothing between reads them. False:
  // nothing changed, and the backend calls Append.
  virtual bool AppendOnDevice(int /*layer*/, int64_t /*n*/,
                              std::vector<AppendTarget>* /*targets*/) {
    return false;
  }
  // The host copy of the oldest n tokens AppendOnDevice placed in `layer`
  // and not yet filled: k, v [n][n_kv_heads][head_dim] in the cache's
  // 16-bit type, the bits the device wrote.
  virtual void FillAppended(int /*layer*/, int64_t /*n*/, const uint16_t* /*k*/,
                            const uint16_t* /*v*/) {}

  // False when PrepareSelect and Select of `layer` for n_q query rows
  // read no query values (query.q may then be null): a backend with its
  // queries in device memory need not copy them to the host. Asked after
  // the layer's append, before PrepareSelect.
  virtual bool SelectReadsQueries(int /*layer*/, int64_t /*n_q*/) const {
    return true;
  }

  // Optional, before Append/Select of `layer` with the same query: a cache
  // whose selection a backend's planner runs (StoreEnv::planner) queues
  // that planning here, so that the backend plans every cache of the step
  // in one batch (LayerPlanner::RunQueued) before their Selects.
  virtual void PrepareSelect(int /*layer*/, const LayerQuery& /*query*/) {}

  // After the step's last Select, before Commit, once the backend has read
  // back every plan its planner made on the device: a cache whose Selects
  // named rows a device planner lists (StoreEnv::planner, DeviceRowLists)
  // does their bookkeeping from the plans here (statistics, recorded
  // selections). A backend that plans so calls it for every cache of the
  // step.
  virtual void FinishSelect() {}

  // Marks the n appended tokens as stored (after every layer appended them).
  virtual void Commit(int64_t n) = 0;
};

}  // namespace ckv
