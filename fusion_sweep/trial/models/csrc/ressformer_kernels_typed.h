/* The typed kernels of ressformer_kernels.c, written once for T (float or double): included
   there twice, with T, SUF (f32 | f64) and SQRT defined and FN(name) = name_SUF. No include
   guard on purpose. The shapes, strides and pointer contracts of each entry are in its
   comment; kernels.py checks them before every call. */
typedef T FN(vec) __attribute__((vector_size(64)));
enum { FN(LANES) = 64 / sizeof(T) };  /* elements of T in one 64-byte vector */
/* Keep x in the running top-K (v, o) of a row: fill, then replace the smallest (at m).
   The smallest is found again by a branch-free scan (its position is unpredictable). */
static inline void FN(keep)(T x, int64_t j, T *restrict v, int64_t *restrict o, int64_t K,
                            int64_t *restrict fill, int64_t *restrict m) {
    if (*fill < K) {
        v[*fill] = x; o[*fill] = j;
        if (++*fill < K) return;
    } else if (x > v[*m]) {
        v[*m] = x; o[*m] = j;
    } else return;
    int64_t mi = 0;
    T mv = v[0];
    for (int64_t i = 1; i < K; ++i) {
        const int lt = v[i] < mv;
        mv = lt ? v[i] : mv; mi = lt ? i : mi;
    }
    *m = mi;
}
/* Per row: trailing −inf entries (right padding) are dropped; the rest is cut into chunks
   of 8. thr, the K-th largest chunk maximum, has at least K entries at or above it, so
   only the entries >= thr of the chunks whose maximum is >= thr can be in the top K (about
   K + 2 candidates on random scores). Exact whatever the values: ties and −inf only make
   more candidates. */
static void FN(topk_row)(const T *row, int64_t N, int64_t K, int64_t *o, T *v, T *cm,
                         int64_t *ci) {
    const int64_t W = 8;
    int64_t fill = 0, m = 0, n = N, cf = 0, cmi = 0;
    while (n > K && row[n - 1] == -(T)INFINITY) --n;
    const int64_t full = n / W, nc = (n + W - 1) / W;
    for (int64_t c = 0; c < full; ++c) {
        const T *x = row + c * W;
        T mx = x[0];
        for (int64_t j = 1; j < 8; ++j) mx = x[j] > mx ? x[j] : mx;
        cm[c] = mx;
    }
    if (nc > full) {
        T mx = row[full * W];
        for (int64_t j = full * W + 1; j < n; ++j) mx = row[j] > mx ? row[j] : mx;
        cm[full] = mx;
    }
    T thr = -(T)INFINITY;
    if (nc >= K) {
        for (int64_t c = 0; c < nc; ++c) FN(keep)(cm[c], c, v, ci, K, &cf, &cmi);
        thr = v[cmi];
    }
    for (int64_t c = 0; c < nc; ++c) {
        if (!(cm[c] >= thr)) continue;
        const int64_t j1 = (c + 1) * W < n ? (c + 1) * W : n;
        for (int64_t j = c * W; j < j1; ++j)
            if (row[j] >= thr) FN(keep)(row[j], j, v, o, K, &fill, &m);
    }
    for (int64_t j = 0; fill < K && j < N; ++j) /* NaN: any K indices */
        FN(keep)(row[j], j, v, o, K, &fill, &m);
}
/* The common case of a row: thr = the K-th largest maximum of C = 2K (at least 16)
   interleaved chunks (chunk c: the j with j % C = c; their maxima vectorise), so at least
   K entries are >= thr. Only those entries (about K + 2 on random scores) are candidates:
   gathered block by block (a block of 16 with none costs one vector test), and the K
   largest of them kept. Exact: the K largest are all >= thr. Returns 0 where the slow path
   (topk_row) decides: fewer than C entries, NaN, or a tie-heavy row (> 4K candidates). */
static int FN(topk_fast)(const T *restrict row, int64_t N, int64_t K, int64_t *restrict o,
                         T *restrict cm, int64_t *restrict ci, T *restrict cv,
                         T *restrict v, int32_t *restrict cj) {
    int64_t n = N;
    while (n > K && row[n - 1] == -(T)INFINITY) --n;
    const int64_t C = 2 * K < 16 ? 16 : (2 * K + 15) / 16 * 16;
    if (n < C) return 0;
    /* a vector of chunks at a time, their running maxima in a register; the entries past
       the last full round of C go to the chunks 0, 1, ... */
    const int64_t last = n / C * C, VW = 64 / sizeof(T);
    for (int64_t c0 = 0; c0 < C; c0 += VW) {
        T mm[64 / sizeof(T)];
        memcpy(mm, row + c0, 64);
        for (int64_t j0 = C; j0 < last; j0 += C) {
            const T *restrict x = row + j0 + c0;
            #pragma omp simd
            for (int64_t l = 0; l < VW; ++l) mm[l] = x[l] > mm[l] ? x[l] : mm[l];
        }
        memcpy(cm + c0, mm, 64);
    }
    for (int64_t j = last; j < n; ++j)
        cm[j - last] = row[j] > cm[j - last] ? row[j] : cm[j - last];
    int64_t fill = 0, m = 0;
    T thr;
    if (!FN(kth16)(cm, C, K, &thr)) {
        for (int64_t c = 0; c < C; ++c) FN(keep)(cm[c], c, v, ci, K, &fill, &m);
        thr = v[m];
    }
    if (thr != thr) return 0;
    const int64_t nc = FN(compact)(row, n, thr, cj, cv);
    if (nc < K || nc > 4 * K) return 0;
    if (FN(select16)(cv, cj, nc, K, o)) return 1;
    fill = 0; m = 0;
    for (int64_t a = 0; a < nc; ++a) FN(keep)(cv[a], cj[a], v, o, K, &fill, &m);
    return fill == K;
}
/* The scores of query rows q (n of them, D apart: 1 or 4) against every panel of kb, whole
   panels, into rows of buf LP apart, plus each row's mask ar[u] (NULL: none) over its first
   L entries. A panel (BW keys) at a time, its scores in 4 vector
   registers per row (GCC/clang vector extension): the panel is read contiguously, and with
   four rows each vector of keys is loaded once for the four. */
