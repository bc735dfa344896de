// Attention and the KV append of the one op suite every backend runs
// (backend_ops_test.cc: the backends, the tolerances).
#include "tests/ops/backend_ops_fixture.h"

namespace ckv::backend_ops {
namespace {

// Two sequences in one step (a decode row after 9 cached tokens, and a
// 4-row prefill chunk of an empty sequence), GQA 3:1, F32 dense caches:
// the backend appends the step's K/V, asks each cache what to attend and
// attends it; the reference attends every cached row of the sequence.
// Also streamed: with a stream chunk of 300 bytes a device backend cuts
// each part's rows into chunks of one or two rows (GQA groups, window and
// softcap across chunk edges), folds them into the running softmax state
// and finishes; the result is the same attention. Mixed (-1): a chunk that
// the decode part's rows exceed and the prefill part's 4 do not, with
// the prefill part first: it is attended (alone) before the streamed one.
TEST_P(BackendOpsTest, AttentionGqaSoftcapWindowTwoSequences) {
  const int n_heads = 6, n_kv = 2;
  for (const int64_t chunk_case :
       {BackendOptions{}.kv_stream_chunk_bytes, int64_t{300}, int64_t{-1}}) {
    for (int head_dim : {16, 67}) {
      // K and V of 4.5 rows of both KV heads: the decode part attends 10
      // rows (5 in the window), the prefill part 4.
      const int64_t stream_chunk =
          chunk_case >= 0 ? chunk_case : 2 * n_kv * head_dim * 4 * 9 / 2;
      for (float softcap : {0.0f, 30.0f}) {
        for (int64_t window : {int64_t{0}, int64_t{5}}) {
          const int64_t q_dim = int64_t{n_heads} * head_dim;
          const int64_t kv_dim = int64_t{n_kv} * head_dim;
          const int64_t history = 9, rows = 5;
          DenseKvCacheOptions co;
          co.n_layers = 1;
          co.n_heads = n_heads;
          co.n_kv_heads = n_kv;
          co.head_dim = head_dim;
          co.dtype = DType::kF32;
          co.layer_window = {static_cast<int32_t>(window)};
          DenseKvCache a(co), c(co);
          // All K/V rows of each sequence: history first, then the step's.
          std::vector<float> ka = RandomFloats(rng_, (history + 1) * kv_dim);
          std::vector<float> va = RandomFloats(rng_, (history + 1) * kv_dim);
          const std::vector<float> kc = RandomFloats(rng_, 4 * kv_dim);
          const std::vector<float> vc = RandomFloats(rng_, 4 * kv_dim);
          ASSERT_TRUE(a.Reserve(history, AppendKind::kPrompt).ok());
          a.Append(0, history, ka.data(), va.data());
          a.Commit(history);
          const std::vector<float> q = RandomFloats(rng_, rows * q_dim, -2, 2);
          std::vector<float> k_step(ka.end() - kv_dim, ka.end());
          k_step.insert(k_step.end(), kc.begin(), kc.end());
          std::vector<float> v_step(va.end() - kv_dim, va.end());
          v_step.insert(v_step.end(), vc.begin(), vc.end());

          const std::vector<int64_t> pos = {history, 0, 1, 2, 3};
          ASSERT_TRUE(a.Reserve(1, AppendKind::kGenerated).ok());
          ASSERT_TRUE(c.Reserve(4, AppendKind::kPrompt).ok());
          AttentionSpec spec = SpecOf(n_heads, head_dim);
          spec.softcap = softcap;
          spec.window = window;
          const AttentionPart parts[] = {{&a, 0, 1}, {&c, 1, 4}};
          const AttentionPart prefill_first[] = {parts[1], parts[0]};
          const std::vector<float> got = AttendStep(
              stream_chunk, spec, kv_dim,
              chunk_case < 0 ? prefill_first : parts, pos, q, k_step, v_step);
          a.Commit(1);
          c.Commit(4);
          if (const auto* d =
                  dynamic_cast<const DeviceBackend*>(backend_.get())) {
            const AttendCopyStats& st = d->attend_copies();
            if (chunk_case < 0) {  // the decode part streams
              EXPECT_EQ(st.streamed_parts, 1);
              EXPECT_EQ(st.attention_ops, 1);
              EXPECT_EQ(st.batched_parts, 1);
            } else if (stream_chunk < 1000) {  // both, several chunks each
              EXPECT_EQ(st.streamed_parts, 2);
              EXPECT_GT(st.streamed_chunks, 4);
              EXPECT_LE(st.largest_chunk_bytes,
                        std::max<int64_t>(stream_chunk, 2 * 320));
            } else {  // the two parts attended by one op
              EXPECT_EQ(st.streamed_parts, 0);
              EXPECT_EQ(st.attention_ops, 1);
              EXPECT_EQ(st.batched_parts, 2);
            }
          }

          std::vector<float> want(rows * q_dim);
          RefAttend(spec, n_kv, q, pos, ka, va, history + 1, 0, 1, &want);
          RefAttend(spec, n_kv, q, pos, kc, vc, 4, 1, 4, &want);
          // The second part's 4 queries may take BF16 tiles.
          const double tol = kernels::cpu::testing::AttentionTolerance(4);
          for (int64_t i = 0; i < rows * q_dim; ++i) {
            ASSERT_NEAR(got[i], want[i], tol)
                << "hd " << head_dim << " softcap " << softcap << " window "
                << window << " row " << i / q_dim << " chunk " << stream_chunk;
          }
        }
      }
    }
  }
}

// Three decoding sequences in one call (on a device: one batched
// attention op, a head table per query row) with histories of 0, 6 and 39
// rows, KV stored in F16 and BF16, head dims 80 and 256 (a 4:1 GQA
// group): each row equals ref::Attention over its own sequence. The K/V
// values are rounded to the storage type first, so the reference reads
// exactly what the caches hold.
TEST_P(BackendOpsTest, AttentionThreeDecodeSequencesF16Bf16) {
  const int n_heads = 8, n_kv = 2;
  const int64_t histories[] = {0, 6, 39};
  for (DType dt : {DType::kF16, DType::kBF16}) {
    auto stored = [dt](std::vector<float> x) { return RoundedTo(dt, x); };
    for (int head_dim : {80, 256}) {
      const int64_t q_dim = int64_t{n_heads} * head_dim;
      const int64_t kv_dim = int64_t{n_kv} * head_dim;
      DenseKvCacheOptions co;
      co.n_layers = 1;
      co.n_heads = n_heads;
      co.n_kv_heads = n_kv;
      co.head_dim = head_dim;
      co.dtype = dt;
      std::vector<std::unique_ptr<DenseKvCache>> caches;
      std::vector<std::vector<float>> ks, vs;  // history + the step's row
      std::vector<float> k_step, v_step;
      for (const int64_t h : histories) {
        caches.push_back(std::make_unique<DenseKvCache>(co));
        ks.push_back(stored(RandomFloats(rng_, (h + 1) * kv_dim)));
        vs.push_back(stored(RandomFloats(rng_, (h + 1) * kv_dim)));
        if (h > 0) {
          ASSERT_TRUE(caches.back()->Reserve(h, AppendKind::kPrompt).ok());
          caches.back()->Append(0, h, ks.back().data(), vs.back().data());
          caches.back()->Commit(h);
        }
        k_step.insert(k_step.end(), ks.back().end() - kv_dim, ks.back().end());
        v_step.insert(v_step.end(), vs.back().end() - kv_dim, vs.back().end());
        ASSERT_TRUE(caches.back()->Reserve(1, AppendKind::kGenerated).ok());
      }
      const std::vector<float> q = RandomFloats(rng_, 3 * q_dim, -2, 2);
      const std::vector<int64_t> pos(std::begin(histories),
                                     std::end(histories));
      const AttentionSpec spec = SpecOf(n_heads, head_dim);
      const AttentionPart parts[] = {{caches[0].get(), 0, 1},
                                     {caches[1].get(), 1, 1},
                                     {caches[2].get(), 2, 1}};
      const std::vector<float> got =
          AttendStep(BackendOptions{}.kv_stream_chunk_bytes, spec, kv_dim,
                     parts, pos, q, k_step, v_step);
      for (auto& c : caches) c->Commit(1);
      if (const auto* d = dynamic_cast<const DeviceBackend*>(backend_.get())) {
        EXPECT_EQ(d->attend_copies().attention_ops, 1);
        EXPECT_EQ(d->attend_copies().batched_parts, 3);
      }
      std::vector<float> want(3 * q_dim);
      for (int s = 0; s < 3; ++s) {
        RefAttend(spec, n_kv, q, pos, ks[s], vs[s], histories[s] + 1, s, 1,
                  &want);
        const double tol = kernels::cpu::testing::AttentionTolerance(1);
        for (int64_t i = 0; i < q_dim; ++i) {
          ASSERT_NEAR(got[s * q_dim + i], want[s * q_dim + i], tol)
              << kernels::DTypeName(dt) << " hd " << head_dim << " sequence "
              << s << " element " << i;
        }
      }
    }
  }
}

// A prefill chunk of 150 rows after 37 rows of history, KV stored in F16
// and BF16, head dims 64 and 80 (4:1 GQA), softcap and sliding window, in
// one op and streamed in chunks: each row equals ref::Attention over the
// rows it sees. On CUDA this is the tensor-core path (attention_tiles.h:
// more than 16 rows of one sequence, one dtype, head_dim a multiple of 16),
// its rows in three 64-row blocks, the window hiding whole key tiles of the
// later blocks. The K/V values are rounded to the storage type first, so
// the reference reads exactly what the cache holds.
TEST_P(BackendOpsTest, AttentionPrefillChunkF16Bf16) {
  const int n_heads = 8, n_kv = 2;
  const int64_t history = 37, rows = 150;
  for (DType dt : {DType::kF16, DType::kBF16}) {
    auto stored = [dt](std::vector<float> x) { return RoundedTo(dt, x); };
    for (int head_dim : {64, 80}) {
      const int64_t q_dim = int64_t{n_heads} * head_dim;
      const int64_t kv_dim = int64_t{n_kv} * head_dim;
      const std::vector<float> ks =
          stored(RandomFloats(rng_, (history + rows) * kv_dim));
      const std::vector<float> vs =
          stored(RandomFloats(rng_, (history + rows) * kv_dim));
      const std::vector<float> k_step(ks.begin() + history * kv_dim, ks.end());
      const std::vector<float> v_step(vs.begin() + history * kv_dim, vs.end());
      const std::vector<float> q = RandomFloats(rng_, rows * q_dim, -2, 2);
      const std::vector<int64_t> pos = Positions(rows, history);
      // Default chunks (one op), and 8 KiB chunks (streamed: several).
      for (const int64_t chunk :
           {BackendOptions{}.kv_stream_chunk_bytes, int64_t{8192}}) {
        for (const auto& [softcap, window] :
             {std::pair<float, int64_t>{0.0f, 0}, {30.0f, 50}}) {
          DenseKvCacheOptions co;
          co.n_layers = 1;
          co.n_heads = n_heads;
          co.n_kv_heads = n_kv;
          co.head_dim = head_dim;
          co.dtype = dt;
          co.layer_window = {static_cast<int32_t>(window)};
          DenseKvCache cache(co);
          ASSERT_TRUE(cache.Reserve(history, AppendKind::kPrompt).ok());
          cache.Append(0, history, ks.data(), vs.data());
          cache.Commit(history);
          ASSERT_TRUE(cache.Reserve(rows, AppendKind::kPrompt).ok());
          AttentionSpec spec = SpecOf(n_heads, head_dim);
          spec.softcap = softcap;
          spec.window = window;
          const AttentionPart parts[] = {{&cache, 0, rows}};
          const std::vector<float> got =
              AttendStep(chunk, spec, kv_dim, parts, pos, q, k_step, v_step);
          cache.Commit(rows);
          if (const auto* d =
                  dynamic_cast<const DeviceBackend*>(backend_.get())) {
            const AttendCopyStats& st = d->attend_copies();
            EXPECT_EQ(st.streamed_parts, chunk == 8192 ? 1 : 0);
            // Every launch (one op, or one per streamed chunk) says its
            // spans' one dtype.
            EXPECT_EQ(st.one_dtype_launches,
                      chunk == 8192 ? st.streamed_chunks : 1);
          }
          std::vector<float> want(rows * q_dim);
          RefAttend(spec, n_kv, q, pos, ks, vs, history + rows, 0, rows, &want);
          const double tol = GetParam().kind == BackendKind::kCuda
                                 ? kTileAttentionTolerance
                                 : kernels::cpu::testing::AttentionTolerance(
                                       static_cast<int>(rows));
          for (int64_t i = 0; i < rows * q_dim; ++i) {
            ASSERT_NEAR(got[i], want[i], tol)
                << kernels::DTypeName(dt) << " hd " << head_dim << " softcap "
                << softcap << " window " << window << " chunk " << chunk
                << " row " << i / q_dim << " element " << i % q_dim;
          }
        }
      }
    }
  }
}

// The KV append: stores made with the backend's store env take a step's
// K,V rows (a device writes them on the device and copies them back)
// rounded to F16 or BF16 with the host's bits: ties to even, subnormals,
// overflow to inf, -0, NaN. A prefill part (5 rows, 2 into the sinks) and
// a decode part over 3 rows of history in one step.
TEST_P(BackendOpsTest, KvAppendRoundsAsTheHost) {
  const int n_heads = 4, n_kv = 2;
  const float special[] = {65504.0f, 65519.0f,     65520.0f, 7e4f,
                           -0.0f,    3e-5f,        1e-8f,    1.00048828125f,
                           -2.5e38f, std::nanf("")};
  for (DType dt : {DType::kF16, DType::kBF16}) {
    for (int head_dim : {80, 256}) {
      const int64_t q_dim = int64_t{n_heads} * head_dim;
      const int64_t kv_dim = int64_t{n_kv} * head_dim;
      Backend& b = Fresh();
      const KvShape shape{1, n_heads, n_kv, head_dim};
      KvStoreConfig c;
      c.policy = KvPolicy::kFull;
      c.kv_dtype = dt;
      c.sink_tokens = 2;
      c.async_clustering = false;
      ClusteredKvStore a(shape, c, nullptr, b.store_env());
      ClusteredKvStore d(shape, c, nullptr, b.store_env());
      const std::vector<float> hist = RandomFloats(rng_, 3 * kv_dim);
      ASSERT_TRUE(d.Reserve(3, AppendKind::kPrompt).ok());
      d.Append(0, 3, hist.data(), hist.data());
      d.Commit(3);
      std::vector<float> k = RandomFloats(rng_, 6 * kv_dim, -4, 4);
      std::vector<float> v = RandomFloats(rng_, 6 * kv_dim, -4, 4);
      for (size_t i = 0; i < std::size(special); ++i) {
        k[i * 37 % k.size()] = special[i];
        v[(i * 53 + 5) % v.size()] = special[i];
      }
      ASSERT_TRUE(a.Reserve(5, AppendKind::kPrompt).ok());
      ASSERT_TRUE(d.Reserve(1, AppendKind::kGenerated).ok());
      const AttentionSpec spec = SpecOf(n_heads, head_dim);
      const AttentionPart parts[] = {{&a, 0, 5}, {&d, 5, 1}};
      AttendStep(BackendOptions{}.kv_stream_chunk_bytes, spec, kv_dim, parts,
                 {0, 1, 2, 3, 4, 3}, RandomFloats(rng_, 6 * q_dim), k, v, &b);
      a.Commit(5);
      d.Commit(1);
      ASSERT_TRUE(b.status().ok()) << b.status();
      // Host rows of (store, first step row, rows): positions in order.
      const std::pair<ClusteredKvStore*, int64_t> stores[] = {{&a, 0}, {&d, 5}};
      for (const auto& [store, row0] : stores) {
        for (int g = 0; g < n_kv; ++g) {
          std::vector<uint16_t> kb, vb;
          for (const kernels::KvSpan& sp : store->HostSpans(0, g)) {
            const auto* ks = static_cast<const uint16_t*>(sp.k);
            const auto* vs = static_cast<const uint16_t*>(sp.v);
            kb.insert(kb.end(), ks, ks + sp.count * head_dim);
            vb.insert(vb.end(), vs, vs + sp.count * head_dim);
          }
          const int64_t n = row0 == 0 ? 5 : 1, skip = row0 == 0 ? 0 : 3;
          ASSERT_EQ(kb.size(), static_cast<size_t>((skip + n) * head_dim));
          for (int64_t r = 0; r < n; ++r) {
            for (int e = 0; e < head_dim; ++e) {
              const int64_t at = (row0 + r) * kv_dim + g * head_dim + e;
              auto bits = [dt](float f) {
                return dt == DType::kF16 ? kernels::F32ToF16(f)
                                         : kernels::F32ToBF16(f);
              };
              const size_t got = static_cast<size_t>((skip + r) * head_dim + e);
              ASSERT_EQ(kb[got], bits(k[at]))
                  << kernels::DTypeName(dt) << " k row " << r << " of " << row0
                  << " head " << g << " element " << e;
              ASSERT_EQ(vb[got], bits(v[at]))
                  << kernels::DTypeName(dt) << " v row " << r << " of " << row0
                  << " head " << g << " element " << e;
            }
          }
        }
      }
      if (const auto* dev = dynamic_cast<const DeviceBackend*>(&b)) {
        EXPECT_EQ(dev->attend_copies().appended_tokens, 6);
      }
    }
  }
}

}  // namespace
}  // namespace ckv::backend_ops
