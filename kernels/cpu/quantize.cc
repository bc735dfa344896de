// Quantiser for every block type (the inverse of kernels/ref/quant.cc's
// layouts) and the 8-bit activation quantiser of the integer dot products. Each
// block is quantised by round-to-nearest against a scale taken from the block's
// extreme values; sub-block scales and mins are quantised against the
// super-block's largest.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/quant.h"
#include "kernels/quant_blocks.h"

namespace ckv::kernels::cpu {
namespace {

int Round(float v) { return static_cast<int>(std::nearbyint(v)); }
int Clamp(int v, int lo, int hi) { return std::min(hi, std::max(lo, v)); }
float Inv(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

// The element of largest magnitude, with its sign.
float SignedMax(const float* x, int n) {
  float m = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > std::fabs(m)) m = x[i];
  }
  return m;
}

void MinMax(const float* x, int n, float* mn, float* mx) {
  *mn = *mx = x[0];
  for (int i = 1; i < n; ++i) {
    *mn = std::min(*mn, x[i]);
    *mx = std::max(*mx, x[i]);
  }
}

// Stores 4-bit q[j] (j < 32) as qs[j % 16] nibble j / 16.
void PackNibbles32(const int* q, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
  }
}

void PackQ5High(const int* q, uint8_t* qh_bytes) {
  uint32_t qh = 0;
  for (int j = 0; j < 32; ++j)
    qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  std::memcpy(qh_bytes, &qh, 4);
}

// Symmetric: q = round(x / d) + offset in [0, 2 * offset), d from the signed
// extreme so that it maps to q = 0.
float QuantSymmetric(const float* x, int n, int offset, int* q) {
  const float d = SignedMax(x, n) / -offset;
  const float id = Inv(d);
  for (int j = 0; j < n; ++j) {
    q[j] = Clamp(Round(x[j] * id) + offset, 0, 2 * offset - 1);
  }
  return d;
}

// Asymmetric: x ~= d * q + m, q in [0, levels].
void QuantAffine(const float* x, int n, int levels, int* q, float* d,
                 float* m) {
  float mn, mx;
  MinMax(x, n, &mn, &mx);
  *d = (mx - mn) / levels;
  *m = mn;
  const float id = Inv(*d);
  for (int j = 0; j < n; ++j) q[j] = Clamp(Round((x[j] - mn) * id), 0, levels);
}

int NearestIq4(float v) {
  int best = 0;
  for (int k = 1; k < 16; ++k) {
    if (std::fabs(v - kIq4Values[k]) < std::fabs(v - kIq4Values[best]))
      best = k;
  }
  return best;
}

// IQ4 codes of n values with scale d.
void QuantIq4(const float* x, int n, float d, int* q) {
  const float id = Inv(d);
  for (int j = 0; j < n; ++j) q[j] = NearestIq4(x[j] * id);
}

void Q4_0Block(const float* x, BlockQ4_0* b) {
  int q[32];
  b->d = F32ToF16(QuantSymmetric(x, 32, 8, q));
  PackNibbles32(q, b->qs);
}

void Q5_0Block(const float* x, BlockQ5_0* b) {
  int q[32];
  b->d = F32ToF16(QuantSymmetric(x, 32, 16, q));
  PackNibbles32(q, b->qs);
  PackQ5High(q, b->qh);
}

void Q4_1Block(const float* x, BlockQ4_1* b) {
  int q[32];
  float d, m;
  QuantAffine(x, 32, 15, q, &d, &m);
  b->d = F32ToF16(d);
  b->m = F32ToF16(m);
  PackNibbles32(q, b->qs);
}

void Q5_1Block(const float* x, BlockQ5_1* b) {
  int q[32];
  float d, m;
  QuantAffine(x, 32, 31, q, &d, &m);
  b->d = F32ToF16(d);
  b->m = F32ToF16(m);
  PackNibbles32(q, b->qs);
  PackQ5High(q, b->qh);
}

void Q8_0Block(const float* x, BlockQ8_0* b) {
  const float d = std::fabs(SignedMax(x, 32)) / 127.0f;
  b->d = F32ToF16(d);
  const float id = Inv(F16ToF32(b->d));
  for (int j = 0; j < 32; ++j)
    b->qs[j] = static_cast<int8_t>(Clamp(Round(x[j] * id), -127, 127));
}

