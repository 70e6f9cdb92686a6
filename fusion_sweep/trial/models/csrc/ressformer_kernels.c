/* ReSSFormer's CPU kernels (fusion_sweep/trial/models/kernels.py builds, caches and calls
   them; every Python entry there checks shapes, dtypes, device and layout before a pointer
   reaches this file).

   Built as one translation unit, C99, with the flags of kernels.CFLAGS, and with
   -DPANEL_BYTES=<kernels.PANEL_BYTES>. The float32 and float64 versions of every typed
   kernel come from ressformer_kernels_typed.h, included twice below with T (the element
   type), SUF (the name suffix: f32, f64) and SQRT defined; FN(name) is name_SUF. */
#ifndef PANEL_BYTES
#error "PANEL_BYTES comes from kernels.py: -DPANEL_BYTES=<bytes of a score_topk panel>"
#endif

#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <math.h>

/* Keys per panel in score_topk: PANEL_BYTES / sizeof(T), 4 vectors of 64 bytes (64 floats,
   32 doubles); PANEL_BYTES is passed by the build (-DPANEL_BYTES) from the Python constant of
   that name. */

/* topk_fast's steps with AVX-512 (float32; elsewhere the portable loops): compact_ gathers
   the entries of row[0..n) that are >= thr, in order: their indices (cj) and values (cv),
   both with room for n + 16, and returns how many (a block of 16 without one costs one
   vector test; with AVX-512 a block is compacted by one compress instruction). */
#define COMPACT_GENERIC(T, S)                                                                  \
static inline int64_t compact_##S(const T *restrict row, int64_t n, T thr,                 \
                                  int32_t *restrict cj, T *restrict cv) {                  \
    int64_t nc = 0;                                                                        \
    for (int64_t j0 = 0; j0 < n; j0 += 16) {                                               \
        const int64_t j1 = j0 + 16 < n ? j0 + 16 : n;                                      \
        int any = 0;                                                                       \
        _Pragma("omp simd reduction(|:any)")                                               \
        for (int64_t j = j0; j < j1; ++j) any |= row[j] >= thr;                            \
        if (!any) continue;                                                                \
        for (int64_t j = j0; j < j1; ++j) { cj[nc] = j; cv[nc] = row[j]; nc += row[j] >= thr; }\
    }                                                                                      \
    return nc;                                                                             \
}
#if defined(__AVX512F__)
#include <immintrin.h>
static inline int64_t compact_f32(const float *restrict row, int64_t n, float thr,
                                  int32_t *restrict cj, float *restrict cv) {
    int64_t nc = 0, j = 0;
    const __m512 t = _mm512_set1_ps(thr);
    __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i step = _mm512_set1_epi32(16);
    for (; j + 16 <= n; j += 16, idx = _mm512_add_epi32(idx, step)) {
        const __m512 x = _mm512_loadu_ps(row + j);
        const __mmask16 m = _mm512_cmp_ps_mask(x, t, _CMP_GE_OQ);
        if (!m) continue;
        _mm512_storeu_ps(cv + nc, _mm512_maskz_compress_ps(m, x));
        _mm512_storeu_si512((void *)(cj + nc), _mm512_maskz_compress_epi32(m, idx));
        nc += __builtin_popcount(m);
    }
    for (; j < n; ++j) { cj[nc] = j; cv[nc] = row[j]; nc += row[j] >= thr; }
    return nc;
}
/* Up to 16 candidates (values cv, indices cj): the K of highest rank (how many beat it,
   ties by position) into o, one vector compare per candidate; 0: not done here. */
