#include "tests/device/plan_fixture.h"

#include <algorithm>

#include "kernels/cpu/cluster_ops.h"
#include "kernels/device/op_launchers.h"
#include "kernels/device/phases.h"
#include "tests/device/test_util.h"

namespace ckv::kernels::device {

// A segment of `n` rows with a k-cluster index on (layer 0, KV head 0):
// every cluster non-empty, members ascending; some centroids planted as
// duplicates (ties), with NaN, or with values past F16's range (±inf).
std::unique_ptr<Segment> MakeSegment(std::mt19937& rng, int64_t first_pos,
                                     int n, int head_dim) {
  KvShape shape;
  shape.n_layers = 1;
  shape.n_heads = 4;
  shape.n_kv_heads = 1;
  shape.head_dim = head_dim;
  auto seg = std::make_unique<Segment>(Segment::NextUid(), first_pos, n, shape);
  HeadIndex& h = seg->layer(0).heads.emplace_back();
  h.k = 1 + static_cast<int>(rng() % n);
  std::vector<int> rows(n);
  for (int r = 0; r < n; ++r) rows[r] = r;
  std::shuffle(rows.begin(), rows.end(), rng);
  std::vector<std::vector<int32_t>> by_cluster(h.k);
  for (int i = 0; i < n; ++i) {
    by_cluster[i < h.k ? i : rng() % h.k].push_back(rows[i]);
  }
  h.offsets = {0};
  for (auto& m : by_cluster) {
    std::sort(m.begin(), m.end());
    h.members.insert(h.members.end(), m.begin(), m.end());
    h.offsets.push_back(static_cast<int32_t>(h.members.size()));
  }
  std::normal_distribution<float> g;
  h.centroids.resize(size_t{1} * h.k * head_dim);
  for (float& x : h.centroids) x = g(rng);
  for (int c = 0; c < h.k; ++c) {
    float* mu = h.centroids.data() + size_t{1} * c * head_dim;
    switch (rng() % 8) {
      case 0:  // a tie with an earlier cluster
        if (c > 0) std::copy_n(mu - head_dim, head_dim, mu);
        break;
      case 1:
        mu[rng() % head_dim] = NAN;
        break;
      case 2:  // F16 infinity: the score is +inf or -inf by q's sign
        mu[rng() % head_dim] = (rng() % 2 ? 1e6f : -1e6f);
        break;
      default:
        break;
    }
  }
  kernels::cpu::PackCentroidPanels(h.centroids.data(), h.k, head_dim,
                                   &h.centroid_panels);
  return seg;
}

Problem MakeProblem(std::mt19937& rng, int n_segs, int n_q, int head_dim) {
  Problem p;
  p.head_dim = head_dim;
  int64_t pos = 0;
  for (int s = 0; s < n_segs; ++s) {
    const int n = 1 + static_cast<int>(rng() % 150);
    p.owned.push_back(MakeSegment(rng, pos, n, head_dim));
    p.segs.push_back(p.owned.back().get());
    pos += n;
  }
  std::normal_distribution<float> g;
  p.queries.assign(n_q, std::vector<float>(head_dim));
  for (auto& q : p.queries) {
    for (float& x : q) x = g(rng);
  }
  return p;
}

namespace {

// Scores every segment's clusters for all queries in one op (items per
// segment, a pool of every segment's panels) into `scores`.
void ScoreBatched(Runtime& rt, Stream st, const Problem& p, DevPtr dq, int n_q,
                  const std::vector<int64_t>& seg_first, DevPtr scores) {
  const OpLaunchers* k = rt.launchers();
  std::vector<ScoreItem> items;
  std::vector<int64_t> base = {0};
  std::vector<uint16_t> pool;
  for (size_t s = 0; s < p.segs.size(); ++s) {
    const HeadIndex& h = p.segs[s]->layer(0).heads[0];
    ScoreItem it;
    it.panel_offset = static_cast<int64_t>(pool.size());
    it.score_offset = seg_first[s];
    it.n_q = n_q;
    it.n = h.k;
    it.ld = static_cast<int32_t>(seg_first.back());
    pool.insert(pool.end(), h.centroid_panels.begin(), h.centroid_panels.end());
    items.push_back(it);
    base.push_back(base.back() + int64_t{n_q} * h.k);
  }
  ScoreBatchArgs a;
  a.items = Upload(rt, st, items);
  a.thread_base = Upload(rt, st, base);
  a.n_items = static_cast<int32_t>(items.size());
  a.dim = p.head_dim;
  a.q_pool = dq;
  a.q_elems = int64_t{n_q} * p.head_dim;
  a.panel_pool = Upload(rt, st, pool);
  a.panel_elems = static_cast<int64_t>(pool.size());
  a.score_pool = scores;
  a.score_elems = int64_t{n_q} * seg_first.back();
  a.total_threads = base.back();
  Op op = ScoreClustersBatchOp(a);
  if (k != nullptr) {
    op.device_launch = [k, a](void* x) { return k->ScoreClustersBatch(a, x); };
  }
  EXPECT_TRUE(rt.Launch(std::move(op), st).ok());
}

}  // namespace

std::vector<DevicePlan> PlanOn(Runtime& rt, const Problem& p,
                               const std::vector<std::vector<float>>& queries,
                               const KvStoreConfig& c, bool batched,
                               std::vector<SelectArgs>* args_out) {
  const OpLaunchers* k = rt.launchers();
  const Stream st = ValueOrDie(rt.CreateStream());
  const int n_q = static_cast<int>(queries.size());
  const int hd = p.head_dim;
  std::vector<int64_t> seg_first = {0}, seg_size, member_first = {0};
  std::vector<int32_t> members;
  for (const Segment* s : p.segs) {
    const HeadIndex& h = s->layer(0).heads[0];
    seg_first.push_back(seg_first.back() + h.k);
    seg_size.push_back(s->size());
    const int64_t base = static_cast<int64_t>(members.size());
    members.insert(members.end(), h.members.begin(), h.members.end());
    for (int k = 1; k <= h.k; ++k) member_first.push_back(base + h.offsets[k]);
  }
  const int64_t total = seg_first.back();
  std::vector<float> q_all;
  for (const auto& q : queries) q_all.insert(q_all.end(), q.begin(), q.end());
  const DevPtr dq = Upload(rt, st, q_all);
  const DevPtr scores =
      Upload(rt, st, std::vector<float>(size_t{1} * n_q * total, 0.0f));
  if (batched) ScoreBatched(rt, st, p, dq, n_q, seg_first, scores);
  for (size_t s = 0; s < (batched ? 0 : p.segs.size()); ++s) {
    const HeadIndex& h = p.segs[s]->layer(0).heads[0];
    const DevPtr panels = Upload(rt, st, h.centroid_panels);
    const ScoreClustersArgs sa{
        dq, n_q, panels, h.k, hd, scores + seg_first[s] * 4, total};
    Op op = ScoreClustersOp(sa);
    if (k != nullptr) {
      op.device_launch = [k, sa](void* x) { return k->ScoreClusters(sa, x); };
    }
    EXPECT_TRUE(rt.Launch(std::move(op), st).ok());
  }
  SelectArgs a;
  a.n = total;
  a.seg_first = Upload(rt, st, seg_first);
  a.seg_size = Upload(rt, st, seg_size);
  a.n_segs = static_cast<int32_t>(p.segs.size());
  a.member_first = Upload(rt, st, member_first);
  a.members = Upload(rt, st, members);
  a.n_members = static_cast<int64_t>(members.size());
  a.budget = c.budget;
  a.recent_tokens = c.recent_tokens;
  a.page_size = c.quest_page_size;
  a.max_out = MaxPlannedBlocks(total, a.n_segs, a.recent_tokens, a.page_size);
  std::vector<SelectArgs> args;
  for (int j = 0; j < n_q; ++j) {
    a.scores = scores + int64_t{4} * j * total;
    a.scratch = ValueOrDie(rt.Malloc(SelectScratchBytes(total, a.n_segs)));
    a.out = ValueOrDie(rt.Malloc(a.max_out * sizeof(PlannedBlock)));
    a.totals = ValueOrDie(rt.Malloc(sizeof(PlanTotals)));
    args.push_back(a);
    if (batched) continue;
    Op op = SelectBlocksOp(a);
    if (k != nullptr) {
      op.device_launch = [k, a](void* x) { return k->SelectBlocks(a, x); };
    }
    EXPECT_TRUE(rt.Launch(std::move(op), st).ok());
  }
  if (batched) {
    std::vector<threads::SelectItem> items;
    for (const SelectArgs& x : args) items.push_back(ItemOf(x));
    SelectBatchArgs b;
    b.items = Upload(rt, st, items);
    b.n_items = n_q;
    b.max_n = total;
    Op op = SelectBlocksBatchOp(b, items);
    if (k != nullptr) {
      op.device_launch = [k, b](void* x) { return k->SelectBlocksBatch(b, x); };
    }
    EXPECT_TRUE(rt.Launch(std::move(op), st).ok());
  }
  std::vector<DevicePlan> plans(n_q);
  for (int j = 0; j < n_q; ++j) {
    plans[j].totals = Download<PlanTotals>(rt, st, args[j].totals, 1)[0];
    plans[j].blocks = Download<PlannedBlock>(
        rt, st, args[j].out, std::max<int64_t>(0, plans[j].totals.blocks));
  }
  if (args_out != nullptr) *args_out = args;
  return plans;
}

}  // namespace ckv::kernels::device
