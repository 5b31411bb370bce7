// Fused causal attention for CPU, forward and backward, fp32.
//
// One (batch, head) problem at a time per thread: its q, k, v and the (T, T) score rows stay in
// that core's cache while all seven products of forward + backward run on them, each as a
// register-blocked tile (R rows x C vectors of accumulators, the A operand broadcast one element
// at a time, the B operand read as whole vector rows). Only the causal triangle is computed, to
// vector granularity. Backward recomputes the probabilities from q and k (nothing but q, k, v is
// kept between the passes), as flash attention does.
//
// Built at first use by trainers/fused_attention.py with the host's own instruction set
// (-march=native); without a compiler training falls back to the PyTorch blocked kernel.
// GCC/Clang vector extensions keep it portable: a 16-float vector is one AVX-512 register, or
// two AVX2 ones.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

constexpr int W = 16;  // floats per vector
typedef float vec __attribute__((vector_size(64)));
typedef float vec_u __attribute__((vector_size(64), aligned(4)));
typedef int32_t ivec __attribute__((vector_size(64)));

inline vec load(const float* p) { return *reinterpret_cast<const vec_u*>(p); }
inline void store(float* p, vec x) { *reinterpret_cast<vec_u*>(p) = x; }
inline int round_up(int n, int m) { return (n + m - 1) / m * m; }

const ivec kLane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

// 2^x for x <= 0 (scores minus their row maximum), relative error ~1e-7; NaN stays NaN so a
// diverging run still shows up in its loss.
inline vec exp2_nonpositive(vec x) {
  vec xc = x < -125.0f ? vec{} - 125.0f : x;
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding and subtracting rounds to an integer
  vec n = (xc + magic) - magic;
  vec y = (xc - n) * 0.69314718056f;  // |y| <= ln2 / 2
  vec p = y * (1.0f / 5040) + 1.0f / 720;
  p = p * y + 1.0f / 120;
  p = p * y + 1.0f / 24;
  p = p * y + 1.0f / 6;
  p = p * y + 0.5f;
  p = p * y + 1.0f;
  p = p * y + 1.0f;
  ivec bits;
  std::memcpy(&bits, &p, sizeof bits);
  bits += __builtin_convertvector(n, ivec) << 23;
  vec r;
  std::memcpy(&r, &bits, sizeof r);
  return x != x ? x : r;
}

// out[r][c*W..] = sum_{k0 <= k < k1} a[r*ar + k*ak] * b[k*ldb + c*W..], r < R, c < C.
template <int R, int C>
inline void tile(const float* a, long ar, long ak, const float* b, long ldb, int k0, int k1,
                 float* out, long ldo) {
  vec acc[R][C];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = vec{};
  for (int k = k0; k < k1; ++k) {
    const float* bk = b + k * ldb;
    vec bv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) bv[c] = load(bk + c * W);
    const float* ak_ptr = a + k * ak;
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const float s = ak_ptr[r * ar];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] += s * bv[c];
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) store(out + r * ldo + c * W, acc[r][c]);
}

// The same product over nvec vectors of columns, in groups of at most G vectors.
template <int R, int G>
void tiles(const float* a, long ar, long ak, const float* b, long ldb, int k0, int k1,
           float* out, long ldo, int nvec) {
  int c = 0;
  for (; c + G <= nvec; c += G) tile<R, G>(a, ar, ak, b + c * W, ldb, k0, k1, out + c * W, ldo);
  const int left = nvec - c;
  b += c * W;
  out += c * W;
  if (left == 1) tile<R, 1>(a, ar, ak, b, ldb, k0, k1, out, ldo);
  if (G > 2 && left == 2) tile<R, (G > 2 ? 2 : 1)>(a, ar, ak, b, ldb, k0, k1, out, ldo);
  if (G > 3 && left == 3) tile<R, (G > 3 ? 3 : 1)>(a, ar, ak, b, ldb, k0, k1, out, ldo);
}

struct Shape {
  int batch, heads, seq, dqk, dv;
  int tp, dqk_p, dv_p;  // seq, dqk, dv rounded up to whole vectors
  Shape(int b, int h, int t, int dqk_, int dv_)
      : batch(b), heads(h), seq(t), dqk(dqk_), dv(dv_), tp(round_up(t, W)),
        dqk_p(round_up(dqk_, W)), dv_p(round_up(dv_, W)) {}
};

