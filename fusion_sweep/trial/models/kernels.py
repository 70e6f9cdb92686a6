"""Compiled CPU kernels for ReSSFormer (issue 23): top-k selection, the projections' heads,
the sparse attention with R2MU's memory, dot products and weighted sums over gathered rows of
a table, entmax-1.5 on few scores, a masked softmax, and the graph regulariser's row
distances, each with its backward pass.

Why: on CPU, `torch.topk` selects row by row through a generic partial sort (about 1 µs per
row of 128 scores: six times the matmul that made the scores), a gather of the kept keys
(`F.embedding`) writes an (R, k, dh) copy whose backward is a slow index-add, and small ops
(entmax's sort of 13 values, the regulariser's differences, permutes of (…, dh = 16) rows)
cost their dispatch and memory passes many times over. Each loop below does the arithmetic
the FLOPs count (`forward_flops`), plus one pass over the scores to select, and writes
nothing of size (R, k, dh).

    score_topk(q, k, add, kk)  each query's kk best keys by q·kᵀ + add, the scores never
                               stored (unsorted; ties and −inf: any kk of them, as torch.topk)
    heads(raw, parts, heads, unit, scale, sizes)
                               a Linear's output cut into (B, H, n, dh) heads, SOES's unit
                               norm and a per-head scale fused       autograd: raw, scale
    memory_scores(qr, q, kr, ks, kc, gidx, ak, sa)
                               a row's kept-token, slot and own-cache scores   autograd
    memory_mix(w, v, vs, vc, gidx)  their weighted sum                         autograd
    gather_dot(a, table, idx)  s[r, j] = ⟨a[r], table[idx[r, j]]⟩        autograd: a, table
    gather_sum(w, table, idx)  o[r] = Σ_j w[r, j] · table[idx[r, j]]     autograd: w, table
    entmax15(z)                the `entmax` package's 1.5-entmax on short rows, 16 rows at
                               a time (one per vector lane)                    autograd
    masked_softmax(z, mask)    softmax(z + mask) in one pass per row     autograd (z, mask)
    chain_sqdist(ws, n)        ‖A_{t+1} − A_t‖² per row over the first n columns, for each
                               successive pair of a chain                     autograd
    sparse_sqdist(a, ia, b, ib, distinct)  the same for rows of weights at key indices
                                                                         autograd: a, b

The C source is compiled once per machine with the system C compiler (`cc`, else `gcc`,
`clang`) into the cache folder (`cache_root()/kernels/<hash of source, flags and CPU>`),
then loaded with ctypes, which releases the GIL around each call. `available()` is False
where no compiler works, the tensors are not CPU float32/float64, or FUSION_SWEEP_KERNELS=0;
ReSSFormer then runs its pure-torch path, which computes the same values (tests/
test_ressformer_equality.py checks both against the previous implementation; tests/
test_kernels.py each kernel against plain torch). The loops run in one thread, like a trial
(1 torch thread per trial).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from fusion_sweep.trial.data.cache import cache_root

ENV_SWITCH = "FUSION_SWEEP_KERNELS"  # "0" turns the compiled kernels off
# No -ffast-math: −inf scores (padding) must compare as IEEE says. `omp simd` lets the dot
# products vectorise without allowing any other reassociation.
CFLAGS = ("-O3", "-march=native", "-fopenmp-simd", "-fno-math-errno", "-shared", "-fPIC", "-std=c99")

# score_topk reads the keys in panels of 4 vectors of 64 bytes (its 4 vector registers).
PANEL_BYTES = 256
SOURCE = f"#define PANEL_BYTES {PANEL_BYTES}\n" + r"""
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <math.h>

/* Keys per panel in score_topk: 4 vectors of 64 bytes (64 floats, 32 doubles); PANEL_BYTES
   is defined ahead of this source from the Python constant of that name. */
#define BW_MAX 64

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
#define DEFINE(T, S, SQRT)                                                                     \
typedef T vec_##S __attribute__((vector_size(64)));                                        \
/* Keep x in the running top-K (v, o) of a row: fill, then replace the smallest (at m).    \
   The smallest is found again by a branch-free scan (its position is unpredictable). */  \
static inline void keep_##S(T x, int64_t j, T *restrict v, int64_t *restrict o, int64_t K, \
                            int64_t *restrict fill, int64_t *restrict m) {                 \
    if (*fill < K) {                                                                       \
        v[*fill] = x; o[*fill] = j;                                                        \
        if (++*fill < K) return;                                                           \
    } else if (x > v[*m]) {                                                                \
        v[*m] = x; o[*m] = j;                                                              \
    } else return;                                                                         \
    int64_t mi = 0;                                                                        \
    T mv = v[0];                                                                           \
    for (int64_t i = 1; i < K; ++i) {                                                      \
        const int lt = v[i] < mv;                                                          \
        mv = lt ? v[i] : mv; mi = lt ? i : mi;                                             \
    }                                                                                      \
    *m = mi;                                                                               \
}                                                                                          \
/* Per row: trailing −inf entries (right padding) are dropped; the rest is cut into chunks \
   of 8. thr, the K-th largest chunk maximum, has at least K entries at or above it, so     \
   only the entries >= thr of the chunks whose maximum is >= thr can be in the top K (about \
   K + 2 candidates on random scores). Exact whatever the values: ties and −inf only make  \
   more candidates. */                                                                     \
static void topk_row_##S(const T *row, int64_t N, int64_t K, int64_t *o, T *v, T *cm,    \
                         int64_t *ci) {                                                    \
    const int64_t W = 8;                                                                   \
    int64_t fill = 0, m = 0, n = N, cf = 0, cmi = 0;                                       \
    while (n > K && row[n - 1] == -(T)INFINITY) --n;                                       \
    const int64_t full = n / W, nc = (n + W - 1) / W;                                      \
    for (int64_t c = 0; c < full; ++c) {                                                   \
        const T *x = row + c * W;                                                          \
        T mx = x[0];                                                                       \
        for (int64_t j = 1; j < 8; ++j) mx = x[j] > mx ? x[j] : mx;                        \
        cm[c] = mx;                                                                        \
    }                                                                                      \
    if (nc > full) {                                                                       \
        T mx = row[full * W];                                                              \
        for (int64_t j = full * W + 1; j < n; ++j) mx = row[j] > mx ? row[j] : mx;         \
        cm[full] = mx;                                                                     \
    }                                                                                      \
    T thr = -(T)INFINITY;                                                                  \
    if (nc >= K) {                                                                         \
        for (int64_t c = 0; c < nc; ++c) keep_##S(cm[c], c, v, ci, K, &cf, &cmi);          \
        thr = v[cmi];                                                                      \
    }                                                                                      \
    for (int64_t c = 0; c < nc; ++c) {                                                     \
        if (!(cm[c] >= thr)) continue;                                                     \
        const int64_t j1 = (c + 1) * W < n ? (c + 1) * W : n;                              \
        for (int64_t j = c * W; j < j1; ++j)                                               \
            if (row[j] >= thr) keep_##S(row[j], j, v, o, K, &fill, &m);                   \
    }                                                                                      \
    for (int64_t j = 0; fill < K && j < N; ++j) /* NaN: any K indices */                   \
        keep_##S(row[j], j, v, o, K, &fill, &m);                                           \
}                                                                                          \
/* The common case of a row: thr = the K-th largest maximum of C = 2K (at least 16)        \
   interleaved chunks (chunk c: the j with j % C = c; their maxima vectorise), so at least \
   K entries are >= thr. Only those entries (about K + 2 on random scores) are candidates: \
   gathered block by block (a block of 16 with none costs one vector test), and the K      \
   largest of them kept. Exact: the K largest are all >= thr. Returns 0 where the slow path\
   (topk_row) decides: fewer than C entries, NaN, or a tie-heavy row (> 4K candidates). */ \