void IQ4_NLBlock(const float* x, BlockIQ4_NL* b) {
  int q[32];
  b->d = F32ToF16(SignedMax(x, 32) / kIq4Values[0]);
  QuantIq4(x, 32, F16ToF32(b->d), q);
  PackNibbles32(q, b->qs);
}

// K-quants with a scale and a min per sub-block of `sub` elements: finds
// per-sub-block scale s and min m >= 0 (x ~= s * q - m, q in [0, levels]),
// quantises s and m to `bits` bits against the super-block maxima (d, dmin),
// then the values. Writes q[256], sc[], mn[] (quantised) and d, dmin.
void QuantScaleMinK(const float* x, int sub, int levels, int bits, int* q,
                    int* sc, int* mn, float* d, float* dmin) {
  const int n_sub = kQK_K / sub;
  float s[16], m[16], max_s = 0.0f, max_m = 0.0f;
  for (int i = 0; i < n_sub; ++i) {
    float lo, hi;
    MinMax(x + i * sub, sub, &lo, &hi);
    lo = std::min(lo, 0.0f);
    s[i] = (hi - lo) / levels;
    m[i] = -lo;
    max_s = std::max(max_s, s[i]);
    max_m = std::max(max_m, m[i]);
  }
  const int top = (1 << bits) - 1;
  *d = F16ToF32(F32ToF16(max_s / top));
  *dmin = F16ToF32(F32ToF16(max_m / top));
  for (int i = 0; i < n_sub; ++i) {
    sc[i] = Clamp(Round(s[i] * Inv(*d)), 0, top);
    mn[i] = Clamp(Round(m[i] * Inv(*dmin)), 0, top);
    const float step = *d * sc[i], off = *dmin * mn[i];
    for (int j = 0; j < sub; ++j) {
      q[i * sub + j] =
          Clamp(Round((x[i * sub + j] + off) * Inv(step)), 0, levels);
    }
  }
}

// Symmetric K-quants: per sub-block of `sub`, signed scale s with x ~=
// s * (q - offset); s quantised to a signed integer in [-smax, smax].
void QuantSymmetricK(const float* x, int sub, int offset, int smax, int* q,
                     int* sc, float* d) {
  const int n_sub = kQK_K / sub;
  float s[16], max_abs = 0.0f;
  for (int i = 0; i < n_sub; ++i) {
    s[i] = SignedMax(x + i * sub, sub) / -offset;
    max_abs = std::max(max_abs, std::fabs(s[i]));
  }
  *d = F16ToF32(F32ToF16(max_abs / smax));
  for (int i = 0; i < n_sub; ++i) {
    sc[i] = Clamp(Round(s[i] * Inv(*d)), -smax, smax);
    const float id = Inv(*d * sc[i]);
    for (int j = 0; j < sub; ++j) {
      q[i * sub + j] =
          Clamp(Round(x[i * sub + j] * id) + offset, 0, 2 * offset - 1);
    }
  }
}

void Q2_KBlock(const float* x, BlockQ2_K* b) {
  int q[kQK_K], sc[16], mn[16];
  float d, dmin;
  QuantScaleMinK(x, 16, 3, 4, q, sc, mn, &d, &dmin);
  b->d = F32ToF16(d);
  b->dmin = F32ToF16(dmin);
  for (int i = 0; i < 16; ++i)
    b->scales[i] = static_cast<uint8_t>(sc[i] | (mn[i] << 4));
  std::memset(b->qs, 0, sizeof(b->qs));
  for (int e = 0; e < kQK_K; ++e) {
    const int half = e / 128, in = e % 128;
    b->qs[32 * half + in % 32] |= static_cast<uint8_t>(q[e] << (2 * (in / 32)));
  }
}

void Q3_KBlock(const float* x, BlockQ3_K* b) {
  int q[kQK_K], sc[16];
  float d;
  QuantSymmetricK(x, 16, 4, 31, q, sc, &d);
  b->d = F32ToF16(d);
  std::memset(b->scales, 0, sizeof(b->scales));
  for (int i = 0; i < 16; ++i) {
    const int v = sc[i] + 32;
    b->scales[i % 8] |= static_cast<uint8_t>((v & 0xF) << (4 * (i / 8)));
    b->scales[8 + i % 4] |= static_cast<uint8_t>((v >> 4) << (2 * (i / 4)));
  }
  std::memset(b->qs, 0, sizeof(b->qs));
  std::memset(b->hmask, 0, sizeof(b->hmask));
  for (int e = 0; e < kQK_K; ++e) {
    const int half = e / 128, in = e % 128;
    b->qs[32 * half + in % 32] |=
        static_cast<uint8_t>((q[e] & 3) << (2 * (in / 32)));
    if (q[e] & 4)
      b->hmask[in % 32] |= static_cast<uint8_t>(1 << (4 * half + in / 32));
  }
}