static inline void FN(panel_scores)(const T *q, int64_t n, const T *kb, int64_t NP, int64_t D,
                                    const T *const *ar, int64_t L, T *buf, int64_t LP) {
    enum { BW = PANEL_BYTES / sizeof(T), VW = BW / 4 };
    for (int64_t p = 0; p < NP; ++p) {
        const T *panel = kb + p * D * BW;
        if (n == 4) {
            FN(vec) a[4][4];
            for (int u = 0; u < 4; ++u)
                for (int c = 0; c < 4; ++c) a[u][c] = (FN(vec)){0};
            for (int64_t d = 0; d < D; ++d) {
                const T *kd = panel + d * BW;
                FN(vec) k0, k1, k2, k3;
                memcpy(&k0, kd, 64); memcpy(&k1, kd + VW, 64);
                memcpy(&k2, kd + 2 * VW, 64); memcpy(&k3, kd + 3 * VW, 64);
                for (int u = 0; u < 4; ++u) {
                    const T x = q[u * D + d];
                    a[u][0] += x * k0; a[u][1] += x * k1; a[u][2] += x * k2; a[u][3] += x * k3;
                }
            }
            for (int u = 0; u < 4; ++u)
                for (int c = 0; c < 4; ++c) memcpy(buf + u * LP + p * BW + c * VW, &a[u][c], 64);
        } else {
            FN(vec) a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, kv;
            for (int64_t d = 0; d < D; ++d) {
                const T *kd = panel + d * BW;
                const FN(vec) qd = (FN(vec)){0} + q[d];
                memcpy(&kv, kd, 64); a0 += qd * kv;
                memcpy(&kv, kd + VW, 64); a1 += qd * kv;
                memcpy(&kv, kd + 2 * VW, 64); a2 += qd * kv;
                memcpy(&kv, kd + 3 * VW, 64); a3 += qd * kv;
            }
            T *o = buf + p * BW;
            memcpy(o, &a0, 64); memcpy(o + VW, &a1, 64);
            memcpy(o + 2 * VW, &a2, 64); memcpy(o + 3 * VW, &a3, 64);
        }
        const int64_t j0 = p * BW, j1 = j0 + BW < L ? j0 + BW : L;
        for (int64_t u = 0; u < n; ++u) {
            if (!ar[u]) continue;  /* the mask after the dot product, as q·kᵀ + add in torch */
            T *o = buf + u * LP;
            const T *m = ar[u];
            #pragma omp simd
            for (int64_t j = j0; j < j1; ++j) o[j] += m[j];
        }
    }
}
/* Score and select in one pass per query, the scores never leaving a row buffer:
   q (BH, GL, D) rows, kt (BH, P, D, BW) the keys in panels of BW, zero-padded to P·BW >= L;
   add: an additive mask read at add[b*sb + h*sh + (i % L)*si + j] (NULL: none), where
   block = b*H + h and i the row in the block. -> out (BH, GL, K) key indices. Rows of one
   block are scored four at a time (`panel_scores`), then each selected on its own. */
void FN(score_topk)(const T *q, const T *kt, const T *add, int64_t sb, int64_t sh,
                    int64_t si, int64_t BH, int64_t H, int64_t GL, int64_t L, int64_t D,
                    int64_t K, int64_t *out) {
    const int64_t BW = PANEL_BYTES / sizeof(T), NP = (L + BW - 1) / BW, LP = NP * BW;
    T *buf = malloc(4 * LP * sizeof(T)), *v = malloc(K * sizeof(T)),
      *cm = malloc((L + 16) * sizeof(T)), *cv = malloc((L + 16) * sizeof(T));
    int64_t *ci = malloc((L + K) * sizeof(int64_t));
    int32_t *cj = malloc((L + 16) * sizeof(int32_t));
    for (int64_t blk = 0; blk < BH; ++blk) {
        const T *kb = kt + blk * NP * D * BW;
        for (int64_t i0 = 0; i0 < GL;) {
            const int64_t n = i0 + 4 <= GL ? 4 : 1;
            const T *ar[4] = {NULL, NULL, NULL, NULL};
            for (int64_t u = 0; add && u < n; ++u)
                ar[u] = add + (blk / H) * sb + (blk % H) * sh + ((i0 + u) % L) * si;
            DISPATCH_D(D, FN(panel_scores)(q + (blk * GL + i0) * DD, n, kb, NP, DD, ar, L, buf,
                                           LP));
            for (int64_t u = 0; u < n; ++u) {
                int64_t *o = out + (blk * GL + i0 + u) * K;
                if (!FN(topk_fast)(buf + u * LP, L, K, o, cm, ci, cv, v, cj))
                    FN(topk_row)(buf + u * LP, L, K, o, v, cm, ci);
            }
            i0 += n;
        }
    }
    free(buf); free(v); free(cm); free(ci); free(cv); free(cj);
}
/* out[r] = Σ_{j<n} (a[r, j] − b[r, j])², rows ra / rb apart (chain_sqdist's forward). */
void FN(row_sqdist)(const T *a, int64_t ra, const T *b, int64_t rb, int64_t R, int64_t n,
                    T *out) {
    for (int64_t r = 0; r < R; ++r) {
        const T *ar = a + r * ra, *br = b + r * rb;
        T acc = 0;
        #pragma omp simd reduction(+:acc)
        for (int64_t j = 0; j < n; ++j) acc += (ar[j] - br[j]) * (ar[j] - br[j]);
        out[r] = acc;
    }
}
/* The gradient of Σ_t Σ_{j<n} go_t[r]·(A_{t+1} − A_t)² for one A_t of a chain: rows of
   2·(gp[r]·(A_t − A_{t−1}) − gn[r]·(A_{t+1} − A_t)), 0 beyond column n; prev (with gp) or
   next (with gn) NULL at the chain's ends. */
void FN(chain_grad)(const T *prev, int64_t rp, const T *cur, int64_t rc, const T *next,
                    int64_t rn, const T *gp, const T *gn, int64_t R, int64_t n, int64_t N,
                    T *out) {
    for (int64_t r = 0; r < R; ++r) {
        const T *c = cur + r * rc;
        const T p2 = prev ? 2 * gp[r] : 0, n2 = next ? 2 * gn[r] : 0;
        const T *pr = prev ? prev + r * rp : c, *nr = next ? next + r * rn : c;
        T *o = out + r * N;
        #pragma omp simd
        for (int64_t j = 0; j < n; ++j) o[j] = p2 * (c[j] - pr[j]) - n2 * (nr[j] - c[j]);
        for (int64_t j = n; j < N; ++j) o[j] = 0;
    }
}
/* One row of heads_fwd / heads_bwd (below); inlined with D a constant where it is 16, 32
   or 64 (DISPATCH_D), so the row loops vectorise without remainder code. */
static inline void FN(head_fwd)(const T *restrict x, T *restrict o, T s, int64_t unit,
                                int64_t D) {
    if (unit) {
        T acc = 0;
        #pragma omp simd reduction(+:acc)
        for (int64_t d = 0; d < D; ++d) acc += x[d] * x[d];
        const T nrm = SQRT(acc), r = 1 / (nrm < (T)1e-12 ? (T)1e-12 : nrm);
        s = s * r;
    }
    #pragma omp simd
    for (int64_t d = 0; d < D; ++d) o[d] = x[d] * s;
}
static inline void FN(head_bwd)(const T *restrict gi, const T *restrict x, T *restrict gr,
                                T s, int64_t unit, T *restrict gs, int64_t D) {
    if (!unit) {
        if (gs) {
            T dot = 0;
            #pragma omp simd reduction(+:dot)
            for (int64_t d = 0; d < D; ++d) dot += x[d] * gi[d];
            *gs += dot;
        }
        #pragma omp simd
        for (int64_t d = 0; d < D; ++d) gr[d] = gi[d] * s;
        return;
    }
    T acc = 0, dot = 0;
    #pragma omp simd reduction(+:acc)
    for (int64_t d = 0; d < D; ++d) acc += x[d] * x[d];
    const T nrm = SQRT(acc), r = 1 / (nrm < (T)1e-12 ? (T)1e-12 : nrm);
    #pragma omp simd reduction(+:dot)
    for (int64_t d = 0; d < D; ++d) dot += x[d] * r * gi[d];
    if (gs) *gs += dot;
    const T c = nrm < (T)1e-12 ? 0 : dot * r, sr = s * r;
    #pragma omp simd
    for (int64_t d = 0; d < D; ++d) gr[d] = sr * (gi[d] - x[d] * c);
}
/* Heads out of a projection and back (SOES's normalisation fused in): raw (B, N, P, H, D)
   is a Linear's output, P projections side by side; part p, rows n0 <= n < n1, goes to out
   (B, H, n1 − n0, D) contiguous, each row times s = scale[h] (NULL: 1) and, with unit, by
   r = 1/max(‖row‖, 1e-12) too (as x * (scale * r) in torch). */