static int topk_fast_##S(const T *restrict row, int64_t N, int64_t K, int64_t *restrict o, \
                         T *restrict cm, int64_t *restrict ci, T *restrict cv,             \
                         T *restrict v, int32_t *restrict cj) {                            \
    int64_t n = N;                                                                         \
    while (n > K && row[n - 1] == -(T)INFINITY) --n;                                       \
    const int64_t C = 2 * K < 16 ? 16 : (2 * K + 15) / 16 * 16;                            \
    if (n < C) return 0;                                                                   \
    /* a vector of chunks at a time, their running maxima in a register; the entries past  \
       the last full round of C go to the chunks 0, 1, ... */                              \
    const int64_t last = n / C * C, VW = 64 / sizeof(T);                                   \
    for (int64_t c0 = 0; c0 < C; c0 += VW) {                                               \
        T mm[64 / sizeof(T)];                                                              \
        memcpy(mm, row + c0, 64);                                                          \
        for (int64_t j0 = C; j0 < last; j0 += C) {                                         \
            const T *restrict x = row + j0 + c0;                                           \
            _Pragma("omp simd")                                                            \
            for (int64_t l = 0; l < VW; ++l) mm[l] = x[l] > mm[l] ? x[l] : mm[l];          \
        }                                                                                  \
        memcpy(cm + c0, mm, 64);                                                           \
    }                                                                                      \
    for (int64_t j = last; j < n; ++j)                                                     \
        cm[j - last] = row[j] > cm[j - last] ? row[j] : cm[j - last];                      \
    int64_t fill = 0, m = 0;                                                               \
    T thr;                                                                                 \
    if (!kth16_##S(cm, C, K, &thr)) {                                                      \
        for (int64_t c = 0; c < C; ++c) keep_##S(cm[c], c, v, ci, K, &fill, &m);           \
        thr = v[m];                                                                        \
    }                                                                                      \
    if (thr != thr) return 0;                                                              \
    const int64_t nc = compact_##S(row, n, thr, cj, cv);                                   \
    if (nc < K || nc > 4 * K) return 0;                                                    \
    if (select16_##S(cv, cj, nc, K, o)) return 1;                                          \
    fill = 0; m = 0;                                                                       \
    for (int64_t a = 0; a < nc; ++a) keep_##S(cv[a], cj[a], v, o, K, &fill, &m);           \
    return fill == K;                                                                      \
}                                                                                          \
/* Score and select in one pass per query, the scores never leaving a row buffer:         \
   q (BH, GL, D) rows, kt (BH, P, D, BW) the keys in panels of BW, zero-padded to P·BW >= L;\
   add: an additive mask read at add[b*sb + h*sh + (i % L)*si + j] (NULL: none), where     \
   block = b*H + h and i the row in the block. -> out (BH, GL, K) key indices. */           \
void score_topk_##S(const T *q, const T *kt, const T *add, int64_t sb, int64_t sh,         \
                    int64_t si, int64_t BH, int64_t H, int64_t GL, int64_t L, int64_t D,   \
                    int64_t K, int64_t *out) {                                             \
    T *buf = malloc(L * sizeof(T)), *v = malloc(K * sizeof(T)),                            \
      *cm = malloc((L + 16) * sizeof(T)), *cv = malloc((L + 16) * sizeof(T));              \
    int64_t *ci = malloc((L + K) * sizeof(int64_t));                                       \
    int32_t *cj = malloc((L + 16) * sizeof(int32_t));                                      \
    const int64_t BW = PANEL_BYTES / sizeof(T), VW = BW / 4, NP = (L + BW - 1) / BW;       \
    for (int64_t blk = 0; blk < BH; ++blk) {                                               \
        const T *kb = kt + blk * NP * D * BW;                                              \
        for (int64_t i = 0; i < GL; ++i) {                                                 \
            const T *qi = q + (blk * GL + i) * D;                                          \
            const T *ar = add ? add + (blk / H) * sb + (blk % H) * sh + (i % L) * si : NULL;\
            /* A panel (BW keys) at a time, its scores in 4 vector registers (GCC/clang vector\
               extension): the panel is read contiguously, the row buffer written once */  \
            for (int64_t j0 = 0, p = 0; j0 < L; j0 += BW, ++p) {                           \
                const T *panel = kb + p * D * BW;                                          \
                vec_##S a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, kv;                        \
                for (int64_t d = 0; d < D; ++d) {                                          \
                    const T *kd = panel + d * BW;                                          \
                    const vec_##S qd = (vec_##S){0} + qi[d];                               \
                    memcpy(&kv, kd, 64); a0 += qd * kv;                                    \
                    memcpy(&kv, kd + VW, 64); a1 += qd * kv;                               \
                    memcpy(&kv, kd + 2 * VW, 64); a2 += qd * kv;                           \
                    memcpy(&kv, kd + 3 * VW, 64); a3 += qd * kv;                           \
                }                                                                          \
                T tmp[BW_MAX];                                                             \
                memcpy(tmp, &a0, 64); memcpy(tmp + VW, &a1, 64);                           \
                memcpy(tmp + 2 * VW, &a2, 64); memcpy(tmp + 3 * VW, &a3, 64);              \
                const int64_t w = L - j0 < BW ? L - j0 : BW;                               \
                if (ar) { /* the mask after the dot product, as q·kᵀ + add in torch */     \
                    _Pragma("omp simd")                                                    \
                    for (int64_t j = 0; j < w; ++j) buf[j0 + j] = tmp[j] + ar[j0 + j];     \
                } else memcpy(buf + j0, tmp, w * sizeof(T));                               \
            }                                                                              \
            int64_t *o = out + (blk * GL + i) * K;                                         \
            if (!topk_fast_##S(buf, L, K, o, cm, ci, cv, v, cj))                                \
                topk_row_##S(buf, L, K, o, v, cm, ci);                                     \
        }                                                                                  \
    }                                                                                      \
    free(buf); free(v); free(cm); free(ci); free(cv); free(cj);                            \
}                                                                                          \
/* out[r] = Σ_{j<n} (a[r, j] − b[r, j])², rows ra / rb apart (chain_sqdist's forward). */ \
void row_sqdist_##S(const T *a, int64_t ra, const T *b, int64_t rb, int64_t R, int64_t n, \
                    T *out) {                                                              \
    for (int64_t r = 0; r < R; ++r) {                                                      \
        const T *ar = a + r * ra, *br = b + r * rb;                                        \
        T acc = 0;                                                                         \
        _Pragma("omp simd reduction(+:acc)")                                               \
        for (int64_t j = 0; j < n; ++j) acc += (ar[j] - br[j]) * (ar[j] - br[j]);         \
        out[r] = acc;                                                                      \
    }                                                                                      \
}                                                                                          \
/* The gradient of Σ_t Σ_{j<n} go_t[r]·(A_{t+1} − A_t)² for one A_t of a chain: rows of   \
   2·(gp[r]·(A_t − A_{t−1}) − gn[r]·(A_{t+1} − A_t)), 0 beyond column n; prev (with gp) or \
   next (with gn) NULL at the chain's ends. */                                             \
void chain_grad_##S(const T *prev, int64_t rp, const T *cur, int64_t rc, const T *next,   \
                    int64_t rn, const T *gp, const T *gn, int64_t R, int64_t n, int64_t N, \
                    T *out) {                                                              \
    for (int64_t r = 0; r < R; ++r) {                                                      \
        const T *c = cur + r * rc;                                                         \
        const T p2 = prev ? 2 * gp[r] : 0, n2 = next ? 2 * gn[r] : 0;                      \
        const T *pr = prev ? prev + r * rp : c, *nr = next ? next + r * rn : c;            \
        T *o = out + r * N;                                                                \
        _Pragma("omp simd")                                                                \
        for (int64_t j = 0; j < n; ++j) o[j] = p2 * (c[j] - pr[j]) - n2 * (nr[j] - c[j]);  \
        for (int64_t j = n; j < N; ++j) o[j] = 0;                                          \
    }                                                                                      \
}                                                                                          \
/* One row of heads_fwd / heads_bwd (below); inlined with D a constant where it is 16, 32  \
   or 64 (DISPATCH_D), so the row loops vectorise without remainder code. */               \