// Inverse of UnpackScaleMinK4 for 8 sub-blocks.
void PackScaleMinK4(const int* sc, const int* mn, uint8_t* out) {
  std::memset(out, 0, kKScaleBytes);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      out[j] |= static_cast<uint8_t>(sc[j]);
      out[j + 4] |= static_cast<uint8_t>(mn[j]);
    } else {
      out[j + 4] = static_cast<uint8_t>((sc[j] & 0xF) | ((mn[j] & 0xF) << 4));
      out[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
      out[j] |= static_cast<uint8_t>((mn[j] >> 4) << 6);
    }
  }
}

template <typename Block>
void Q45_KBlock(const float* x, int levels, Block* b, uint8_t* qh) {
  int q[kQK_K], sc[8], mn[8];
  float d, dmin;
  QuantScaleMinK(x, 32, levels, 6, q, sc, mn, &d, &dmin);
  b->d = F32ToF16(d);
  b->dmin = F32ToF16(dmin);
  PackScaleMinK4(sc, mn, b->scales);
  std::memset(b->qs, 0, sizeof(b->qs));
  if (qh != nullptr) std::memset(qh, 0, 32);
  for (int e = 0; e < kQK_K; ++e) {
    const int c = e / 64, hi = (e % 64) / 32, l = e % 32;
    b->qs[32 * c + l] |= static_cast<uint8_t>((q[e] & 0xF) << (4 * hi));
    if (qh != nullptr)
      qh[l] |= static_cast<uint8_t>((q[e] >> 4) << (2 * c + hi));
  }
}

void Q6_KBlock(const float* x, BlockQ6_K* b) {
  int q[kQK_K], sc[16];
  float d;
  QuantSymmetricK(x, 16, 32, 127, q, sc, &d);
  b->d = F32ToF16(d);
  for (int i = 0; i < 16; ++i) b->scales[i] = static_cast<int8_t>(sc[i]);
  std::memset(b->ql, 0, sizeof(b->ql));
  std::memset(b->qh, 0, sizeof(b->qh));
  for (int e = 0; e < kQK_K; ++e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    b->ql[64 * h + l + 32 * (k & 1)] |=
        static_cast<uint8_t>((q[e] & 0xF) << (4 * (k >> 1)));
    b->qh[32 * h + l] |= static_cast<uint8_t>((q[e] >> 4) << (2 * k));
  }
}

void IQ4_XSBlock(const float* x, BlockIQ4_XS* b) {
  float s[8], max_abs = 0.0f;
  for (int i = 0; i < 8; ++i) {
    s[i] = SignedMax(x + 32 * i, 32) / kIq4Values[0];
    max_abs = std::max(max_abs, std::fabs(s[i]));
  }
  const float d = F16ToF32(F32ToF16(max_abs / 31));
  b->d = F32ToF16(d);
  b->scales_h = 0;
  std::memset(b->scales_l, 0, sizeof(b->scales_l));
  for (int i = 0; i < 8; ++i) {
    const int ls = Clamp(Round(s[i] * Inv(d)), -31, 31) + 32;
    b->scales_l[i / 2] |= static_cast<uint8_t>((ls & 0xF) << (4 * (i % 2)));
    b->scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * i));
    int q[32];
    QuantIq4(x + 32 * i, 32, d * (ls - 32), q);
    PackNibbles32(q, b->qs + 16 * i);
  }
}

template <typename Block, int kSize, typename Fn>
void EachBlock(const float* src, int64_t n, void* dst, Fn fn) {
  auto* b = static_cast<Block*>(dst);
  for (int64_t i = 0; i < n / kSize; ++i) fn(src + i * kSize, &b[i]);
}

}  // namespace