static inline int select16_f32(const float *cv, const int32_t *cj, int64_t nc, int64_t K,
                               int64_t *o) {
    if (nc > 16) return 0;
    const __mmask16 valid = nc == 16 ? 0xFFFF : (__mmask16)((1u << nc) - 1);
    const __m512 V = _mm512_maskz_loadu_ps(valid, cv);
    int64_t f = 0;
    for (int a = 0; a < nc; ++a) {
        const __m512 x = _mm512_set1_ps(cv[a]);
        const int r = __builtin_popcount(_mm512_mask_cmp_ps_mask(valid, V, x, _CMP_GT_OQ))
            + __builtin_popcount(_mm512_mask_cmp_ps_mask(valid & ((1u << a) - 1), V, x,
                                                         _CMP_EQ_OQ));
        if (r < K) o[f++] = cj[a];
    }
    return f == K;
}
/* The K-th largest of exactly 16 values (rank K − 1) into *thr; 0: not done here. */
static inline int kth16_f32(const float *cm, int64_t C, int64_t K, float *thr) {
    if (C != 16) return 0;
    const __m512 V = _mm512_loadu_ps(cm);
    for (int i = 0; i < 16; ++i) {
        const __m512 x = _mm512_set1_ps(cm[i]);
        const int r = __builtin_popcount(_mm512_cmp_ps_mask(V, x, _CMP_GT_OQ))
            + __builtin_popcount(_mm512_mask_cmp_ps_mask((1u << i) - 1, V, x, _CMP_EQ_OQ));
        if (r == K - 1) { *thr = cm[i]; return 1; }
    }
    return 0;
}
#else
COMPACT_GENERIC(float, f32)
static inline int select16_f32(const float *cv, const int32_t *cj, int64_t nc, int64_t K,
                               int64_t *o) { return 0; }
static inline int kth16_f32(const float *cm, int64_t C, int64_t K, float *thr) { return 0; }
#endif
COMPACT_GENERIC(double, f64)
static inline int select16_f64(const double *cv, const int32_t *cj, int64_t nc, int64_t K,
                               int64_t *o) { return 0; }
static inline int kth16_f64(const double *cm, int64_t C, int64_t K, double *thr) { return 0; }
/* Run CALL with DD the constant D where D is 16, 32 or 64 (the compiler then unrolls and
   vectorises the row loops), else with DD = D. */
#define DISPATCH_D(D, CALL) do { switch (D) { \
    case 16: { const int64_t DD = 16; CALL; break; } \
    case 32: { const int64_t DD = 32; CALL; break; } \
    case 64: { const int64_t DD = 64; CALL; break; } \
    default: { const int64_t DD = (D); CALL; } } } while (0)

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define FN(name) CAT(name, SUF)

/* Softmax over rows of N (dense attention). float32: exp by the Cephes polynomial on 16
   lanes (GCC/clang vector extension; within 2 ulp of expf), anything below −87.3 after the
   max is subtracted (−inf: a masked key) an exact 0. float64: libm's exp. A row of only −inf
   gives NaN, as torch's softmax. */
typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
static inline v16f exp16_nonpos(v16f x) {
    const v16i tiny = x < -87.33654f;
    const v16f fx = x * 1.44269504088896341f + 0.5f;
    v16i n = __builtin_convertvector(fx, v16i);           /* truncation; floor below */
    n -= (v16i)(__builtin_convertvector(n, v16f) > fx) & 1;
    const v16f nf = __builtin_convertvector(n, v16f);
    x = x - nf * 0.693359375f + nf * 2.12194440e-4f;
    const v16f z = x * x;
    v16f p = 1.9875691500e-4f * x + 1.3981999507e-3f;
    p = p * x + 8.3334519073e-3f;
    p = p * x + 4.1665795894e-2f;
    p = p * x + 1.6666665459e-1f;
    p = p * x + 5.0000001201e-1f;
    p = p * z + x + 1.0f;
    return (v16f)((v16i)(p * (v16f)((n + 127) << 23)) & ~tiny);
}
/* y = softmax(z + m) over one row of N (m NULL: none); y may be z (in place). */
static inline void softmax_row_f32(const float *z, const float *m, int64_t N, float *y) {
    float mx = -INFINITY;
    if (m) {
        _Pragma("omp simd reduction(max:mx)")
        for (int64_t j = 0; j < N; ++j) {
            const float t = z[j] + m[j];
            y[j] = t; mx = t > mx ? t : mx;
        }
    } else {
        _Pragma("omp simd reduction(max:mx)")
        for (int64_t j = 0; j < N; ++j) { y[j] = z[j]; mx = z[j] > mx ? z[j] : mx; }
    }
    v16f acc = {0};
    int64_t j = 0;
    for (; j + 16 <= N; j += 16) {
        v16f x;
        memcpy(&x, y + j, 64);
        const v16f e = exp16_nonpos(x - mx);
        memcpy(y + j, &e, 64);
        acc += e;
    }
    if (j < N) { /* the last < 16 entries, padded with −inf (exp 0) */
        float t[16];
        for (int l = 0; l < 16; ++l) t[l] = j + l < N ? y[j + l] : -INFINITY;
        v16f x;
        memcpy(&x, t, 64);
        const v16f e = exp16_nonpos(x - mx);
        acc += e;
        memcpy(t, &e, 64);
        for (int l = 0; j + l < N; ++l) y[j + l] = t[l];
    }
    float sum = 0;
    for (int l = 0; l < 16; ++l) sum += acc[l];
    const float inv = 1 / sum;
    _Pragma("omp simd")
    for (int64_t k = 0; k < N; ++k) y[k] *= inv;
}
/* y[0..N) = softmax over a row z of Np = N rounded up to 16 entries, z[N..Np) = −inf (so
   whole vectors only); z is overwritten with the unnormalised exponentials. */
static inline float hsum16(v16f a) {
    float s[16], t = 0;
    memcpy(s, &a, 64);
    for (int l = 0; l < 8; ++l) s[l] += s[l + 8];
    for (int l = 0; l < 4; ++l) s[l] += s[l + 4];
    t = (s[0] + s[2]) + (s[1] + s[3]);
    return t;
}
static inline void softmax_padded_f32(float *z, int64_t N, float *y) {
    const int64_t Np = (N + 15) / 16 * 16;
    v16f mv;
    memcpy(&mv, z, 64);
    for (int64_t j = 16; j < Np; j += 16) {
        v16f x;
        memcpy(&x, z + j, 64);
        const v16i gt = x > mv;
        mv = (v16f)(((v16i)x & gt) | ((v16i)mv & ~gt));
    }
    float m[16], mx = -INFINITY;
    memcpy(m, &mv, 64);
    for (int l = 0; l < 16; ++l) mx = m[l] > mx ? m[l] : mx;
    v16f acc = {0};
    for (int64_t j = 0; j < Np; j += 16) {
        v16f x;
        memcpy(&x, z + j, 64);
        const v16f e = exp16_nonpos(x - mx);
        memcpy(z + j, &e, 64);
        acc += e;
    }
    const float inv = 1 / hsum16(acc);
    _Pragma("omp simd")
    for (int64_t j = 0; j < N; ++j) y[j] = z[j] * inv;
}
static inline void softmax_row_f64(const double *z, const double *m, int64_t N, double *y) {
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < N; ++j) {
        y[j] = m ? z[j] + m[j] : z[j];
        mx = y[j] > mx ? y[j] : mx;
    }
    for (int64_t j = 0; j < N; ++j) { y[j] = exp(y[j] - mx); sum += y[j]; }
    for (int64_t j = 0; j < N; ++j) y[j] /= sum;
}
static inline void softmax_padded_f64(double *z, int64_t N, double *y) {
    softmax_row_f64(z, NULL, N, y);
}

#define T float
#define SUF f32
#define SQRT sqrtf
#include "ressformer_kernels_typed.h"
#undef T
#undef SUF
#undef SQRT

#define T double
#define SUF f64
#define SQRT sqrt
#include "ressformer_kernels_typed.h"
#undef T
#undef SUF
#undef SQRT