static inline void head_fwd_##S(const T *restrict x, T *restrict o, T s, int64_t unit,     \
                                int64_t D) {                                               \
    if (unit) {                                                                            \
        T acc = 0;                                                                         \
        _Pragma("omp simd reduction(+:acc)")                                               \
        for (int64_t d = 0; d < D; ++d) acc += x[d] * x[d];                                \
        const T nrm = SQRT(acc), r = 1 / (nrm < (T)1e-12 ? (T)1e-12 : nrm);                \
        s = s * r;                                                                         \
    }                                                                                      \
    _Pragma("omp simd")                                                                    \
    for (int64_t d = 0; d < D; ++d) o[d] = x[d] * s;                                       \
}                                                                                          \
static inline void head_bwd_##S(const T *restrict gi, const T *restrict x, T *restrict gr, \
                                T s, int64_t unit, T *restrict gs, int64_t D) {            \
    if (!unit) {                                                                           \
        if (gs) {                                                                          \
            T dot = 0;                                                                     \
            _Pragma("omp simd reduction(+:dot)")                                           \
            for (int64_t d = 0; d < D; ++d) dot += x[d] * gi[d];                           \
            *gs += dot;                                                                    \
        }                                                                                  \
        _Pragma("omp simd")                                                                \
        for (int64_t d = 0; d < D; ++d) gr[d] = gi[d] * s;                                 \
        return;                                                                            \
    }                                                                                      \
    T acc = 0, dot = 0;                                                                    \
    _Pragma("omp simd reduction(+:acc)")                                                   \
    for (int64_t d = 0; d < D; ++d) acc += x[d] * x[d];                                    \
    const T nrm = SQRT(acc), r = 1 / (nrm < (T)1e-12 ? (T)1e-12 : nrm);                    \
    _Pragma("omp simd reduction(+:dot)")                                                   \
    for (int64_t d = 0; d < D; ++d) dot += x[d] * r * gi[d];                               \
    if (gs) *gs += dot;                                                                    \
    const T c = nrm < (T)1e-12 ? 0 : dot * r, sr = s * r;                                  \
    _Pragma("omp simd")                                                                    \
    for (int64_t d = 0; d < D; ++d) gr[d] = sr * (gi[d] - x[d] * c);                       \
}                                                                                          \
/* Heads out of a projection and back (SOES's normalisation fused in): raw (B, N, P, H, D) \
   is a Linear's output, P projections side by side; part p, rows n0 <= n < n1, goes to out\
   (B, H, n1 − n0, D) contiguous, each row times s = scale[h] (NULL: 1) and, with unit, by \
   r = 1/max(‖row‖, 1e-12) too (as x * (scale * r) in torch). */                           \
void heads_fwd_##S(const T *raw, int64_t B, int64_t N, int64_t P, int64_t H, int64_t D,    \
                   int64_t p, int64_t n0, int64_t n1, int64_t unit, const T *scale, T *out) {\
    const int64_t M = n1 - n0;                                                             \
    for (int64_t b = 0; b < B; ++b)                                                        \
        for (int64_t n = n0; n < n1; ++n)                                                  \
            for (int64_t h = 0; h < H; ++h) {                                              \
                const T *x = raw + (((b * N + n) * P + p) * H + h) * D;                    \
                __builtin_prefetch(x + 8 * P * H * D); /* the same head 8 rows on */       \
                T *o = out + ((b * H + h) * M + n - n0) * D;                               \
                const T s = scale ? scale[h] : (T)1;                                       \
                DISPATCH_D(D, head_fwd_##S(x, o, s, unit, DD));                            \
            }                                                                              \
}                                                                                          \
/* Its backward into graw (raw's shape, part p, rows n0..n1): g (B, H, n1 − n0, D) (NULL:  \
   zero) times s; with unit, minus the component along the row (none where the norm was    \
   clamped); gscale[h] += ⟨g, x·r⟩ (x·1 without unit; NULL: not wanted); r computed again. */\
void heads_bwd_##S(const T *g, const T *raw, int64_t B, int64_t N, int64_t P, int64_t H,   \
                   int64_t D, int64_t p, int64_t n0, int64_t n1, int64_t unit,             \
                   const T *scale, T *graw, T *gscale) {                                   \
    const int64_t M = n1 - n0;                                                             \
    for (int64_t b = 0; b < B; ++b)                                                        \
        for (int64_t n = n0; n < n1; ++n)                                                  \
            for (int64_t h = 0; h < H; ++h) {                                              \
                const int64_t at = (((b * N + n) * P + p) * H + h) * D;                    \
                if (!g) { memset(graw + at, 0, D * sizeof(T)); continue; }                 \
                __builtin_prefetch(raw + at + 8 * P * H * D);                              \
                const T *gi = g + ((b * H + h) * M + n - n0) * D;                          \
                __builtin_prefetch(gi + 8 * D);                                            \
                const T s = scale ? scale[h] : (T)1;                                       \
                T *gs = gscale ? gscale + h : NULL;                                        \
                DISPATCH_D(D, head_bwd_##S(gi, raw + at, graw + at, s, unit, gs, DD));     \
            }                                                                              \
}                                                                                          \
/* 1.5-entmax over rows of N (small: a sort by ranks, O(N²) vector compares), the package's\
   Entmax15Function step by step: x = (z − max)/2, sorted descending; running means give   \
   tau_i; the support is the count of i with tau_i <= x_(i); y = max(x − tau, 0)². Sorted   \
   −inf entries end the scan (there the package's arithmetic gives NaN, never support). */ \
static void entmax15_rows_##S(const T *z, int64_t R, int64_t N, T *y) {                    \
    T *srt = malloc(N * sizeof(T)), *tau = malloc(N * sizeof(T));                          \
    for (int64_t r = 0; r < R; ++r) {                                                      \
        const T *zr = z + r * N;                                                           \
        T *yr = y + r * N, mx = zr[0];                                                     \
        for (int64_t j = 1; j < N; ++j) mx = zr[j] > mx ? zr[j] : mx;                      \
        for (int64_t j = 0; j < N; ++j) yr[j] = srt[j] = (zr[j] - mx) / 2;                 \
        /* sorted by rank (how many come before it): up to 16 entries, padded with −inf    \
           after them, in one vector compare each; NaN: ranks may collide */               \
        T pad[16];                                                                         \
        const int64_t W = N <= 16 ? 16 : N;                                                \
        const T *xs = yr;                                                                  \
        if (N <= 16) {                                                                     \
            for (int64_t j = 0; j < 16; ++j) pad[j] = j < N ? yr[j] : -(T)INFINITY;        \
            xs = pad;                                                                      \
        }                                                                                  \
        for (int64_t i = 0; i < N; ++i) {                                                  \
            const T x = xs[i];                                                             \
            int rank = 0;                                                                  \
            if (W == 16) {                                                                 \
                _Pragma("omp simd reduction(+:rank)")                                      \
                for (int j = 0; j < 16; ++j) rank += (xs[j] > x) | ((xs[j] == x) & (j < i));\
            } else {                                                                       \
                for (int64_t j = 0; j < W; ++j) rank += (xs[j] > x) | ((xs[j] == x) & (j < i));\
            }                                                                              \
            if (rank < N) srt[rank] = x;                                                   \
        }                                                                                  \
        T sum = 0, sq = 0;                                                                 \
        int64_t support = 0;                                                               \
        for (int64_t i = 0; i < N && srt[i] != -(T)INFINITY; ++i) {                        \
            const T rho = (T)(i + 1);                                                      \
            sum += srt[i]; sq += srt[i] * srt[i];                                          \
            const T mean = sum / rho, mean_sq = sq / rho;                                  \
            const T ss = rho * (mean_sq - mean * mean);                                    \
            const T delta = (1 - ss) / rho;                                                \
            tau[i] = mean - SQRT(delta > 0 ? delta : 0);                                   \
            support += tau[i] <= srt[i];                                                   \
        }                                                                                  \
        const T t = tau[support > 0 ? support - 1 : 0];                                    \
        for (int64_t j = 0; j < N; ++j) {                                                  \
            const T d = yr[j] - t;                                                         \
            yr[j] = d > 0 ? d * d : 0;                                                     \
        }                                                                                  \
    }                                                                                      \
    free(srt); free(tau);                                                                  \
}                                                                                          \
/* The same, 64 / sizeof(T) rows at a time (16 in float32), one row per vector lane:       \
   the rows transposed into a local block, sorted by an odd-even transposition network     \
   (N passes of compare-exchange, the same in every lane), the running sums and tau_i in   \
   the same order and arithmetic as one row at a time, then transposed back. Rows of at most\
   64 (ENTMAX_MAX_WIDTH); the last R % lanes rows go one at a time. */                     \