void FN(heads_fwd)(const T *raw, int64_t B, int64_t N, int64_t P, int64_t H, int64_t D,
                   int64_t p, int64_t n0, int64_t n1, int64_t unit, const T *scale, T *out) {
    const int64_t M = n1 - n0;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t n = n0; n < n1; ++n)
            for (int64_t h = 0; h < H; ++h) {
                const T *x = raw + (((b * N + n) * P + p) * H + h) * D;
                __builtin_prefetch(x + 8 * P * H * D); /* the same head 8 rows on */
                T *o = out + ((b * H + h) * M + n - n0) * D;
                const T s = scale ? scale[h] : (T)1;
                DISPATCH_D(D, FN(head_fwd)(x, o, s, unit, DD));
            }
}
/* Its backward into graw (raw's shape, part p, rows n0..n1): g (B, H, n1 − n0, D) (NULL:
   zero) times s; with unit, minus the component along the row (none where the norm was
   clamped); gscale[h] += ⟨g, x·r⟩ (x·1 without unit; NULL: not wanted); r computed again. */
void FN(heads_bwd)(const T *g, const T *raw, int64_t B, int64_t N, int64_t P, int64_t H,
                   int64_t D, int64_t p, int64_t n0, int64_t n1, int64_t unit,
                   const T *scale, T *graw, T *gscale) {
    const int64_t M = n1 - n0;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t n = n0; n < n1; ++n)
            for (int64_t h = 0; h < H; ++h) {
                const int64_t at = (((b * N + n) * P + p) * H + h) * D;
                if (!g) { memset(graw + at, 0, D * sizeof(T)); continue; }
                __builtin_prefetch(raw + at + 8 * P * H * D);
                const T *gi = g + ((b * H + h) * M + n - n0) * D;
                __builtin_prefetch(gi + 8 * D);
                const T s = scale ? scale[h] : (T)1;
                T *gs = gscale ? gscale + h : NULL;
                DISPATCH_D(D, FN(head_bwd)(gi, raw + at, graw + at, s, unit, gs, DD));
            }
}
/* 1.5-entmax over rows of N (small: a sort by ranks, O(N²) vector compares), the package's
   Entmax15Function step by step: x = (z − max)/2, sorted descending; running means give
   tau_i; the support is the count of i with tau_i <= x_(i); y = max(x − tau, 0)². Sorted
   −inf entries end the scan (there the package's arithmetic gives NaN, never support). */
static void FN(entmax15_rows)(const T *z, int64_t R, int64_t N, T *y) {
    T *srt = malloc(N * sizeof(T)), *tau = malloc(N * sizeof(T));
    for (int64_t r = 0; r < R; ++r) {
        const T *zr = z + r * N;
        T *yr = y + r * N, mx = zr[0];
        for (int64_t j = 1; j < N; ++j) mx = zr[j] > mx ? zr[j] : mx;
        for (int64_t j = 0; j < N; ++j) yr[j] = srt[j] = (zr[j] - mx) / 2;
        /* sorted by rank (how many come before it): up to 16 entries, padded with −inf
           after them, in one vector compare each; NaN: ranks may collide */
        T pad[16];
        const int64_t W = N <= 16 ? 16 : N;
        const T *xs = yr;
        if (N <= 16) {
            for (int64_t j = 0; j < 16; ++j) pad[j] = j < N ? yr[j] : -(T)INFINITY;
            xs = pad;
        }
        for (int64_t i = 0; i < N; ++i) {
            const T x = xs[i];
            int rank = 0;
            if (W == 16) {
                #pragma omp simd reduction(+:rank)
                for (int j = 0; j < 16; ++j) rank += (xs[j] > x) | ((xs[j] == x) & (j < i));
            } else {
                for (int64_t j = 0; j < W; ++j) rank += (xs[j] > x) | ((xs[j] == x) & (j < i));
            }
            if (rank < N) srt[rank] = x;
        }
        T sum = 0, sq = 0;
        int64_t support = 0;
        for (int64_t i = 0; i < N && srt[i] != -(T)INFINITY; ++i) {
            const T rho = (T)(i + 1);
            sum += srt[i]; sq += srt[i] * srt[i];
            const T mean = sum / rho, mean_sq = sq / rho;
            const T ss = rho * (mean_sq - mean * mean);
            const T delta = (1 - ss) / rho;
            tau[i] = mean - SQRT(delta > 0 ? delta : 0);
            support += tau[i] <= srt[i];
        }
        const T t = tau[support > 0 ? support - 1 : 0];
        for (int64_t j = 0; j < N; ++j) {
            const T d = yr[j] - t;
            yr[j] = d > 0 ? d * d : 0;
        }
    }
    free(srt); free(tau);
}
/* The same, 64 / sizeof(T) rows at a time (16 in float32), one row per vector lane:
   the rows transposed into a local block, sorted by an odd-even transposition network
   (N passes of compare-exchange, the same in every lane), the running sums and tau_i in
   the same order and arithmetic as one row at a time, then transposed back. Rows of at most
   64 (ENTMAX_MAX_WIDTH); the last R % lanes rows go one at a time. */
void FN(entmax15)(const T *z, int64_t R, int64_t N, T *y) {
    enum { W = 64 / sizeof(T) };
    T X[64][W], Sr[64][W], tau[64][W];
    const int64_t R0 = N <= 64 ? R / W * W : 0;
    for (int64_t r0 = 0; r0 < R0; r0 += W) {
        T mx[W], cs[W], cq[W], t[W];
        int64_t alive[W], support[W];
        for (int64_t l = 0; l < W; ++l)
            for (int64_t i = 0; i < N; ++i) X[i][l] = z[(r0 + l) * N + i];
        #pragma omp simd
        for (int64_t l = 0; l < W; ++l) mx[l] = X[0][l];
        for (int64_t i = 1; i < N; ++i) {
            #pragma omp simd
            for (int64_t l = 0; l < W; ++l) mx[l] = X[i][l] > mx[l] ? X[i][l] : mx[l];
        }
        for (int64_t i = 0; i < N; ++i) {
            #pragma omp simd
            for (int64_t l = 0; l < W; ++l) Sr[i][l] = X[i][l] = (X[i][l] - mx[l]) / 2;
        }
        for (int64_t pass = 0; pass < N; ++pass)
            for (int64_t i = pass & 1; i + 1 < N; i += 2) {
                #pragma omp simd
                for (int64_t l = 0; l < W; ++l) {
                    const T a = Sr[i][l], b = Sr[i + 1][l];
                    const int up = b > a;
                    Sr[i][l] = up ? b : a;
                    Sr[i + 1][l] = up ? a : b;
                }
            }
        #pragma omp simd
        for (int64_t l = 0; l < W; ++l) { cs[l] = 0; cq[l] = 0; alive[l] = 1; support[l] = 0; }
        for (int64_t i = 0; i < N; ++i) {
            const T rho = (T)(i + 1);
            #pragma omp simd
            for (int64_t l = 0; l < W; ++l) {
                const T x = Sr[i][l];
                alive[l] &= x != -(T)INFINITY;
                cs[l] += alive[l] ? x : 0;
                cq[l] += alive[l] ? x * x : 0;
                const T mean = cs[l] / rho, mean_sq = cq[l] / rho;
                const T ss = rho * (mean_sq - mean * mean);
                const T delta = (1 - ss) / rho;
                tau[i][l] = mean - SQRT(delta > 0 ? delta : 0);
                support[l] += alive[l] & (tau[i][l] <= x);
            }
        }
        #pragma omp simd
        for (int64_t l = 0; l < W; ++l) t[l] = tau[0][l];
        for (int64_t i = 1; i < N; ++i) {
            #pragma omp simd
            for (int64_t l = 0; l < W; ++l) t[l] = support[l] - 1 == i ? tau[i][l] : t[l];
        }
        for (int64_t l = 0; l < W; ++l)
            for (int64_t i = 0; i < N; ++i) {
                const T d = X[i][l] - t[l];
                y[(r0 + l) * N + i] = d > 0 ? d * d : 0;
            }
    }
    if (R0 < R) FN(entmax15_rows)(z + R0 * N, R - R0, N, y + R0 * N);
}
void FN(entmax15_grad)(const T *y, const T *dy, int64_t R, int64_t N, T *dx) {
    for (int64_t r = 0; r < R; ++r) {
        const T *yr = y + r * N, *gr = dy + r * N;
        T *o = dx + r * N, num = 0, den = 0;
        for (int64_t j = 0; j < N; ++j) {
            const T g = SQRT(yr[j]);
            o[j] = gr[j] * g; num += o[j]; den += g;
        }
        const T q = num / den;
        for (int64_t j = 0; j < N; ++j) o[j] -= q * SQRT(yr[j]);
    }
}
/* ‖Σ_i a_i e(ia_i) − Σ_j b_j e(ib_j)‖² per row of two sparse rows (weights at key
   indices; an index may repeat), and its gradient: by pairs of entries, O((Na + Nb)²).
   distinct: no index repeats within a row (top-k of one expert), so a row's weight at its
   own i-th key is its i-th entry; rows of 8 or 16 entries: the loops unrolled. */
