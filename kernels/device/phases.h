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
// offsets into shared pools; thread_base[i] = sum of
// threads::ScoreItemThreads over items before i (the host plan's prefix),
// so one phase of total threads covers the batch, one thread per (item,
// query, cluster), or per (item, page) for a quest item (kind
// kScoreQuestPages: its F32 page bounds in the panel pool, the item's n_q
// queries' scores summed; the CPU's QuestScores bits).
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

}  // namespace ckv::kernels::device