void entmax15_##S(const T *z, int64_t R, int64_t N, T *y) {                                \
    enum { W = 64 / sizeof(T) };                                                           \
    T X[64][W], Sr[64][W], tau[64][W];                                                     \
    const int64_t R0 = N <= 64 ? R / W * W : 0;                                            \
    for (int64_t r0 = 0; r0 < R0; r0 += W) {                                               \
        T mx[W], cs[W], cq[W], t[W];                                                       \
        int64_t alive[W], support[W];                                                      \
        for (int64_t l = 0; l < W; ++l)                                                    \
            for (int64_t i = 0; i < N; ++i) X[i][l] = z[(r0 + l) * N + i];                 \
        _Pragma("omp simd")                                                                \
        for (int64_t l = 0; l < W; ++l) mx[l] = X[0][l];                                   \
        for (int64_t i = 1; i < N; ++i) {                                                  \
            _Pragma("omp simd")                                                            \
            for (int64_t l = 0; l < W; ++l) mx[l] = X[i][l] > mx[l] ? X[i][l] : mx[l];     \
        }                                                                                  \
        for (int64_t i = 0; i < N; ++i) {                                                  \
            _Pragma("omp simd")                                                            \
            for (int64_t l = 0; l < W; ++l) Sr[i][l] = X[i][l] = (X[i][l] - mx[l]) / 2;    \
        }                                                                                  \
        for (int64_t pass = 0; pass < N; ++pass)                                           \
            for (int64_t i = pass & 1; i + 1 < N; i += 2) {                                \
                _Pragma("omp simd")                                                        \
                for (int64_t l = 0; l < W; ++l) {                                          \
                    const T a = Sr[i][l], b = Sr[i + 1][l];                                \
                    const int up = b > a;                                                  \
                    Sr[i][l] = up ? b : a;                                                 \
                    Sr[i + 1][l] = up ? a : b;                                             \
                }                                                                          \
            }                                                                              \
        _Pragma("omp simd")                                                                \
        for (int64_t l = 0; l < W; ++l) { cs[l] = 0; cq[l] = 0; alive[l] = 1; support[l] = 0; }\
        for (int64_t i = 0; i < N; ++i) {                                                  \
            const T rho = (T)(i + 1);                                                      \
            _Pragma("omp simd")                                                            \
            for (int64_t l = 0; l < W; ++l) {                                              \
                const T x = Sr[i][l];                                                      \
                alive[l] &= x != -(T)INFINITY;                                             \
                cs[l] += alive[l] ? x : 0;                                                 \
                cq[l] += alive[l] ? x * x : 0;                                             \
                const T mean = cs[l] / rho, mean_sq = cq[l] / rho;                         \
                const T ss = rho * (mean_sq - mean * mean);                                \
                const T delta = (1 - ss) / rho;                                            \
                tau[i][l] = mean - SQRT(delta > 0 ? delta : 0);                            \
                support[l] += alive[l] & (tau[i][l] <= x);                                 \
            }                                                                              \
        }                                                                                  \
        _Pragma("omp simd")                                                                \
        for (int64_t l = 0; l < W; ++l) t[l] = tau[0][l];                                  \
        for (int64_t i = 1; i < N; ++i) {                                                  \
            _Pragma("omp simd")                                                            \
            for (int64_t l = 0; l < W; ++l) t[l] = support[l] - 1 == i ? tau[i][l] : t[l]; \
        }                                                                                  \
        for (int64_t l = 0; l < W; ++l)                                                    \
            for (int64_t i = 0; i < N; ++i) {                                              \
                const T d = X[i][l] - t[l];                                                \
                y[(r0 + l) * N + i] = d > 0 ? d * d : 0;                                   \
            }                                                                              \
    }                                                                                      \
    if (R0 < R) entmax15_rows_##S(z + R0 * N, R - R0, N, y + R0 * N);                      \
}                                                                                          \
void entmax15_grad_##S(const T *y, const T *dy, int64_t R, int64_t N, T *dx) {            \
    for (int64_t r = 0; r < R; ++r) {                                                      \
        const T *yr = y + r * N, *gr = dy + r * N;                                         \
        T *o = dx + r * N, num = 0, den = 0;                                               \
        for (int64_t j = 0; j < N; ++j) {                                                  \
            const T g = SQRT(yr[j]);                                                       \
            o[j] = gr[j] * g; num += o[j]; den += g;                                       \
        }                                                                                  \
        const T q = num / den;                                                             \
        for (int64_t j = 0; j < N; ++j) o[j] -= q * SQRT(yr[j]);                           \
    }                                                                                      \
}                                                                                          \
/* ‖Σ_i a_i e(ia_i) − Σ_j b_j e(ib_j)‖² per row of two sparse rows (weights at key         \
   indices; an index may repeat), and its gradient: by pairs of entries, O((Na + Nb)²).    \
   distinct: no index repeats within a row (top-k of one expert), so a row's weight at its \
   own i-th key is its i-th entry; rows of 8 or 16 entries: the loops unrolled. */         \
static inline T sparse_dot_##S(const T *a, const int64_t *ia, int64_t Na, int64_t key) {   \
    T acc = 0;                                                                             \
    _Pragma("omp simd reduction(+:acc)")                                                   \
    for (int64_t i = 0; i < Na; ++i) acc += ia[i] == key ? a[i] : 0;                       \
    return acc;                                                                            \
}                                                                                          \
static inline void sparse_row_##S(const T *ar, const int64_t *iar, int64_t Na, const T *br,\
                                  const int64_t *ibr, int64_t Nb, int64_t distinct,        \
                                  const T *go, T *out, T *ga, T *gb) {                     \
    T acc = 0;                                                                             \
    for (int64_t i = 0; i < Na; ++i) {  /* d_i: the difference at a's key i */             \
        const T own = distinct ? ar[i] : sparse_dot_##S(ar, iar, Na, iar[i]);              \
        const T d = own - sparse_dot_##S(br, ibr, Nb, iar[i]);                             \
        if (go) ga[i] = 2 * *go * d; else acc += ar[i] * d;                                \
    }                                                                                      \
    for (int64_t j = 0; j < Nb; ++j) {                                                     \
        const T own = distinct ? br[j] : sparse_dot_##S(br, ibr, Nb, ibr[j]);              \
        const T d = own - sparse_dot_##S(ar, iar, Na, ibr[j]);                             \
        if (go) gb[j] = 2 * *go * d; else acc += br[j] * d;                                \
    }                                                                                      \
    if (!go) *out = acc;                                                                   \
}                                                                                          \
void sparse_sqdist_##S(const T *a, const int64_t *ia, int64_t Na, const T *b,              \
                       const int64_t *ib, int64_t Nb, int64_t R, int64_t distinct,         \
                       const T *go, T *out, T *ga, T *gb) {                                \
    for (int64_t r = 0; r < R; ++r) {                                                      \
        const T *ar = a + r * Na, *br = b + r * Nb, *gr = go ? go + r : NULL;              \
        const int64_t *iar = ia + r * Na, *ibr = ib + r * Nb;                              \
        T *o = go ? NULL : out + r, *gar = go ? ga + r * Na : NULL, *gbr = go ? gb + r * Nb : NULL;\
        if (Na == 8 && Nb == 8)                                                            \
            sparse_row_##S(ar, iar, 8, br, ibr, 8, distinct, gr, o, gar, gbr);             \
        else if (Na == 16 && Nb == 16)                                                     \
            sparse_row_##S(ar, iar, 16, br, ibr, 16, distinct, gr, o, gar, gbr);           \
        else                                                                               \
            sparse_row_##S(ar, iar, Na, br, ibr, Nb, distinct, gr, o, gar, gbr);           \
    }                                                                                      \
}                                                                                          \
/* Sparse attention with R2MU's memory, per query row r (block blk = r / GL of B·H, token  \
   i = r % L, batch b = blk / H): N = K + S + 1 scores [the K kept token keys, the block's \
   S slots, the row's own cache entry]. Tables: kr, v (BH·L, D) rows at gidx (R, K); ks, vs\
   (BH, S, D); kc, vc (BH·L, D). */                                                        \