static inline T FN(sparse_dot)(const T *a, const int64_t *ia, int64_t Na, int64_t key) {
    T acc = 0;
    #pragma omp simd reduction(+:acc)
    for (int64_t i = 0; i < Na; ++i) acc += ia[i] == key ? a[i] : 0;
    return acc;
}
static inline void FN(sparse_row)(const T *ar, const int64_t *iar, int64_t Na, const T *br,
                                  const int64_t *ibr, int64_t Nb, int64_t distinct,
                                  const T *go, T *out, T *ga, T *gb) {
    T acc = 0;
    for (int64_t i = 0; i < Na; ++i) {  /* d_i: the difference at a's key i */
        const T own = distinct ? ar[i] : FN(sparse_dot)(ar, iar, Na, iar[i]);
        const T d = own - FN(sparse_dot)(br, ibr, Nb, iar[i]);
        if (go) ga[i] = 2 * *go * d; else acc += ar[i] * d;
    }
    for (int64_t j = 0; j < Nb; ++j) {
        const T own = distinct ? br[j] : FN(sparse_dot)(br, ibr, Nb, ibr[j]);
        const T d = own - FN(sparse_dot)(ar, iar, Na, ibr[j]);
        if (go) gb[j] = 2 * *go * d; else acc += br[j] * d;
    }
    if (!go) *out = acc;
}
void FN(sparse_sqdist)(const T *a, const int64_t *ia, int64_t Na, const T *b,
                       const int64_t *ib, int64_t Nb, int64_t R, int64_t distinct,
                       const T *go, T *out, T *ga, T *gb) {
    for (int64_t r = 0; r < R; ++r) {
        const T *ar = a + r * Na, *br = b + r * Nb, *gr = go ? go + r : NULL;
        const int64_t *iar = ia + r * Na, *ibr = ib + r * Nb;
        T *o = go ? NULL : out + r, *gar = go ? ga + r * Na : NULL, *gbr = go ? gb + r * Nb : NULL;
        if (Na == 8 && Nb == 8)
            FN(sparse_row)(ar, iar, 8, br, ibr, 8, distinct, gr, o, gar, gbr);
        else if (Na == 16 && Nb == 16)
            FN(sparse_row)(ar, iar, 16, br, ibr, 16, distinct, gr, o, gar, gbr);
        else
            FN(sparse_row)(ar, iar, Na, br, ibr, Nb, distinct, gr, o, gar, gbr);
    }
}
/* Sparse attention with R2MU's memory, per query row r (block blk = r / GL of B·H, token
   i = r % L, batch b = blk / H): N = K + S + 1 scores [the K kept token keys, the block's
   S slots, the row's own cache entry]. Tables: kr, v (BH·L, D) rows at gidx (R, K); ks, vs
   (BH, S, D); kc, vc (BH·L, D). */
static inline T FN(dot)(const T *restrict a, const T *restrict b, int64_t D) {
    T acc = 0;
    #pragma omp simd reduction(+:acc)
    for (int64_t d = 0; d < D; ++d) acc += a[d] * b[d];
    return acc;
}
static inline void FN(axpy)(T *restrict y, T a, const T *restrict x, int64_t D) {
    #pragma omp simd
    for (int64_t d = 0; d < D; ++d) y[d] += a * x[d];
}
/* out (+)= sum_j<n w[j] t[row_j], row_j = ix[j] (ix NULL: j), rows of D; `add`: added to
   out, else written. Where D is a whole number of vectors, one vector-wide slice of D at a
   time in two registers (a chain of axpys on out would wait on each store); else axpys. */
static inline void FN(gsum)(const T *restrict w, const T *restrict t, const int64_t *ix,
                            int64_t n, int64_t D, T *restrict out, int add) {
    enum { V = FN(LANES) };
    if (D % V) {
        if (!add) memset(out, 0, D * sizeof(T));
        for (int64_t j = 0; j < n; ++j) FN(axpy)(out, w[j], t + (ix ? ix[j] : j) * D, D);
        return;
    }
    for (int64_t c = 0; c < D; c += V) {
        FN(vec) a0 = {0}, a1 = {0}, x, y;
        int64_t j = 0;
        for (; j + 2 <= n; j += 2) {
            memcpy(&x, t + (ix ? ix[j] : j) * D + c, 64);
            memcpy(&y, t + (ix ? ix[j + 1] : j + 1) * D + c, 64);
            a0 += w[j] * x; a1 += w[j + 1] * y;
        }
        if (j < n) {
            memcpy(&x, t + (ix ? ix[j] : j) * D + c, 64);
            a0 += w[j] * x;
        }
        a0 += a1;
        if (add) {
            memcpy(&x, out + c, 64);
            a0 += x;
        }
        memcpy(out + c, &a0, 64);
    }
}
static inline void FN(mem_scores_row)(const T *qr, const T *q, const T *kr, const int64_t *ix,
                                      const T *ak, const T *ks, const T *sa, const T *kc,
                                      int64_t K, int64_t S, T *z, int64_t D) {
    for (int64_t j = 0; j < K; ++j)
        z[j] = FN(dot)(qr, kr + ix[j] * D, D) + (ak ? ak[j] : 0);
    for (int64_t m = 0; m < S; ++m) z[K + m] = FN(dot)(q, ks + m * D, D) + sa[m];
    z[K + S] = FN(dot)(q, kc, D);
}
/* z (R, N): the scores (token scores plus ak (R, K), the mask at the kept keys, or NULL;
   slot scores plus sa (B, S), 0 or −inf). */