// Zero-initialised, vector-aligned scratch: padding rows and columns are never written, so they
// stay zero for every problem a thread takes (zeros, not garbage, so a padded lane's product
// with a masked-out probability is 0 rather than NaN).
struct Buffer {
  float* p;
  explicit Buffer(size_t n) {
    const size_t bytes = std::max<size_t>(64, (n * sizeof(float) + 63) / 64 * 64);
    p = static_cast<float*>(std::aligned_alloc(64, bytes));
    std::memset(p, 0, bytes);
  }
  ~Buffer() { std::free(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

// Tiles of 8 rows x up to 2 vectors: 16 accumulators + 2 operand registers. At proxy-s shapes
// 4 x 4 score tiles and 16-row value tiles measured 3-10% slower, 8 x 3 the same.
constexpr int kRows = 8;
constexpr int kVecs = 2;
static_assert(W % kRows == 0, "tiles must not straddle a vector of keys");

// One problem's scores, softmax-normalised: row i < T of p (stride tp) holds
// softmax(q_i . k_j * scale) for j <= i and zeros from there to the end of its last vector,
// round_up(i + 1, W). Tiles start at multiples of kRows, which divides W, so none reads past
// that: a row block i0.. reads keys < i0 + kRows <= round_up(i0 + 1, W), and a key block j0..
// reads rows i >= j0, whose vectors reach j0 + kRows.
// qb: (tp, dqk_p) rows of q; kt: (dqk, tp) k transposed, pre-scaled by scale * log2(e).
void probabilities(const Shape& s, const float* qb, const float* kt, float* p) {
  const int t = s.seq, tp = s.tp;
  for (int i0 = 0; i0 < t; i0 += kRows) {
    const int nvec = round_up(std::min(t, i0 + kRows), W) / W;
    tiles<kRows, kVecs>(qb + i0 * s.dqk_p, s.dqk_p, 1, kt, tp, 0, s.dqk, p + i0 * tp, tp, nvec);
  }
  for (int i = 0; i < t; ++i) {
    float* row = p + static_cast<long>(i) * tp;
    const int n = i + 1, nv = round_up(n, W);
    vec mx = vec{} - 3.0e38f;
    for (int j = 0; j < nv; j += W) {
      vec x = load(row + j);
      x = (kLane + j) < n ? x : vec{} - 3.0e38f;
      mx = x > mx ? x : mx;
    }
    float m = mx[0];
    for (int l = 1; l < W; ++l) m = std::max(m, mx[l]);
    vec sum{};
    for (int j = 0; j < nv; j += W) {
      vec e = exp2_nonpositive(load(row + j) - m);
      e = (kLane + j) < n ? e : vec{};
      sum += e;
      store(row + j, e);
    }
    float l = 0;
    for (int c = 0; c < W; ++c) l += sum[c];
    const float inv = 1.0f / l;
    for (int j = 0; j < nv; j += W) store(row + j, load(row + j) * inv);
  }
}

// Copies one problem's rows of x (T, d) into dst (stride ld), optionally transposed into
// (d, tp) and scaled.
void load_rows(const float* x, long xt, int t, int d, float* dst, int ld) {
  for (int i = 0; i < t; ++i) std::memcpy(dst + static_cast<long>(i) * ld, x + i * xt, d * 4);
}
void load_transposed(const float* x, long xt, int t, int d, float scale, float* dst, int tp) {
  for (int i = 0; i < t; ++i)
    for (int e = 0; e < d; ++e) dst[static_cast<long>(e) * tp + i] = x[i * xt + e] * scale;
}
void store_rows(const float* src, int ld, int rows, int d, float* x, long xt) {
  for (int r = 0; r < rows; ++r) std::memcpy(x + r * xt, src + r * ld, d * 4);
}

// out[i] = sum_{j <= i} a[i][j] b[j] for query rows i < T: a is (T, tp) causal rows (zero past
// the diagonal), b (tp, ldb) rows; d columns of each result row go to out (row stride out_t),
// through the scratch tile ob.
void causal_product(const Shape& s, const float* a, const float* b, int ldb, int d, float* ob,
                    float* out, long out_t) {
  for (int i0 = 0; i0 < s.seq; i0 += kRows) {
    tiles<kRows, kVecs>(a + static_cast<long>(i0) * s.tp, s.tp, 1, b, ldb, 0,
                        std::min(s.seq, i0 + kRows), ob, ldb, ldb / W);
    store_rows(ob, ldb, std::min(kRows, s.seq - i0), d, out + i0 * out_t, out_t);
  }
}

// The transposed product: out[j] = sum_{i >= j} a[i][j] b[i] for key rows j < T.
void causal_product_t(const Shape& s, const float* a, const float* b, int ldb, int d, float* ob,
                      float* out, long out_t) {
  for (int j0 = 0; j0 < s.seq; j0 += kRows) {
    tiles<kRows, kVecs>(a + j0, 1, s.tp, b, ldb, j0, s.seq, ob, ldb, ldb / W);
    store_rows(ob, ldb, std::min(kRows, s.seq - j0), d, out + j0 * out_t, out_t);
  }
}

constexpr float kLog2e = 1.4426950408889634f;

// Splits the problems into one contiguous range per thread. With OpenMP the threads are the
// ones PyTorch's own ops use (torch ships libgomp, and this library binds to the copy already
// loaded): after an op they spin waiting for work, so separate threads would have to compete
// with them for the cores (measured: the second thread then gains nothing).
template <typename F>
void parallel_problems(int n_problems, int n_threads, F work) {
  n_threads = std::max(1, std::min(n_threads, n_problems));
#ifdef _OPENMP
#pragma omp parallel num_threads(n_threads)
  {
    const int w = omp_get_thread_num(), n = omp_get_num_threads();
    work(n_problems * w / n, n_problems * (w + 1) / n);
  }
#else
  std::vector<std::thread> pool;
  for (int w = 1; w < n_threads; ++w)
    pool.emplace_back([=] { work(n_problems * w / n_threads, n_problems * (w + 1) / n_threads); });
  work(0, n_problems / n_threads);
  for (auto& th : pool) th.join();
#endif
}

}  // namespace

extern "C" {

// out (B, H, T, dv) = softmax(q k^T * scale, causal) v. Strides in elements, (b, h, t) each.
void moetune_attention_forward(const float* q, const long* qs, const float* k, const long* ks,
                               const float* v, const long* vs, float* out, const long* os,
                               int batch, int heads, int seq, int dqk, int dv, float scale,
                               int n_threads) {
  const Shape s(batch, heads, seq, dqk, dv);
  parallel_problems(batch * heads, n_threads, [&](int first, int last) {
    const int t = s.seq, tp = s.tp;
    Buffer qb(tp * s.dqk_p), kt(s.dqk * tp), vb(tp * s.dv_p), p(static_cast<long>(tp) * tp),
        ob(kRows * s.dv_p);
    for (int n = first; n < last; ++n) {
      const int b = n / heads, h = n % heads;
      load_rows(q + b * qs[0] + h * qs[1], qs[2], t, dqk, qb.p, s.dqk_p);
      load_transposed(k + b * ks[0] + h * ks[1], ks[2], t, dqk, scale * kLog2e, kt.p, tp);
      load_rows(v + b * vs[0] + h * vs[1], vs[2], t, dv, vb.p, s.dv_p);
      probabilities(s, qb.p, kt.p, p.p);
      causal_product(s, p.p, vb.p, s.dv_p, dv, ob.p, out + b * os[0] + h * os[1], os[2]);
    }
  });
}

// Gradients of the forward above: dq, dk, dv (B, H, T, ·) from dout (B, H, T, dv).
void moetune_attention_backward(const float* q, const long* qs, const float* k, const long* ks,
                                const float* v, const long* vs, const float* dout,
                                const long* dos, float* dq, const long* dqs, float* dk,
                                const long* dks, float* dvv, const long* dvs, int batch,
                                int heads, int seq, int dqk, int dv, float scale,
                                int n_threads) {
  const Shape s(batch, heads, seq, dqk, dv);
  parallel_problems(batch * heads, n_threads, [&](int first, int last) {
    const int t = s.seq, tp = s.tp;
    const long tt = static_cast<long>(tp) * tp;
    Buffer qb(tp * s.dqk_p), kt(s.dqk * tp), kb(tp * s.dqk_p), vt(s.dv * tp),
        gb(tp * s.dv_p), p(tt), ds(tt), ob(kRows * std::max(s.dqk_p, s.dv_p));
    for (int n = first; n < last; ++n) {
      const int b = n / heads, h = n % heads;
      const float* kn = k + b * ks[0] + h * ks[1];
      load_rows(q + b * qs[0] + h * qs[1], qs[2], t, dqk, qb.p, s.dqk_p);
      load_transposed(kn, ks[2], t, dqk, scale * kLog2e, kt.p, tp);
      load_rows(kn, ks[2], t, dqk, kb.p, s.dqk_p);
      load_transposed(v + b * vs[0] + h * vs[1], vs[2], t, dv, 1.0f, vt.p, tp);
      load_rows(dout + b * dos[0] + h * dos[1], dos[2], t, dv, gb.p, s.dv_p);
      probabilities(s, qb.p, kt.p, p.p);
      // dP = dO v^T, then dS = P * (dP - rowsum(P * dP)) * scale, in place
      for (int i0 = 0; i0 < t; i0 += kRows) {
        const int nvec = round_up(std::min(t, i0 + kRows), W) / W;
        tiles<kRows, kVecs>(gb.p + i0 * s.dv_p, s.dv_p, 1, vt.p, tp, 0, dv,
                              ds.p + static_cast<long>(i0) * tp, tp, nvec);
      }
      for (int i = 0; i < t; ++i) {
        float* drow = ds.p + static_cast<long>(i) * tp;
        const float* prow = p.p + static_cast<long>(i) * tp;
        const int nv = round_up(i + 1, W);
        vec acc{};
        for (int j = 0; j < nv; j += W) acc += load(prow + j) * load(drow + j);
        float delta = 0;
        for (int c = 0; c < W; ++c) delta += acc[c];
        // P is zero past the diagonal, so dS is too
        for (int j = 0; j < nv; j += W)
          store(drow + j, load(prow + j) * (load(drow + j) - delta) * scale);
      }
      // dq = dS k; dk = dS^T q and dv = P^T dO
      causal_product(s, ds.p, kb.p, s.dqk_p, dqk, ob.p, dq + b * dqs[0] + h * dqs[1], dqs[2]);
      causal_product_t(s, ds.p, qb.p, s.dqk_p, dqk, ob.p, dk + b * dks[0] + h * dks[1], dks[2]);
      causal_product_t(s, p.p, gb.p, s.dv_p, dv, ob.p, dvv + b * dvs[0] + h * dvs[1], dvs[2]);
    }
  });
}

}  // extern "C"