static inline T dot_##S(const T *restrict a, const T *restrict b, int64_t D) {             \
    T acc = 0;                                                                             \
    _Pragma("omp simd reduction(+:acc)")                                                   \
    for (int64_t d = 0; d < D; ++d) acc += a[d] * b[d];                                    \
    return acc;                                                                            \
}                                                                                          \
static inline void axpy_##S(T *restrict y, T a, const T *restrict x, int64_t D) {          \
    _Pragma("omp simd")                                                                    \
    for (int64_t d = 0; d < D; ++d) y[d] += a * x[d];                                      \
}                                                                                          \
static inline void mem_scores_row_##S(const T *qr, const T *q, const T *kr, const int64_t *ix,\
                                      const T *ak, const T *ks, const T *sa, const T *kc,  \
                                      int64_t K, int64_t S, T *z, int64_t D) {             \
    for (int64_t j = 0; j < K; ++j)                                                        \
        z[j] = dot_##S(qr, kr + ix[j] * D, D) + (ak ? ak[j] : 0);                          \
    for (int64_t m = 0; m < S; ++m) z[K + m] = dot_##S(q, ks + m * D, D) + sa[m];          \
    z[K + S] = dot_##S(q, kc, D);                                                          \
}                                                                                          \
/* z (R, N): the scores (token scores plus ak (R, K), the mask at the kept keys, or NULL;  \
   slot scores plus sa (B, S), 0 or −inf). */                                              \
void mem_scores_##S(const T *qr, const T *q, const T *kr, const int64_t *gidx, const T *ak,\
                    const T *ks, const T *sa, const T *kc, int64_t R, int64_t K, int64_t S,\
                    int64_t D, int64_t GL, int64_t H, int64_t L, T *z) {                   \
    for (int64_t r = 0; r < R; ++r) {                                                      \
        const int64_t blk = r / GL, i = r % L;                                             \
        DISPATCH_D(D, mem_scores_row_##S(qr + r * D, q + r * D, kr, gidx + r * K,          \
                                         ak ? ak + r * K : NULL, ks + blk * S * DD,        \
                                         sa + (blk / H) * S, kc + (blk * L + i) * DD, K, S,\
                                         z + r * (K + S + 1), DD));                        \
    }                                                                                      \
}                                                                                          \
static inline void mem_scores_grad_row_##S(const T *dz, const T *qr, const T *q, const T *kr,\
                                           const int64_t *ix, const T *ks, const T *kc,    \
                                           int64_t K, int64_t S, T *dqr, T *dq, T *dkr,    \
                                           T *dks, T *dkc, int64_t D) {                    \
    memset(dqr, 0, D * sizeof(T)); memset(dq, 0, D * sizeof(T));                           \
    for (int64_t j = 0; j < K; ++j) {                                                      \
        axpy_##S(dqr, dz[j], kr + ix[j] * D, D);                                           \
        axpy_##S(dkr + ix[j] * D, dz[j], qr, D);                                           \
    }                                                                                      \
    for (int64_t m = 0; m < S; ++m) {                                                      \
        axpy_##S(dq, dz[K + m], ks + m * D, D);                                            \
        axpy_##S(dks + m * D, dz[K + m], q, D);                                            \
    }                                                                                      \
    axpy_##S(dq, dz[K + S], kc, D);                                                        \
    axpy_##S(dkc, dz[K + S], q, D);                                                        \
}                                                                                          \
/* mem_scores' backward: dqr, dq (R, D) written; dkr, dks, dkc accumulated (zeroed first). */\
void mem_scores_grad_##S(const T *dz, const T *qr, const T *q, const T *kr,                \
                         const int64_t *gidx, const T *ks, const T *kc, int64_t R, int64_t K,\
                         int64_t S, int64_t D, int64_t GL, int64_t L, T *dqr, T *dq, T *dkr,\
                         T *dks, T *dkc) {                                                 \
    for (int64_t r = 0; r < R; ++r) {                                                      \
        const int64_t blk = r / GL, i = r % L;                                             \
        DISPATCH_D(D, mem_scores_grad_row_##S(dz + r * (K + S + 1), qr + r * DD, q + r * DD,\
                                              kr, gidx + r * K, ks + blk * S * DD,         \
                                              kc + (blk * L + i) * DD, K, S, dqr + r * DD, \
                                              dq + r * DD, dkr, dks + blk * S * DD,        \
                                              dkc + (blk * L + i) * DD, DD));              \
    }                                                                                      \
}                                                                                          \
static inline void mem_mix_row_##S(const T *w, const T *v, const int64_t *ix, const T *vs, \
                                   const T *vc, int64_t K, int64_t S, T *o, int64_t D) {   \
    memset(o, 0, D * sizeof(T));                                                           \
    for (int64_t j = 0; j < K; ++j) axpy_##S(o, w[j], v + ix[j] * D, D);                   \
    for (int64_t m = 0; m < S; ++m) axpy_##S(o, w[K + m], vs + m * D, D);                  \
    axpy_##S(o, w[K + S], vc, D);                                                          \
}                                                                                          \
/* out (R, D) = Σ_j w_j v[gidx_j] + Σ_m w_{K+m} vs_m + w_{K+S} vc_i: the weighted sum. */  \
void mem_mix_##S(const T *w, const T *v, const int64_t *gidx, const T *vs, const T *vc,    \
                 int64_t R, int64_t K, int64_t S, int64_t D, int64_t GL, int64_t L, T *out) {\
    for (int64_t r = 0; r < R; ++r) {                                                      \
        const int64_t blk = r / GL, i = r % L;                                             \
        DISPATCH_D(D, mem_mix_row_##S(w + r * (K + S + 1), v, gidx + r * K, vs + blk * S * DD,\
                                      vc + (blk * L + i) * DD, K, S, out + r * DD, DD));   \
    }                                                                                      \
}                                                                                          \
static inline void mem_mix_grad_row_##S(const T *go, const T *w, const T *v, const int64_t *ix,\
                                        const T *vs, const T *vc, int64_t K, int64_t S, T *dw,\
                                        T *dv, T *dvs, T *dvc, int64_t D) {                \
    for (int64_t j = 0; j < K; ++j) {                                                      \
        dw[j] = dot_##S(go, v + ix[j] * D, D);                                             \
        axpy_##S(dv + ix[j] * D, w[j], go, D);                                             \
    }                                                                                      \
    for (int64_t m = 0; m < S; ++m) {                                                      \
        dw[K + m] = dot_##S(go, vs + m * D, D);                                            \
        axpy_##S(dvs + m * D, w[K + m], go, D);                                            \
    }                                                                                      \
    dw[K + S] = dot_##S(go, vc, D);                                                        \
    axpy_##S(dvc, w[K + S], go, D);                                                        \
}                                                                                          \
/* mem_mix's backward: dw (R, N) written; dv, dvs, dvc accumulated (zeroed first). */      \
void mem_mix_grad_##S(const T *go, const T *w, const T *v, const int64_t *gidx, const T *vs,\
                      const T *vc, int64_t R, int64_t K, int64_t S, int64_t D, int64_t GL, \
                      int64_t L, T *dw, T *dv, T *dvs, T *dvc) {                           \
    for (int64_t r = 0; r < R; ++r) {                                                      \
        const int64_t blk = r / GL, i = r % L;                                             \
        DISPATCH_D(D, mem_mix_grad_row_##S(go + r * DD, w + r * (K + S + 1), v, gidx + r * K,\
                                           vs + blk * S * DD, vc + (blk * L + i) * DD, K, S,\
                                           dw + r * (K + S + 1), dv, dvs + blk * S * DD,   \
                                           dvc + (blk * L + i) * DD, DD));                 \
    }                                                                                      \
}                                                                                          \
void gather_dot_##S(const T *a, const T *t, const int64_t *idx, int64_t R, int64_t K,     \
                    int64_t D, T *out) {                                                   \
    for (int64_t r = 0; r < R; ++r) {                                                      \
        const T *ar = a + r * D;                                                           \
        for (int64_t j = 0; j < K; ++j) {                                                  \
            const T *tr = t + idx[r * K + j] * D;                                          \
            T acc = 0;                                                                     \
            _Pragma("omp simd reduction(+:acc)")                                           \
            for (int64_t d = 0; d < D; ++d) acc += ar[d] * tr[d];                          \
            out[r * K + j] = acc;                                                          \
        }                                                                                  \
    }                                                                                      \
}                                                                                          \
void gather_sum_##S(const T *w, const T *t, const int64_t *idx, int64_t R, int64_t K,     \
                    int64_t D, T *out) {                                                   \
    for (int64_t r = 0; r < R; ++r) {                                                      \
        T *o = out + r * D;                                                                \
        memset(o, 0, D * sizeof(T));                                                       \
        for (int64_t j = 0; j < K; ++j) {                                                  \
            const T *tr = t + idx[r * K + j] * D;                                          \
            const T wj = w[r * K + j];                                                     \
            _Pragma("omp simd")                                                            \
            for (int64_t d = 0; d < D; ++d) o[d] += wj * tr[d];                            \
        }                                                                                  \
    }                                                                                      \
}                                                                                          \
/* Softmax's backward over rows of N: gz = y · (g − Σ g·y). */                             \
void softmax_grad_##S(const T *y, const T *g, int64_t R, int64_t N, T *gz) {               \
    for (int64_t r = 0; r < R; ++r) {                                                      \
        const T *yr = y + r * N, *gr = g + r * N;                                          \
        T *o = gz + r * N, dot = 0;                                                        \
        _Pragma("omp simd reduction(+:dot)")                                               \
        for (int64_t j = 0; j < N; ++j) dot += yr[j] * gr[j];                              \
        _Pragma("omp simd")                                                                \
        for (int64_t j = 0; j < N; ++j) o[j] = yr[j] * (gr[j] - dot);                      \
    }                                                                                      \
}                                                                                          \
void scatter_outer_##S(const T *w, const T *a, const int64_t *idx, int64_t R, int64_t K,  \
                       int64_t D, T *out) {                                                \
    for (int64_t r = 0; r < R; ++r) {                                                      \
        const T *ar = a + r * D;                                                           \
        for (int64_t j = 0; j < K; ++j) {                                                  \
            T *o = out + idx[r * K + j] * D;                                               \
            const T wj = w[r * K + j];                                                     \
            _Pragma("omp simd")                                                            \
            for (int64_t d = 0; d < D; ++d) o[d] += wj * ar[d];                            \
        }                                                                                  \
    }                                                                                      \
}