void FN(mem_scores)(const T *qr, const T *q, const T *kr, const int64_t *gidx, const T *ak,
                    const T *ks, const T *sa, const T *kc, int64_t R, int64_t K, int64_t S,
                    int64_t D, int64_t GL, int64_t H, int64_t L, T *z) {
    for (int64_t r = 0; r < R; ++r) {
        const int64_t blk = r / GL, i = r % L;
        DISPATCH_D(D, FN(mem_scores_row)(qr + r * D, q + r * D, kr, gidx + r * K,
                                         ak ? ak + r * K : NULL, ks + blk * S * DD,
                                         sa + (blk / H) * S, kc + (blk * L + i) * DD, K, S,
                                         z + r * (K + S + 1), DD));
    }
}
static inline void FN(mem_scores_grad_row)(const T *dz, const T *qr, const T *q, const T *kr,
                                           const int64_t *ix, const T *ks, const T *kc,
                                           int64_t K, int64_t S, T *dqr, T *dq, T *dkr,
                                           T *dks, T *dkc, int64_t D) {
    FN(gsum)(dz, kr, ix, K, D, dqr, 0);
    FN(gsum)(dz + K, ks, NULL, S, D, dq, 0);
    FN(axpy)(dq, dz[K + S], kc, D);
    for (int64_t j = 0; j < K; ++j) FN(axpy)(dkr + ix[j] * D, dz[j], qr, D);
    for (int64_t m = 0; m < S; ++m) FN(axpy)(dks + m * D, dz[K + m], q, D);
    FN(axpy)(dkc, dz[K + S], q, D);
}
/* mem_scores' backward: dqr, dq (R, D) written; dkr, dks, dkc accumulated (zeroed first). */
void FN(mem_scores_grad)(const T *dz, const T *qr, const T *q, const T *kr,
                         const int64_t *gidx, const T *ks, const T *kc, int64_t R, int64_t K,
                         int64_t S, int64_t D, int64_t GL, int64_t L, T *dqr, T *dq, T *dkr,
                         T *dks, T *dkc) {
    for (int64_t r = 0; r < R; ++r) {
        const int64_t blk = r / GL, i = r % L;
        DISPATCH_D(D, FN(mem_scores_grad_row)(dz + r * (K + S + 1), qr + r * DD, q + r * DD,
                                              kr, gidx + r * K, ks + blk * S * DD,
                                              kc + (blk * L + i) * DD, K, S, dqr + r * DD,
                                              dq + r * DD, dkr, dks + blk * S * DD,
                                              dkc + (blk * L + i) * DD, DD));
    }
}
static inline void FN(mem_mix_row)(const T *w, const T *v, const int64_t *ix, const T *vs,
                                   const T *vc, int64_t K, int64_t S, T *o, int64_t D) {
    FN(gsum)(w, v, ix, K, D, o, 0);
    FN(gsum)(w + K, vs, NULL, S, D, o, 1);
    FN(axpy)(o, w[K + S], vc, D);
}
/* out (R, D) = Σ_j w_j v[gidx_j] + Σ_m w_{K+m} vs_m + w_{K+S} vc_i: the weighted sum. */
void FN(mem_mix)(const T *w, const T *v, const int64_t *gidx, const T *vs, const T *vc,
                 int64_t R, int64_t K, int64_t S, int64_t D, int64_t GL, int64_t L, T *out) {
    for (int64_t r = 0; r < R; ++r) {
        const int64_t blk = r / GL, i = r % L;
        DISPATCH_D(D, FN(mem_mix_row)(w + r * (K + S + 1), v, gidx + r * K, vs + blk * S * DD,
                                      vc + (blk * L + i) * DD, K, S, out + r * DD, DD));
    }
}
static inline void FN(mem_mix_grad_row)(const T *go, const T *w, const T *v, const int64_t *ix,
                                        const T *vs, const T *vc, int64_t K, int64_t S, T *dw,
                                        T *dv, T *dvs, T *dvc, int64_t D) {
    for (int64_t j = 0; j < K; ++j) {
        dw[j] = FN(dot)(go, v + ix[j] * D, D);
        FN(axpy)(dv + ix[j] * D, w[j], go, D);
    }
    for (int64_t m = 0; m < S; ++m) {
        dw[K + m] = FN(dot)(go, vs + m * D, D);
        FN(axpy)(dvs + m * D, w[K + m], go, D);
    }
    dw[K + S] = FN(dot)(go, vc, D);
    FN(axpy)(dvc, w[K + S], go, D);
}
/* mem_mix's backward: dw (R, N) written; dv, dvs, dvc accumulated (zeroed first). */
void FN(mem_mix_grad)(const T *go, const T *w, const T *v, const int64_t *gidx, const T *vs,
                      const T *vc, int64_t R, int64_t K, int64_t S, int64_t D, int64_t GL,
                      int64_t L, T *dw, T *dv, T *dvs, T *dvc) {
    for (int64_t r = 0; r < R; ++r) {
        const int64_t blk = r / GL, i = r % L;
        DISPATCH_D(D, FN(mem_mix_grad_row)(go + r * DD, w + r * (K + S + 1), v, gidx + r * K,
                                           vs + blk * S * DD, vc + (blk * L + i) * DD, K, S,
                                           dw + r * (K + S + 1), dv, dvs + blk * S * DD,
                                           dvc + (blk * L + i) * DD, DD));
    }
}
void FN(gather_dot)(const T *a, const T *t, const int64_t *idx, int64_t R, int64_t K,
                    int64_t D, T *out) {
    for (int64_t r = 0; r < R; ++r) {
        const T *ar = a + r * D;
        for (int64_t j = 0; j < K; ++j) {
            const T *tr = t + idx[r * K + j] * D;
            T acc = 0;
            #pragma omp simd reduction(+:acc)
            for (int64_t d = 0; d < D; ++d) acc += ar[d] * tr[d];
            out[r * K + j] = acc;
        }
    }
}
void FN(gather_sum)(const T *w, const T *t, const int64_t *idx, int64_t R, int64_t K,
                    int64_t D, T *out) {
    for (int64_t r = 0; r < R; ++r) {
        T *o = out + r * D;
        memset(o, 0, D * sizeof(T));
        for (int64_t j = 0; j < K; ++j) {
            const T *tr = t + idx[r * K + j] * D;
            const T wj = w[r * K + j];
            #pragma omp simd
            for (int64_t d = 0; d < D; ++d) o[d] += wj * tr[d];
        }
    }
}
/* Dense attention with R2MU's memory, scores and softmax in one pass per row (kernels.py:
   dense_memory_softmax). Row r = ((b*H + h)*G + g)*L + i of y (R, N = L + S + 1) is the
   softmax of [qr_r . kr[bh, j] + m_r[j] (j < L) | q_r . ks[bh, s] + sa[b, s] (s < S) |
   q_r . kc[bh, i]], bh = b*H + h, m_r the token mask's row at m + b*sb + h*sh + i*si (NULL:
   none). qr, q (R, D); kr, kc (BH, L, D); ks (BH, S, D); sa (B, S). The scores are made in a
   row buffer and never stored as a tensor of their own; the token scores of four rows of one
   (b, h) at a time. scratch (zeroed by the caller): D*(Lp + Sp) + 4*(Lp + 2*Sp + 16)
   elements, Lp and Sp being L and S rounded up to LANES. */
