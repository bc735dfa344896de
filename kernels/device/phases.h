// Device ops of the sparse-attention step, written once as phase functions
// over device layouts (GPU.md, "Per sparse layer"). Each op's body is a
// sequence of phases (OpContext::Phase: n device threads, barriers between
// phases); on the fake each phase runs its threads in a seeded random
// order, so a phase whose result depends on thread order fails its tests.
// A CUDA runtime runs the same phase functions as kernels (issue 29).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/device/runtime.h"
#include "kernels/device/selection_threads.h"

namespace ckv::kernels::device {

// Centroids as F16 panels: panel p holds centroids [p*kPanelWidth,
// (p+1)*kPanelWidth), element-major: element d of centroid c is at
// (c / kPanelWidth) * dim * kPanelWidth + d * kPanelWidth + c % kPanelWidth
// (the CPU's PackCentroidPanels layout: the CPU's exact bits).
inline constexpr int kPanelWidth = 16;
int64_t PanelElements(int64_t n, int dim);

// scores[j * ld + c] = the chain acc = fma(q[j][d], f16(centroid_c[d]), acc)
// over d = 0 .. dim-1 from acc = 0, for j < n_q, c < n: bit-identical to the
// CPU's CentroidScoresMulti. One device thread per (query, cluster).
struct ScoreClustersArgs {
  DevPtr q;  // float [n_q][dim]
  int n_q = 0;
  DevPtr panels;  // uint16 [PanelElements(n, dim)]
  int64_t n = 0;
  int dim = 0;
  DevPtr scores;  // float [n_q][ld], ld >= n
  int64_t ld = 0;
};
float ScoreCluster(const float* q, const uint16_t* panels, int64_t c, int dim);
Op ScoreClustersOp(const ScoreClustersArgs& a);

// The same over a batch of problems (every decode session x KV head of one
// layer, GQA group queries each): `items` describes problem i by element
// offsets into shared pools; thread_base[i] = sum of n_q * n over items
// before i (the host plan's prefix), so one phase of total threads covers
// the batch, one thread per (item, query, cluster).
using threads::ScoreItem;  // selection_threads.h (nvcc reads it too)
struct ScoreBatchArgs {
  DevPtr items;        // ScoreItem [n_items]
  DevPtr thread_base;  // int64 [n_items + 1]
  int32_t n_items = 0;
  int dim = 0;
  DevPtr q_pool;
  int64_t q_elems = 0;
  DevPtr panel_pool;
  int64_t panel_elems = 0;
  DevPtr score_pool;
  int64_t score_elems = 0;
  // thread_base[n_items] (the thread count), which the host plan knows.
  int64_t total_threads = 0;
};
Op ScoreClustersBatchOp(const ScoreBatchArgs& a);

// Every store's planned queries of a planner call, read from the query
// rows on the device (threads::QueryItem; items in device memory, their
// host copy declares the ranges): one thread per (item, KV head, element).
struct GatherQueriesArgs {
  DevPtr items;  // QueryItem [n_items]
  int32_t n_items = 0;
  DevPtr pool;  // float [pool_elems]: the queries' destination
  int64_t pool_elems = 0;
};
using threads::QueryItem;
Op GatherQueriesOp(const GatherQueriesArgs& a,
                   const std::vector<QueryItem>& host_items);

// ---- Residency: the cluster cache of one (session, layer, KV head) -------
// Blocks are named by a dense index the host plan assigns (segment base +
// cluster id). A resident block holds ceil(size / kPageRows) pages of the
// descriptor's fixed page range, linked through next_page; pages come from
// and return to a free stack. Semantics and counters are BlockCache's
// (model/kv/block_cache.h): a block counts once per step however often it
// is requested; a block not used in the last cache_steps steps is evicted
// at the end of a step (all of them when cache_steps = 0). Page numbers are
// assigned in request order and returned in block order, so they do not
// depend on thread order.
inline constexpr int kPageRows = 16;

struct ResidencyCounters {
  int64_t lookups = 0, hits = 0, misses = 0;
  int64_t hit_tokens = 0, miss_tokens = 0, h2d_bytes = 0;
  int64_t resident_tokens = 0;
  int32_t free_top = 0;  // pages on the free stack
  int32_t n_miss = 0;    // MissCopy entries written by the last resolve
  int32_t overflow = 0;  // 1 when a miss found too few free pages
  int32_t pad = 0;
};

struct BlockRequest {
  int32_t block = 0;
  int32_t size = 0;  // tokens
};

// What FetchMisses copies: the block's rows into its pages.
struct MissCopy {
  int32_t block = 0;
  int32_t first_page = 0;
  int32_t size = 0;
};

struct ResidencyTable {
  int32_t n_blocks = 0;
  int32_t n_pages = 0;
  DevPtr slot;        // int32 [n_blocks]: first page, -1 when not resident
  DevPtr last_used;   // int64 [n_blocks]
  DevPtr size;        // int32 [n_blocks]
  DevPtr first_req;   // int32 [n_blocks]: INT32_MAX between steps
  DevPtr next_page;   // int32 [n_pages]: -1 ends a block's list
  DevPtr free_stack;  // int32 [n_pages]
  DevPtr counters;    // ResidencyCounters
  DevPtr evict;       // int32 [n_blocks] scratch
};
// Bytes of the table's arrays, laid out from one base (MakeResidencyTable).
int64_t ResidencyTableBytes(int32_t n_blocks, int32_t n_pages);
ResidencyTable MakeResidencyTable(DevPtr base, int32_t n_blocks,
                                  int32_t n_pages);

// Empty cache: no block resident, every page free, counters zero.
Op InitResidencyOp(const ResidencyTable& t);

// Resolves the step's requests (the union over the KV group may repeat
// blocks): resolved[r] = first page of request r's block after the step's
// misses got pages; misses[0 .. n_miss) the copies to make, in request
// order. A miss that finds too few free pages is skipped (its block stays
// not resident, resolved -1) and sets counters.overflow, which the host
// turns into RESOURCE_EXHAUSTED. scratch: int32 [n_requests].
struct ResolveArgs {
  DevPtr requests;  // BlockRequest [n_requests]
  int32_t n_requests = 0;
  int64_t step = 0;
  int32_t bytes_per_token = 0;  // K and V of one row (h2d_bytes)
  DevPtr scratch;               // int32 [n_requests]
  DevPtr resolved;              // int32 [n_requests]
  DevPtr misses;                // MissCopy [n_requests]
};
Op ResolveResidencyOp(const ResidencyTable& t, const ResolveArgs& a);

// Evicts blocks with step - last_used >= cache_steps, returning their
// pages to the free stack in block order.
Op EndResidencyStepOp(const ResidencyTable& t, int64_t step, int cache_steps);

}  // namespace ckv::kernels::device