void QuantizeRow(DType t, const float* src, int64_t n, void* dst) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16:
    case DType::kBF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) {
        h[i] = t == DType::kF16 ? F32ToF16(src[i]) : F32ToBF16(src[i]);
      }
      return;
    }
    case DType::kQ4_0:
      return EachBlock<BlockQ4_0, 32>(src, n, dst, Q4_0Block);
    case DType::kQ4_1:
      return EachBlock<BlockQ4_1, 32>(src, n, dst, Q4_1Block);
    case DType::kQ5_0:
      return EachBlock<BlockQ5_0, 32>(src, n, dst, Q5_0Block);
    case DType::kQ5_1:
      return EachBlock<BlockQ5_1, 32>(src, n, dst, Q5_1Block);
    case DType::kQ8_0:
      return EachBlock<BlockQ8_0, 32>(src, n, dst, Q8_0Block);
    case DType::kIQ4_NL:
      return EachBlock<BlockIQ4_NL, 32>(src, n, dst, IQ4_NLBlock);
    case DType::kQ2_K:
      return EachBlock<BlockQ2_K, kQK_K>(src, n, dst, Q2_KBlock);
    case DType::kQ3_K:
      return EachBlock<BlockQ3_K, kQK_K>(src, n, dst, Q3_KBlock);
    case DType::kQ4_K:
      return EachBlock<BlockQ4_K, kQK_K>(
          src, n, dst,
          [](const float* x, BlockQ4_K* b) { Q45_KBlock(x, 15, b, nullptr); });
    case DType::kQ5_K:
      return EachBlock<BlockQ5_K, kQK_K>(
          src, n, dst,
          [](const float* x, BlockQ5_K* b) { Q45_KBlock(x, 31, b, b->qh); });
    case DType::kQ6_K:
      return EachBlock<BlockQ6_K, kQK_K>(src, n, dst, Q6_KBlock);
    case DType::kIQ4_XS:
      return EachBlock<BlockIQ4_XS, kQK_K>(src, n, dst, IQ4_XSBlock);
  }
}

namespace {

// One block of `len` activations: q = round(x / d), d = max|x| / 127.
float QuantizeActBlock(const float* v, int len, int8_t* q) {
  float amax = 0.0f;
  for (int j = 0; j < len; ++j) amax = std::max(amax, std::fabs(v[j]));
  const float d = amax / 127.0f;
  const float id = Inv(d);
  for (int j = 0; j < len; ++j) {
    q[j] = static_cast<int8_t>(Clamp(Round(v[j] * id), -127, 127));
  }
  return d;
}

void QuantizeActsSuper(const float* x, int64_t n, QuantizedActs* out) {
  if (n % kSuperAct != 0) {
    out->qk.clear();
    out->dk.clear();
    out->sumk16.clear();
    return;
  }
  out->qk.resize(n);
  out->dk.resize(n / kSuperAct);
  out->sumk16.resize(n / 16);
  for (int64_t b = 0; b < n / kSuperAct; ++b) {
    int8_t* q = out->qk.data() + b * kSuperAct;
    out->dk[b] = QuantizeActBlock(x + b * kSuperAct, kSuperAct, q);
    for (int g = 0; g < kSuperAct / 16; ++g) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += q[16 * g + j];
      out->sumk16[b * (kSuperAct / 16) + g] = static_cast<int16_t>(s);
    }
  }
}

}  // namespace

void QuantizeActs(const float* x, int64_t n, QuantizedActs* out,
                  ActForms forms) {
  out->n = n;
  if (forms != ActForms::kBlock) QuantizeActsSuper(x, n, out);
  if (forms == ActForms::kSuper) return;
  const int64_t padded = (n + kChunk - 1) / kChunk * kChunk;
  out->q.assign(padded, 0);
  out->d.assign(padded / kActBlock, 0.0f);
  out->sum16.assign(padded / 16, 0);
  for (int64_t b = 0; b < n / kActBlock; ++b) {
    int8_t* q = out->q.data() + b * kActBlock;
    out->d[b] = QuantizeActBlock(x + b * kActBlock, kActBlock, q);
    for (int g = 0; g < 2; ++g) {
      int32_t s = 0;
      for (int j = 0; j < 16; ++j) s += q[16 * g + j];
      out->sum16[2 * b + g] = s;
    }
  }
}

}  // namespace ckv::kernels::cpu