static inline int64_t FN(padded)(int64_t n) { return (n + FN(LANES) - 1) / FN(LANES) * FN(LANES); }
/* kt (D, Np) = k (N, D) transposed; columns N..Np stay as they are (zero). */
static inline void FN(transpose)(const T *restrict k, int64_t N, int64_t D, int64_t Np,
                                 T *restrict kt) {
    for (int64_t j = 0; j < N; ++j)
        for (int64_t d = 0; d < D; ++d) kt[d * Np + j] = k[j * D + d];
}
/* z[j] = sum_d q[d] kt[d*Np + j] for j < Np (a multiple of LANES): keys along the vector
   lanes, four vectors of keys at a time so the additions do not wait on one another. */
static inline void FN(dots_t)(const T *restrict q, const T *restrict kt, int64_t Np,
                              int64_t D, T *restrict z) {
    enum { V = FN(LANES) };
    int64_t j = 0;
    for (; j + 4 * V <= Np; j += 4 * V) {
        FN(vec) a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        for (int64_t d = 0; d < D; ++d) {
            const T *k = kt + d * Np + j, x = q[d];
            FN(vec) k0, k1, k2, k3;
            memcpy(&k0, k, 64); memcpy(&k1, k + V, 64);
            memcpy(&k2, k + 2 * V, 64); memcpy(&k3, k + 3 * V, 64);
            a0 += x * k0; a1 += x * k1; a2 += x * k2; a3 += x * k3;
        }
        memcpy(z + j, &a0, 64); memcpy(z + j + V, &a1, 64);
        memcpy(z + j + 2 * V, &a2, 64); memcpy(z + j + 3 * V, &a3, 64);
    }
    for (; j < Np; j += V) {
        FN(vec) a = {0};
        for (int64_t d = 0; d < D; ++d) {
            FN(vec) k;
            memcpy(&k, kt + d * Np + j, 64);
            a += q[d] * k;
        }
        memcpy(z + j, &a, 64);
    }
}
/* dots_t for four query rows at once (q: 4 rows D apart; z: 4 rows Zs apart): each vector of
   keys is loaded once for the four rows, two vectors of keys per step. */
static inline void FN(dots_t4)(const T *restrict q, const T *restrict kt, int64_t Np,
                               int64_t D, T *restrict z, int64_t Zs) {
    enum { V = FN(LANES) };
    int64_t j = 0;
    for (; j + 2 * V <= Np; j += 2 * V) {
        FN(vec) a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
        for (int64_t d = 0; d < D; ++d) {
            FN(vec) k0, k1;
            memcpy(&k0, kt + d * Np + j, 64);
            memcpy(&k1, kt + d * Np + j + V, 64);
            const T x0 = q[d], x1 = q[D + d], x2 = q[2 * D + d], x3 = q[3 * D + d];
            a0 += x0 * k0; a1 += x1 * k0; a2 += x2 * k0; a3 += x3 * k0;
            b0 += x0 * k1; b1 += x1 * k1; b2 += x2 * k1; b3 += x3 * k1;
        }
        memcpy(z + j, &a0, 64); memcpy(z + Zs + j, &a1, 64);
        memcpy(z + 2 * Zs + j, &a2, 64); memcpy(z + 3 * Zs + j, &a3, 64);
        memcpy(z + j + V, &b0, 64); memcpy(z + Zs + j + V, &b1, 64);
        memcpy(z + 2 * Zs + j + V, &b2, 64); memcpy(z + 3 * Zs + j + V, &b3, 64);
    }
    for (; j < Np; j += V) {
        FN(vec) a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        for (int64_t d = 0; d < D; ++d) {
            FN(vec) k0;
            memcpy(&k0, kt + d * Np + j, 64);
            a0 += q[d] * k0; a1 += q[D + d] * k0; a2 += q[2 * D + d] * k0; a3 += q[3 * D + d] * k0;
        }
        memcpy(z + j, &a0, 64); memcpy(z + Zs + j, &a1, 64);
        memcpy(z + 2 * Zs + j, &a2, 64); memcpy(z + 3 * Zs + j, &a3, 64);
    }
}
/* A row from its token scores (row[0..L), by dots_t or dots_t4): the slots' scores (into
   row + Lp + Sp), the masks, the own cache's score; the whole row, padded with −inf to a
   multiple of 16 entries, assembled over the token scores, then its softmax into y. row:
   Lp + 2 Sp + 16 elements. */
static inline void FN(dense_finish)(const T *q, const T *kst, const T *kc, const T *m,
                                    const T *sa, int64_t L, int64_t Lp, int64_t S, int64_t Sp,
                                    T *row, T *y, int64_t D) {
    T *slots = row + Lp + Sp;
    FN(dots_t)(q, kst, Sp, D, slots);
    if (m) {
        #pragma omp simd
        for (int64_t j = 0; j < L; ++j) row[j] += m[j];
    }
    for (int64_t s = 0; s < S; ++s) row[L + s] = slots[s] + sa[s];
    row[L + S] = FN(dot)(q, kc, D);
    for (int64_t j = L + S + 1; j < (L + S + 16) / 16 * 16; ++j) row[j] = -(T)INFINITY;
    FN(softmax_padded)(row, L + S + 1, y);
}
void FN(dense_memory_softmax)(const T *qr, const T *q, const T *kr, const T *ks, const T *kc,
                              const T *m, int64_t sb, int64_t sh, int64_t si, const T *sa,
                              int64_t B, int64_t H, int64_t G, int64_t L, int64_t S,
                              int64_t D, T *scratch, T *y) {
    const int64_t N = L + S + 1, Lp = FN(padded)(L), Sp = FN(padded)(S), RW = Lp + 2 * Sp + 16;
    T *krt = scratch, *kst = krt + D * Lp, *rows = kst + D * Sp;  /* rows: 4 of RW */
    for (int64_t bh = 0; bh < B * H; ++bh) {
        const int64_t b = bh / H, h = bh % H;
        FN(transpose)(kr + bh * L * D, L, D, Lp, krt);
        FN(transpose)(ks + bh * S * D, S, D, Sp, kst);
        for (int64_t r0 = bh * G * L; r0 < (bh + 1) * G * L;) {
            const int64_t n = r0 + 4 <= (bh + 1) * G * L ? 4 : 1;
            if (n == 4)
                DISPATCH_D(D, FN(dots_t4)(qr + r0 * DD, krt, Lp, DD, rows, RW));
            else
                DISPATCH_D(D, FN(dots_t)(qr + r0 * DD, krt, Lp, DD, rows));
            for (int64_t u = 0; u < n; ++u) {
                const int64_t r = r0 + u, i = r % L;
                const T *mr = m ? m + b * sb + h * sh + i * si : NULL;
                DISPATCH_D(D, FN(dense_finish)(q + r * DD, kst, kc + (bh * L + i) * DD, mr,
                                               sa + b * S, L, Lp, S, Sp, rows + u * RW,
                                               y + r * N, DD));
            }
            r0 += n;
        }
    }
}
/* dz = y (gy - <y, gy>) over one row of N (softmax's backward). */
static inline void FN(softmax_grad_row)(const T *y, const T *gy, int64_t N, T *dz) {
    T dot = 0;
    #pragma omp simd reduction(+:dot)
    for (int64_t j = 0; j < N; ++j) dot += y[j] * gy[j];
    #pragma omp simd
    for (int64_t j = 0; j < N; ++j) dz[j] = y[j] * (gy[j] - dot);
}
/* One row's memory part: gq = sum_s dz_{L+s} ks_s + dz_{L+S} kc (written), gkc += dz_{L+S}
   q. (The slots' gradient, shared by every row of a (b, h), is accumulated per block of
   rows by the caller: row by row, each update would wait on the previous row's store.) */