DEFINE(float, f32, sqrtf)
DEFINE(double, f64, sqrt)

/* Softmax of z + mask over rows of N (dense attention): the mask read at m[b*sb + h*sh +
   i*si] for row r = ((b*H + h)*G + g)*L + i (NULL: none), added in the same pass. float32:
   exp by the Cephes polynomial on 16 lanes (GCC/clang vector extension; within 2 ulp of
   expf), anything below −87.3 after the max is subtracted (−inf: a masked key) an exact 0.
   float64: libm's exp. A row of only −inf gives NaN, as torch's softmax. */
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
static inline const float *mrow_f32(const float *m, int64_t r, int64_t H, int64_t G,
                                    int64_t L, int64_t sb, int64_t sh, int64_t si) {
    const int64_t i = r % L, h = (r / (G * L)) % H, b = r / (H * G * L);
    return m ? m + b * sb + h * sh + i * si : NULL;
}
void masked_softmax_f32(const float *z, const float *m, int64_t sb, int64_t sh, int64_t si,
                        int64_t H, int64_t G, int64_t L, int64_t R, int64_t N, float *y) {
    for (int64_t r = 0; r < R; ++r) {
        const float *zr = z + r * N, *mr = mrow_f32(m, r, H, G, L, sb, sh, si);
        float *yr = y + r * N, mx = -INFINITY;
        if (mr) {
            _Pragma("omp simd reduction(max:mx)")
            for (int64_t j = 0; j < N; ++j) {
                const float t = zr[j] + mr[j];
                yr[j] = t; mx = t > mx ? t : mx;
            }
        } else {
            _Pragma("omp simd reduction(max:mx)")
            for (int64_t j = 0; j < N; ++j) { yr[j] = zr[j]; mx = zr[j] > mx ? zr[j] : mx; }
        }
        v16f acc = {0};
        int64_t j = 0;
        for (; j + 16 <= N; j += 16) {
            v16f x;
            memcpy(&x, yr + j, 64);
            const v16f e = exp16_nonpos(x - mx);
            memcpy(yr + j, &e, 64);
            acc += e;
        }
        if (j < N) { /* the last < 16 entries, padded with −inf (exp 0) */
            float t[16];
            for (int l = 0; l < 16; ++l) t[l] = j + l < N ? yr[j + l] : -INFINITY;
            v16f x;
            memcpy(&x, t, 64);
            const v16f e = exp16_nonpos(x - mx);
            acc += e;
            memcpy(t, &e, 64);
            for (int l = 0; j + l < N; ++l) yr[j + l] = t[l];
        }
        float sum = 0;
        for (int l = 0; l < 16; ++l) sum += acc[l];
        const float inv = 1 / sum;
        _Pragma("omp simd")
        for (int64_t k = 0; k < N; ++k) yr[k] *= inv;
    }
}
void masked_softmax_f64(const double *z, const double *m, int64_t sb, int64_t sh, int64_t si,
                        int64_t H, int64_t G, int64_t L, int64_t R, int64_t N, double *y) {
    for (int64_t r = 0; r < R; ++r) {
        const int64_t i = r % L, h = (r / (G * L)) % H, b = r / (H * G * L);
        const double *zr = z + r * N, *mr = m ? m + b * sb + h * sh + i * si : NULL;
        double *yr = y + r * N, mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < N; ++j) {
            yr[j] = mr ? zr[j] + mr[j] : zr[j];
            mx = yr[j] > mx ? yr[j] : mx;
        }
        for (int64_t j = 0; j < N; ++j) { yr[j] = exp(yr[j] - mx); sum += yr[j]; }
        for (int64_t j = 0; j < N; ++j) yr[j] /= sum;
    }
}
"""
_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}
_I64 = ctypes.c_int64


def _cpu_key() -> str:
    """What -march=native compiles for: the CPU's model and flags (a library built on one
    CPU may not run on another that shares the cache folder)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    keep = [ln for ln in lines if ln.startswith(("model name", "flags"))][:2]
    return "\n".join([platform.machine(), platform.processor(), *keep])


def _compiler() -> str | None:
    return next((c for c in (os.environ.get("CC", ""), "cc", "gcc", "clang") if c and shutil.which(c)), None)


@lru_cache(maxsize=1)
def _library() -> ctypes.CDLL | None:
    """The compiled kernels, building them on first use; None where that is impossible."""
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return None
    cc = _compiler()
    if cc is None:
        return None
    key = hashlib.sha256("\n".join([SOURCE, cc, *CFLAGS, _cpu_key()]).encode()).hexdigest()[:24]
    folder = cache_root() / "kernels" / key
    lib = folder / "ressformer_kernels.so"
    if not lib.exists():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=folder) as tmp:  # concurrent trials: build
                src, out = Path(tmp) / "k.c", Path(tmp) / "k.so"  # apart, rename atomically
                src.write_text(SOURCE)
                subprocess.run([cc, *CFLAGS, "-o", str(out), str(src), "-lm"], check=True,
                               capture_output=True, timeout=120)
                os.replace(out, lib)
        except (OSError, subprocess.SubprocessError):
            return None
    try:
        return ctypes.CDLL(str(lib))
    except OSError:
        return None


def available(*tensors: torch.Tensor) -> bool:
    """Whether the compiled kernels can run on these tensors (CPU, float32 or float64)."""
    return (all(t.device.type == "cpu" and t.dtype in _SUFFIX for t in tensors)
            and _library() is not None)


def _call(name: str, dtype: torch.dtype, *args) -> None:
    fn = getattr(_library(), f"{name}_{_SUFFIX[dtype]}")
    fn(*[ctypes.c_void_p(a.data_ptr()) if isinstance(a, torch.Tensor)
         else ctypes.c_void_p(None) if a is None else _I64(a) for a in args])


def _row_mask(mask: torch.Tensor | None, dtype: torch.dtype,
              dims: tuple[int, int, int]) -> tuple[torch.Tensor | None, tuple[int, int, int]]:
    """An additive mask as the kernels read it: rows of unit stride, and its strides along
    the (batch, head, query) dims `dims` (0 where it broadcasts); None: (None, zeros)."""
    if mask is None:
        return None, (0, 0, 0)
    m = mask.detach().to(dtype)
    if m.stride(-1) != 1:
        m = m.contiguous()
    return m, tuple(0 if m.shape[i] == 1 else m.stride(i) for i in dims)