static inline void FN(memory_grad_row)(const T *dz, const T *q, const T *ks, const T *kc,
                                       int64_t L, int64_t S, T *gq, T *gkc, int64_t D) {
    FN(gsum)(dz + L, ks, NULL, S, D, gq, 0);
    FN(axpy)(gq, dz[L + S], kc, D);
    FN(axpy)(gkc, dz[L + S], q, D);
}
/* g_j += sum_u w_u[j] x_u over j < L for four rows u (w: N apart; x: D apart; D a whole
   number of vectors, taken one vector-wide slice at a time: the registers used do not grow
   with D). */
static inline void FN(outer_rows4)(const T *restrict w, int64_t N, const T *restrict x,
                                   int64_t L, T *restrict g, int64_t D) {
    enum { V = FN(LANES) };
    for (int64_t c = 0; c < D; c += V) {
        FN(vec) x0, x1, x2, x3;
        memcpy(&x0, x + c, 64); memcpy(&x1, x + D + c, 64);
        memcpy(&x2, x + 2 * D + c, 64); memcpy(&x3, x + 3 * D + c, 64);
        for (int64_t j = 0; j < L; ++j) {
            FN(vec) a;
            memcpy(&a, g + j * D + c, 64);
            a += w[j] * x0 + w[N + j] * x1 + w[2 * N + j] * x2 + w[3 * N + j] * x3;
            memcpy(g + j * D + c, &a, 64);
        }
    }
}
/* One row's token part: gqr = sum_j<L dz_j kr_j (written), gkr_j += dz_j qr. */
static inline void FN(token_grad_row)(const T *dz, const T *qr, const T *kr, int64_t L, T *gqr,
                                      T *gkr, int64_t D) {
    FN(gsum)(dz, kr, NULL, L, D, gqr, 0);
    for (int64_t j = 0; j < L; ++j) FN(axpy)(gkr + j * D, dz[j], qr, D);
}
/* The token part of four rows of one (b, h) at once (D a whole number of vectors, one
   vector-wide slice at a time): each key row kr_j and gradient row gkr_j is read once for
   the four, and the four gqr sums are independent chains. dz: 4 rows N apart; qr, gqr: 4
   rows D apart. */
static inline void FN(token_grad_rows4)(const T *restrict dz, int64_t N, const T *restrict qr,
                                        const T *restrict kr, int64_t L, T *restrict gqr,
                                        T *restrict gkr, int64_t D) {
    enum { V = FN(LANES) };
    for (int64_t c = 0; c < D; c += V) {
        FN(vec) q0, q1, q2, q3, a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        memcpy(&q0, qr + c, 64); memcpy(&q1, qr + D + c, 64);
        memcpy(&q2, qr + 2 * D + c, 64); memcpy(&q3, qr + 3 * D + c, 64);
        for (int64_t j = 0; j < L; ++j) {
            const T w0 = dz[j], w1 = dz[N + j], w2 = dz[2 * N + j], w3 = dz[3 * N + j];
            FN(vec) k, g;
            memcpy(&k, kr + j * D + c, 64);
            memcpy(&g, gkr + j * D + c, 64);
            a0 += w0 * k; a1 += w1 * k; a2 += w2 * k; a3 += w3 * k;
            g += w0 * q0 + w1 * q1 + w2 * q2 + w3 * q3;
            memcpy(gkr + j * D + c, &g, 64);
        }
        memcpy(gqr + c, &a0, 64); memcpy(gqr + D + c, &a1, 64);
        memcpy(gqr + 2 * D + c, &a2, 64); memcpy(gqr + 3 * D + c, &a3, 64);
    }
}
/* dense_memory_softmax's backward from y and its gradient gy (R, N): per row dz = y (gy -
   <y, gy>) (into dz (R, N) where dz is not NULL: a learned mask's gradient; else into rows,
   4 N elements); gqr (R, D) = sum_j<L dz_j kr_j, gq (R, D) = sum_s dz_{L+s} ks_s +
   dz_{L+S} kc_i, both written; gkr, gks, gkc (zeroed by the caller) accumulate dz_j qr_r,
   dz_{L+s} q_r, dz_{L+S} q_r. Rows of one (b, h) go four at a time where D is a whole number of vectors. */
void FN(dense_memory_softmax_grad)(const T *y, const T *gy, const T *qr, const T *q,
                                   const T *kr, const T *ks, const T *kc, int64_t BH,
                                   int64_t G, int64_t L, int64_t S, int64_t D, T *rows, T *gqr,
                                   T *gq, T *gkr, T *gks, T *gkc, T *dz) {
    const int64_t N = L + S + 1, GL = G * L;
    const int four = D % FN(LANES) == 0;  /* D a whole number of vectors */
    for (int64_t bh = 0; bh < BH; ++bh) {
        const T *krb = kr + bh * L * D, *ksb = ks + bh * S * D;
        T *gkrb = gkr + bh * L * D, *gksb = gks + bh * S * D;
        for (int64_t r0 = bh * GL; r0 < (bh + 1) * GL;) {
            const int64_t n = four && r0 + 4 <= (bh + 1) * GL ? 4 : 1;
            T *d0 = dz ? dz + r0 * N : rows;
            for (int64_t u = 0; u < n; ++u) {
                const int64_t r = r0 + u, i = r % L;
                FN(softmax_grad_row)(y + r * N, gy + r * N, N, d0 + u * N);
                DISPATCH_D(D, FN(memory_grad_row)(d0 + u * N, q + r * DD, ksb,
                                                  kc + (bh * L + i) * DD, L, S, gq + r * DD,
                                                  gkc + (bh * L + i) * DD, DD));
            }
            if (n == 4) {
                DISPATCH_D(D, FN(token_grad_rows4)(d0, N, qr + r0 * DD, krb, L, gqr + r0 * DD,
                                                   gkrb, DD));
                DISPATCH_D(D, FN(outer_rows4)(d0 + L, N, q + r0 * DD, S, gksb, DD));
            } else {
                DISPATCH_D(D, FN(token_grad_row)(d0, qr + r0 * DD, krb, L, gqr + r0 * DD, gkrb,
                                                 DD));
                for (int64_t s2 = 0; s2 < S; ++s2) FN(axpy)(gksb + s2 * D, d0[L + s2], q + r0 * D, D);
            }
            r0 += n;
        }
    }
}
/* The weighted sum that goes with dense_memory_softmax (kernels.py: dense_memory_mix): row r
   of out (R, D) = sum_j<L w_j v[bh, j] + sum_s w_{L+s} vs[bh, s] + w_{L+S} vc[bh, i], w (R, N
   = L + S + 1); v, vc (BH, L, D); vs (BH, S, D). Rows of one (b, h) four at a time where D
   is a whole number of vectors (each value row read once for the four), else one by one. */
static inline void FN(wsum_rows4)(const T *restrict w, int64_t N, const T *restrict v,
                                  int64_t L, T *restrict out, int64_t D) {
    enum { V = FN(LANES) };
    for (int64_t c = 0; c < D; c += V) {  /* one vector-wide slice of D at a time */
        FN(vec) a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        for (int64_t j = 0; j < L; ++j) {
            FN(vec) x;
            memcpy(&x, v + j * D + c, 64);
            a0 += w[j] * x; a1 += w[N + j] * x; a2 += w[2 * N + j] * x; a3 += w[3 * N + j] * x;
        }
        memcpy(out + c, &a0, 64); memcpy(out + D + c, &a1, 64);
        memcpy(out + 2 * D + c, &a2, 64); memcpy(out + 3 * D + c, &a3, 64);
    }
}
/* out = the memory part of one row's sum, added (slots, own cache). */
static inline void FN(memory_mix_row)(const T *w, const T *vs, const T *vc, int64_t L,
                                      int64_t S, T *out, int64_t D) {
    for (int64_t s = 0; s < S; ++s) FN(axpy)(out, w[L + s], vs + s * D, D);
    FN(axpy)(out, w[L + S], vc, D);
}
void FN(dense_memory_mix)(const T *w, const T *v, const T *vs, const T *vc, int64_t BH,
                          int64_t G, int64_t L, int64_t S, int64_t D, T *out) {
    const int64_t N = L + S + 1, GL = G * L;
    const int four = D % FN(LANES) == 0;  /* D a whole number of vectors */
    for (int64_t bh = 0; bh < BH; ++bh) {
        const T *vb = v + bh * L * D, *vsb = vs + bh * S * D;
        for (int64_t r0 = bh * GL; r0 < (bh + 1) * GL;) {
            const int64_t n = four && r0 + 4 <= (bh + 1) * GL ? 4 : 1;
            if (n == 4)
                DISPATCH_D(D, FN(wsum_rows4)(w + r0 * N, N, vb, L, out + r0 * DD, DD));
            else
                DISPATCH_D(D, FN(gsum)(w + r0 * N, vb, NULL, L, DD, out + r0 * DD, 0));
            for (int64_t r = r0; r < r0 + n; ++r)
                DISPATCH_D(D, FN(memory_mix_row)(w + r * N, vsb, vc + (bh * L + r % L) * DD, L,
                                                 S, out + r * DD, DD));
            r0 += n;
        }
    }
}
/* One row's gradient of its weights from its token part (row[0..L), by dots_t or dots_t4):
   the slots' (into row + Lp), the own cache's, all into gw's row; and of its own cache value
   (gvc accumulated). vst: the slot values transposed, (D, Sp); row: Lp + Sp. */
static inline void FN(mix_grad_finish)(const T *go, const T *w, const T *vst, const T *vc,
                                       int64_t L, int64_t Lp, int64_t S, int64_t Sp, T *row,
                                       T *gw, T *gvc, int64_t D) {
    FN(dots_t)(go, vst, Sp, D, row + Lp);
    memcpy(gw, row, L * sizeof(T));
    memcpy(gw + L, row + Lp, S * sizeof(T));
    gw[L + S] = FN(dot)(go, vc, D);
    FN(axpy)(gvc, w[L + S], go, D);
}
/* dense_memory_mix's backward from go (R, D): gw (R, N) written; gv, gvs, gvc (zeroed by
   the caller) accumulated. scratch (zeroed by the caller): D*(Lp + Sp) + 4*(Lp + Sp)
   elements. */
void FN(dense_memory_mix_grad)(const T *go, const T *w, const T *v, const T *vs, const T *vc,
                               int64_t BH, int64_t G, int64_t L, int64_t S, int64_t D,
                               T *scratch, T *gw, T *gv, T *gvs, T *gvc) {
    const int64_t N = L + S + 1, GL = G * L, Lp = FN(padded)(L), Sp = FN(padded)(S);
    const int64_t RW = Lp + Sp;
    const int four = D % FN(LANES) == 0;  /* D a whole number of vectors */
    T *vt = scratch, *vst = vt + D * Lp, *rows = vst + D * Sp;  /* rows: 4 of RW */
    for (int64_t bh = 0; bh < BH; ++bh) {
        FN(transpose)(v + bh * L * D, L, D, Lp, vt);
        FN(transpose)(vs + bh * S * D, S, D, Sp, vst);
        T *gvb = gv + bh * L * D, *gvsb = gvs + bh * S * D;
        for (int64_t r0 = bh * GL; r0 < (bh + 1) * GL;) {
            const int64_t n = r0 + 4 <= (bh + 1) * GL ? 4 : 1;
            if (n == 4)
                DISPATCH_D(D, FN(dots_t4)(go + r0 * DD, vt, Lp, DD, rows, RW));
            else
                DISPATCH_D(D, FN(dots_t)(go + r0 * DD, vt, Lp, DD, rows));
            for (int64_t r = r0; r < r0 + n; ++r) {
                const int64_t i = r % L;
                DISPATCH_D(D, FN(mix_grad_finish)(go + r * DD, w + r * N, vst,
                                                  vc + (bh * L + i) * DD, L, Lp, S, Sp,
                                                  rows + (r - r0) * RW, gw + r * N,
                                                  gvc + (bh * L + i) * DD, DD));
            }
            if (n == 4 && four) {  /* every value row's gradient, the slots' too, once per 4 rows */
                DISPATCH_D(D, FN(outer_rows4)(w + r0 * N, N, go + r0 * DD, L, gvb, DD));
                DISPATCH_D(D, FN(outer_rows4)(w + r0 * N + L, N, go + r0 * DD, S, gvsb, DD));
            } else {
                for (int64_t r = r0; r < r0 + n; ++r)
                    for (int64_t j = 0; j < L + S; ++j)
                        FN(axpy)(j < L ? gvb + j * D : gvsb + (j - L) * D, w[r * N + j],
                                 go + r * D, D);
            }
            r0 += n;
        }
    }
}
/* Softmax of z + mask over rows of N (softmax_row_SUF, ressformer_kernels.c): the mask read
   at m[b*sb + h*sh + i*si] for row r = ((b*H + h)*G + g)*L + i (NULL: none), added in the
   same pass. */
void FN(masked_softmax)(const T *z, const T *m, int64_t sb, int64_t sh, int64_t si, int64_t H,
                        int64_t G, int64_t L, int64_t R, int64_t N, T *y) {
    for (int64_t r = 0; r < R; ++r) {
        const int64_t i = r % L, h = (r / (G * L)) % H, b = r / (H * G * L);
        FN(softmax_row)(z + r * N, m ? m + b * sb + h * sh + i * si : NULL, N, y + r * N);
    }
}
/* Softmax's backward over rows of N: gz = y · (g − Σ g·y). */
void FN(softmax_grad)(const T *y, const T *g, int64_t R, int64_t N, T *gz) {
    for (int64_t r = 0; r < R; ++r) {
        const T *yr = y + r * N, *gr = g + r * N;
        T *o = gz + r * N, dot = 0;
        #pragma omp simd reduction(+:dot)
        for (int64_t j = 0; j < N; ++j) dot += yr[j] * gr[j];
        #pragma omp simd
        for (int64_t j = 0; j < N; ++j) o[j] = yr[j] * (gr[j] - dot);
    }
}
void FN(scatter_outer)(const T *w, const T *a, const int64_t *idx, int64_t R, int64_t K,
                       int64_t D, T *out) {
    for (int64_t r = 0; r < R; ++r) {
        const T *ar = a + r * D;
        for (int64_t j = 0; j < K; ++j) {
            T *o = out + idx[r * K + j] * D;
            const T wj = w[r * K + j];
            #pragma omp simd
            for (int64_t d = 0; d < D; ++d) o[d] += wj * ar[d];
        }
    }
}