def _row_grad(name: str, y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """The backward of a row-wise map from its output y (..., N): kernel `name`(y, dy)."""
    dz = torch.empty_like(y)
    _call(name, y.dtype, y, dy.contiguous(), y.numel() // y.shape[-1], y.shape[-1], dz)
    return dz


def score_topk(q: torch.Tensor, k: torch.Tensor, add: torch.Tensor | None, kk: int) -> torch.Tensor:
    """Each query's kk highest-scoring keys, scores never stored: q (B, H, G, L, dh), k (B, H,
    L, dh), add None | (B, 1, 1, L) | (B, H, L, L) added to the scores (padding −inf, a pe's
    bias). No autograd (it selects). -> (B, H, G, L, kk) int64, unsorted."""
    B, H, G, L, D = q.shape
    qc = q.detach().contiguous()
    bw = PANEL_BYTES // q.element_size()  # keys per panel: the kernel's 4 vector registers
    pad = (-L) % bw
    kp = F.pad(k.detach(), (0, 0, 0, pad)) if pad else k.detach()  # (B, H, P·bw, dh)
    kt = kp.view(B, H, -1, bw, D).transpose(-1, -2).contiguous()  # (B, H, P, dh, bw) panels
    out = torch.empty(B, H, G, L, kk, dtype=torch.int64)
    mask, strides = _row_mask(add, q.dtype, (0, 1, 2))
    _call("score_topk", q.dtype, qc, kt, mask, *strides, B * H, H, G * L, L, D, kk, out)
    return out


def _gather_dot(a: torch.Tensor, table: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    R, D = a.shape
    out = torch.empty(R, idx.shape[1], dtype=a.dtype)
    _call("gather_dot", a.dtype, a, table, idx, R, idx.shape[1], D, out)
    return out


def _gather_sum(w: torch.Tensor, table: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    R, K = w.shape
    out = torch.empty(R, table.shape[1], dtype=w.dtype)
    _call("gather_sum", w.dtype, w, table, idx, R, K, table.shape[1], out)
    return out


def _scatter_outer(w: torch.Tensor, a: torch.Tensor, idx: torch.Tensor, rows: int) -> torch.Tensor:
    """out[idx[r, j]] += w[r, j] · a[r]: the table's gradient, (rows, D)."""
    R, K = w.shape
    out = torch.zeros(rows, a.shape[1], dtype=a.dtype)
    _call("scatter_outer", a.dtype, w, a, idx, R, K, a.shape[1], out)
    return out


class _GatherDot(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, table, idx):  # a (R, D), table (M, D), idx (R, K) -> (R, K)
        a, table, idx = a.contiguous(), table.contiguous(), idx.contiguous()
        ctx.save_for_backward(a, table, idx)
        return _gather_dot(a, table, idx)

    @staticmethod
    @once_differentiable
    def backward(ctx, ds):
        a, table, idx = ctx.saved_tensors
        ds = ds.contiguous()
        da = _gather_sum(ds, table, idx) if ctx.needs_input_grad[0] else None
        dt = _scatter_outer(ds, a, idx, table.shape[0]) if ctx.needs_input_grad[1] else None
        return da, dt, None


class _GatherSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w, table, idx):  # w (R, K), table (M, D), idx (R, K) -> (R, D)
        w, table, idx = w.contiguous(), table.contiguous(), idx.contiguous()
        ctx.save_for_backward(w, table, idx)
        return _gather_sum(w, table, idx)

    @staticmethod
    @once_differentiable
    def backward(ctx, do):
        w, table, idx = ctx.saved_tensors
        do = do.contiguous()
        dw = _gather_dot(do, table, idx) if ctx.needs_input_grad[0] else None
        dt = _scatter_outer(w, do, idx, table.shape[0]) if ctx.needs_input_grad[1] else None
        return dw, dt, None


def _rows(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """x (..., N) as rows: itself and its row stride where its rows are evenly spaced with
    unit columns (a split or a slice of a contiguous tensor), else a contiguous copy."""
    shape, stride = x.shape, x.stride()
    even = x.dim() >= 2 and stride[-1] == 1 and all(
        stride[i] == stride[i + 1] * shape[i + 1] for i in range(x.dim() - 2))
    return (x, stride[-2]) if even else (x.contiguous(), shape[-1])


class _ChainSqDist(torch.autograd.Function):
    @staticmethod
    def forward(ctx, n, *ws):  # P + 1 tensors (..., N) of one shape -> (P, ...)
        rows = [_rows(w) for w in ws]
        ctx.save_for_backward(*[r[0] for r in rows])
        ctx.strides, ctx.n = [r[1] for r in rows], n
        out = torch.empty(len(ws) - 1, *ws[0].shape[:-1], dtype=ws[0].dtype)
        for t, ((a, ra), (b, rb)) in enumerate(zip(rows, rows[1:])):
            _call("row_sqdist", a.dtype, a, ra, b, rb, out[t].numel(), n, out[t])
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, go):
        ws, st, go = ctx.saved_tensors, ctx.strides, go.contiguous()
        grads = []
        for t, w in enumerate(ws):
            prev = (ws[t - 1], st[t - 1], go[t - 1]) if t > 0 else (None, 0, None)
            nxt = (ws[t + 1], st[t + 1], go[t]) if t + 1 < len(ws) else (None, 0, None)
            g = torch.empty(w.shape, dtype=w.dtype)
            _call("chain_grad", w.dtype, prev[0], prev[1], w, st[t], nxt[0], nxt[1], prev[2],
                  nxt[2], go[0].numel(), ctx.n, w.shape[-1], g)
            grads.append(g)
        return (None, *grads)


def chain_sqdist(ws: list[torch.Tensor], n: int | None = None) -> torch.Tensor:
    """‖A_{t+1} − A_t‖² per row over the first n columns (None: all) for a chain A_0..A_P of
    one shape (..., N) -> (P, ...). Its backward writes one gradient per A_t (not one per
    pair, summed afterwards): the least memory traffic for dense (L, L) graphs."""
    return _ChainSqDist.apply(ws[0].shape[-1] if n is None else n, *ws)


class _Heads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, raw, scale, parts, heads, unit, sizes):
        # raw (B, N, parts·heads·D) -> parts × len(sizes) tensors (B, heads, n, D)
        B, N, F = raw.shape
        D = F // (parts * heads)
        raw = raw.contiguous()
        sc = None if scale is None else scale.detach().to(raw.dtype).contiguous()
        outs = []
        for p in range(parts):
            n0 = 0
            for m in sizes:
                o = torch.empty(B, heads, m, D, dtype=raw.dtype)
                _call("heads_fwd", raw.dtype, raw, B, N, parts, heads, D, p, n0, n0 + m,
                      int(unit[p]), sc, o)
                outs.append(o)
                n0 += m
        ctx.save_for_backward(raw, sc)
        ctx.shape, ctx.unit, ctx.sizes = (B, N, parts, heads, D), unit, sizes
        ctx.set_materialize_grads(False)  # an unused output's gradient: None, not zeros
        return tuple(outs)

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        raw, sc = ctx.saved_tensors
        B, N, parts, heads, D = ctx.shape
        graw = torch.empty_like(raw)
        gscale = torch.zeros(heads, dtype=raw.dtype) if ctx.needs_input_grad[1] else None
        it = iter(grads)
        for p in range(parts):
            n0 = 0
            for m in ctx.sizes:
                g = next(it)
                _call("heads_bwd", raw.dtype, None if g is None else g.contiguous(), raw, B, N,
                      parts, heads, D, p, n0, n0 + m, int(ctx.unit[p]), sc, graw, gscale)
                n0 += m
        return graw, gscale, None, None, None, None


def heads(raw: torch.Tensor, parts: int, heads: int, unit: tuple[bool, ...],
          scale: torch.Tensor | None, sizes: list[int]) -> tuple[torch.Tensor, ...]:
    """A Linear's output raw (B, N, parts·heads·dh), `parts` projections side by side (q; or k
    and v), cut into heads: for each part and each run of rows of `sizes` (summing to N), a
    contiguous (B, heads, n, dh) tensor, rows times scale[h] ((heads,) or None) and, where
    unit[part], divided by max(‖row‖, 1e-12) first (SOES: `ressformer._unit`). One pass each
    way; the backward writes raw's gradient in place of the permute-and-copy of torch's."""
    return _Heads.apply(raw, scale, parts, heads, tuple(unit), tuple(sizes))


class _MemoryScores(torch.autograd.Function):
    @staticmethod
    def forward(ctx, qr, q, kr, ks, kc, gidx, ak, sa):
        # qr, q (B, H, G, L, D); kr, kc (B, H, L, D); ks (B, H, S, D); gidx (B, H, G, L, K);
        # ak (B, H, G, L, K) or None; sa (B, S) -> z (B, H, G, L, K + S + 1)
        B, H, G, L, D = q.shape
        K, S = gidx.shape[-1], ks.shape[2]
        qr, q, kr, ks, kc, gidx, sa = (t.contiguous() for t in (qr, q, kr, ks, kc, gidx, sa))
        ak = None if ak is None else ak.contiguous()
        z = torch.empty(B, H, G, L, K + S + 1, dtype=q.dtype)
        _call("mem_scores", q.dtype, qr, q, kr, gidx, ak, ks, sa, kc, B * H * G * L, K, S, D,
              G * L, H, L, z)
        ctx.save_for_backward(qr, q, kr, ks, kc, gidx)
        ctx.dims = (K, S, D, G * L, L)
        return z

    @staticmethod
    @once_differentiable
    def backward(ctx, dz):
        qr, q, kr, ks, kc, gidx = ctx.saved_tensors
        K, S, D, GL, L = ctx.dims
        dqr, dq = torch.empty_like(qr), torch.empty_like(q)
        dkr, dks, dkc = torch.zeros_like(kr), torch.zeros_like(ks), torch.zeros_like(kc)
        _call("mem_scores_grad", q.dtype, dz.contiguous(), qr, q, kr, gidx, ks, kc,
              q.numel() // D, K, S, D, GL, L, dqr, dq, dkr, dks, dkc)
        dak = dz[..., :K] if ctx.needs_input_grad[6] else None
        return dqr, dq, dkr, dks, dkc, None, dak, None


class _MemoryMix(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w, v, vs, vc, gidx):
        # w (B, H, G, L, K + S + 1); v, vc (B, H, L, D); vs (B, H, S, D) -> (B, H, G, L, D)
        B, H, G, L, N = w.shape
        K, S, D = gidx.shape[-1], vs.shape[2], v.shape[-1]
        w, v, vs, vc, gidx = (t.contiguous() for t in (w, v, vs, vc, gidx))
        out = torch.empty(B, H, G, L, D, dtype=w.dtype)
        _call("mem_mix", w.dtype, w, v, gidx, vs, vc, B * H * G * L, K, S, D, G * L, L, out)
        ctx.save_for_backward(w, v, vs, vc, gidx)
        ctx.dims = (K, S, D, G * L, L)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, go):
        w, v, vs, vc, gidx = ctx.saved_tensors
        K, S, D, GL, L = ctx.dims
        dw = torch.empty_like(w)
        dv, dvs, dvc = torch.zeros_like(v), torch.zeros_like(vs), torch.zeros_like(vc)
        _call("mem_mix_grad", w.dtype, go.contiguous(), w, v, gidx, vs, vc,
              w.numel() // w.shape[-1], K, S, D, GL, L, dw, dv, dvs, dvc)
        return dw, dv, dvs, dvc, None


def memory_scores(qr: torch.Tensor, q: torch.Tensor, kr: torch.Tensor, ks: torch.Tensor,
                  kc: torch.Tensor, gidx: torch.Tensor, ak: torch.Tensor | None,
                  sa: torch.Tensor) -> torch.Tensor:
    """Sparse attention's scores with R2MU's memory, one loop per query row: qr, q (B, H, G,
    L, dh) (rotated, and not: the memory keys carry no position); the kept token keys' rows
    gidx (B, H, G, L, k) of kr (B, H, L, dh), plus ak (the mask there) or None; the slots ks
    (B, H, S, dh), plus sa (B, S) 0 / −inf; the row's own cache key kc (B, H, L, dh)
    -> z (B, H, G, L, k + S + 1)."""
    return _MemoryScores.apply(qr, q, kr, ks, kc, gidx, ak, sa)


def memory_mix(w: torch.Tensor, v: torch.Tensor, vs: torch.Tensor, vc: torch.Tensor,
               gidx: torch.Tensor) -> torch.Tensor:
    """The weighted sum that goes with memory_scores: w (B, H, G, L, k + S + 1) over the kept
    token values (rows gidx of v (B, H, L, dh)), the slot values vs (B, H, S, dh) and the
    row's own cache value vc (B, H, L, dh) -> (B, H, G, L, dh)."""
    return _MemoryMix.apply(w, v, vs, vc, gidx)


class _MaskedSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, mask):
        # z (B, H, G, L, N); mask None or (B | 1, H | 1, 1, L | 1, N) -> (B, H, G, L, N)
        z = z.contiguous()
        B, H, G, L, N = z.shape
        y = torch.empty_like(z)
        m, strides = _row_mask(mask, z.dtype, (0, 1, 3))
        _call("masked_softmax", z.dtype, z, m, *strides, H, G, L, z.numel() // N, N, y)
        ctx.save_for_backward(y)
        ctx.mask_shape = None if mask is None else mask.shape
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        y, = ctx.saved_tensors
        dz = _row_grad("softmax_grad", y, dy)
        # a learned bias in the mask (a pe's): its gradient is z's, summed where it broadcasts
        dmask = dz.sum_to_size(ctx.mask_shape) if ctx.needs_input_grad[1] else None
        return dz, dmask


def masked_softmax(z: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """softmax(z + mask) over the last axis in one pass per row: z (B, H, G, L, N), mask
    None or (B | 1, H | 1, 1, L | 1, N) additive (0 / −inf; a pe's bias, which gets its
    gradient; shared by the G experts). −inf entries are exact zeros; a row of only −inf
    gives NaN, as torch's."""
    return _MaskedSoftmax.apply(z, mask)


# Rows longer than this go to the entmax package (the kernel's sorts are O(N²) per row).
ENTMAX_MAX_WIDTH = 64


class _Entmax15(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z):  # (..., N) -> (..., N)
        z = z.contiguous()
        y = torch.empty_like(z)
        _call("entmax15", z.dtype, z, z.numel() // z.shape[-1], z.shape[-1], y)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        y, = ctx.saved_tensors
        return _row_grad("entmax15_grad", y, dy)


def entmax15(z: torch.Tensor) -> torch.Tensor:
    """1.5-entmax over the last axis of rows no wider than ENTMAX_MAX_WIDTH (the kept
    scores of top-k attention): the `entmax` package's computation, one loop per row."""
    return _Entmax15.apply(z)


class _SparseSqDist(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, ia, b, ib, distinct):  # (..., Na) weights and indices, (..., Nb) -> (...)
        a, ia, b, ib = a.contiguous(), ia.contiguous(), b.contiguous(), ib.contiguous()
        ctx.save_for_backward(a, ia, b, ib)
        ctx.distinct = int(distinct)
        out = torch.empty(a.shape[:-1], dtype=a.dtype)
        _call("sparse_sqdist", a.dtype, a, ia, a.shape[-1], b, ib, b.shape[-1], out.numel(),
              ctx.distinct, None, out, None, None)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, go):
        a, ia, b, ib = ctx.saved_tensors
        ga, gb = torch.empty_like(a), torch.empty_like(b)
        _call("sparse_sqdist", a.dtype, a, ia, a.shape[-1], b, ib, b.shape[-1], go.numel(),
              ctx.distinct, go.contiguous(), None, ga, gb)
        return ga, None, gb, None, None


def sparse_sqdist(a: torch.Tensor, ia: torch.Tensor, b: torch.Tensor, ib: torch.Tensor,
                  distinct: bool = False) -> torch.Tensor:
    """‖a_r − b_r‖² of sparse rows: weights a (..., Na) at key indices ia (int64; a key may
    repeat, the entries then add up), b (..., Nb) at ib -> (...). (Σ_i a_i d_i + Σ_j b_j d_j,
    with d the difference at each entry's key, is the squared norm.) `distinct`: no key
    repeats within a row of a or of b (then half the comparisons)."""
    return _SparseSqDist.apply(a, ia, b, ib, distinct)


def gather_dot(a: torch.Tensor, table: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """a (R, D), table (M, D), idx (R, K) int64 rows of table -> (R, K) dot products."""
    return _GatherDot.apply(a, table, idx)


def gather_sum(w: torch.Tensor, table: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """w (R, K), table (M, D), idx (R, K) int64 rows of table -> (R, D) weighted sums."""
    return _GatherSum.apply(w, table, idx)
