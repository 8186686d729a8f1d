/* px_attention_tc_cuda.cu: causal attention with bf16 products on the
 * tensor cores (the op table's attention_bf16_forward / _backward,
 * px_kernels.h; the CPU reference is px_attention_bf16_cpu.c). Selected per
 * call by px__cuda_attention_sel_bf16_*: these kernels where the head size
 * hs = C/NH is a multiple of 16 up to 128 (and the device's shared memory
 * per block holds their tiles), else (or with PX_CUDA_ATTN=simt) the
 * CUDA-core kernels of px_attention_cuda.cu. With PX_CUDA_ATTN=cudnn,
 * cuDNN's fused attention (px_attention_cudnn_cuda.cu) first, these
 * kernels wherever it cannot take the call.
 *
 * Structure: FlashAttention-2 (Dao, "FlashAttention-2: Faster Attention
 * with Better Parallelism and Work Partitioning", 2023), written with the
 * portable WMMA API (nvcuda::wmma, bf16 16x16x16 fragments with fp32
 * accumulators; sm_80 and newer). Tiles are 64 rows; a block is 4 warps
 * (128 threads) and each warp owns 16 rows of a tile. Head sizes are padded
 * with zero columns to HS = 64 (hs 16..64) or 128 (hs 80..128): a zero
 * column adds nothing to q.k and its output column is never stored.
 *
 * Forward: a block per (batch, head, 64-query tile), heaviest (last) tile
 * first. Q^ = bf16(q) staged once; for each causal key tile (64 keys) K^,
 * V^ staged, S = Q^ K^T (WMMA) to shared memory, then per row (two lanes a
 * row, 32 columns each) the online softmax in the log2 domain:
 *   z = S scale log2(e) (masked: key j > query t, or t >= T, is -inf),
 *   m' = max(m, floor(max_j z)) (an integer), E = 2^(z - m'),
 *   l = l 2^(m - m') + sum_j E (fp32, unrounded E), O *= 2^(m - m'),
 *   P = bf16(E) to shared memory, O += P V^ (WMMA).
 * m is an integer, so the rescale 2^(m - m') is exact and bf16(E) 2^m does
 * not depend on the running m: the probabilities rounded here are those of
 * the reference (bf16(E) with E relative to floor(max z) of the row), up to
 * exp2f's last bit. Each warp keeps its 16 rows of O (16, HS) in
 * accumulator fragments; as a WMMA accumulator's element-to-row map is
 * unspecified, a rescale goes through shared memory (store, scale the
 * rows, load), and only on the tiles where some row of the warp has
 * m' != m (with an integer m, rare after the first tiles). The lanes of a
 * row pair visit the tile's columns interleaved and rotated by the row
 * (lane_col), so the softmax's shared-memory accesses are free of bank
 * conflicts. At the end out = O / l and lse = m ln2 + ln l, the
 * log-sum-exp in the first B*NH*T floats of `att` as the CUDA-core
 * kernels and the CPU reference keep it.
 *
 * Backward (FlashAttention-2's, deterministic: no atomics, every sum in a
 * fixed order, so results repeat bitwise). Per query row, L = lse log2 e,
 * mb = floor(L), c = 2^(mb - L), E = 2^(z - mb): P = E c, and bf16(E) is
 * the very value the forward rounded (bf16 commutes with powers of two).
 *   kernel dq, a block per (batch, head, 64-query tile):
 *     pass 1 over its causal key tiles: the forward's output rows
 *       O = c (bf16(E) V^) (register fragments, c applied once at the end),
 *       then D_i = sum_d dout_id O_id with the fp32 dout. (The op is given
 *       no `out`, so D = rowsum(dout * out) needs the output rows
 *       recomputed, as the CPU reference does; FlashAttention-2 reads out.)
 *       D goes to a device scratch (B,NH,T) for kernel dkv.
 *     pass 2: S again, dP = dO^ V^T, dS' = bf16(E (dP - D) scale),
 *       dQ = c (dS' K^) (register fragments); dinp's q columns += dQ.
 *   kernel dkv, a block per (batch, head, 64-key tile), after dq: K^, V^
 *     staged once, then over query tiles t >= the key tile: S, dP (warps by
 *     query rows), bf16(P) and dS = bf16(P (dP - D) scale) to shared
 *     memory, then (warps by key rows) dV += bf16(P)^T dO^, dK += dS^T Q^
 *     (register fragments); dinp's k and v columns += dK, dV.
 * The extra passes cost 9 tile products per (query, key) tile pair where
 * FlashAttention-2 with an atomic dQ and a stored out needs 5; px-opcheck's
 * FLOP figure counts the usual 2.5x the forward's (what the work is worth,
 * not what these kernels execute).
 *
 * Numerics against the CPU reference (both: bf16 operands q^ k^ v^ dout^,
 * exact bf16 x bf16 products; the reference sums in double, these kernels
 * in fp32 on the tensor cores): the forward rounds the same E values and
 * so differs by fp32 summation only (~1e-6 relative). In the backward, D
 * and dQ round exactly what the reference rounds (as above), so they too
 * differ by fp32 sums (~1e-6; D is not moved by a rounding the reference
 * does not make, which mattered: D enters dS through the cancelling
 * dP - D, and an O rebuilt from bf16(P) instead put dq 9e-3 away). dV and
 * dK take the row factor c inside the sum over query rows, where no
 * per-row scaling of the result can carry it, so they round P = E c and
 * P (dP - D) scale where the reference rounds E and E (dP - D) scale and
 * multiplies by c after: two roundings of the same real value, each within
 * u = 2^-8 relative, after the subtraction. So each term of dV_j, dK_j
 * differs by at most 2u |term| and the sum by at most 2u sum|term|: 7.8e-3
 * of the result where the terms share a sign, ~2u/sqrt(n) of it where n
 * terms of mixed sign add up. That is within px-opcheck's normwise 1e-2;
 * tests/gpu/test_attention_tc_model.c runs the same tiling, masks, online
 * softmax and two-pass dQ in C, rounding where these kernels round, and
 * measures (dq ~1e-6, dk and dv 2-3e-3 of the reference: about the
 * distance of the reference itself from exact-arithmetic attention).
 *
 * Shared memory is dynamic (opt-in above 48 KiB, sm_80+: up to 163 KiB on
 * A100, 227 KiB on H100): forward 70 KiB (HS 64) / 110 KiB (HS 128), dq and
 * dkv 89 / 121 KiB. Registers (sm_90, ptxas): at most 241, no spills. Stream: the backend's. Runs on the
 * rank's compute thread. */
#include "px_cuda_common.cuh"

extern "C" {
#include "px_attention_cudnn.h"
#include "px_sdpa_layout.h"
}

#include <math.h>
#include <mma.h>
#include <string.h>

using namespace nvcuda;

#define TC_TILE 64       /* rows of a query or key tile */
#define TC_THREADS 128   /* 4 warps x 16 rows */
#define TC_LDS (TC_TILE + 4) /* floats per row of a (64, 64) fp32 tile */
#define TC_LDP (TC_TILE + 8) /* bf16 per row of a (64, 64) bf16 tile */
#define TC_LOG2E 1.4426950408889634f
#define TC_LN2 0.6931471805599453f

typedef __nv_bfloat16 bf16_t;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16_t, wmma::row_major> frag_a_row;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16_t, wmma::col_major> frag_a_col;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16_t, wmma::row_major> frag_b_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16_t, wmma::col_major> frag_b_col;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_acc;

/* Sizes (bytes) of the shared-memory pieces for head size HS; every piece
 * is a multiple of 128 bytes, so WMMA's 32-byte alignment holds at every
 * 16-row, 16-column fragment origin. */
template <int HS> struct tc_dims {
    static constexpr int LDH = HS + 8; /* bf16 per row of a (64, HS) operand tile */
    static constexpr int LDO = HS + 4; /* floats per row of a (64, HS) fp32 tile */
    static constexpr size_t OPND = (size_t)TC_TILE * LDH * sizeof(bf16_t);
    static constexpr size_t SF32 = (size_t)TC_TILE * TC_LDS * sizeof(float);
    static constexpr size_t PB16 = (size_t)TC_TILE * TC_LDP * sizeof(bf16_t);
    static constexpr size_t OF32 = (size_t)TC_TILE * LDO * sizeof(float);
    static constexpr size_t ROWS = (size_t)TC_TILE * sizeof(float);
    /* forward: Q K V, S, P, O, 1/l */
    static constexpr size_t FWD = 3 * OPND + SF32 + PB16 + OF32 + ROWS;
    /* dq and dkv: Q dO K V, S dP (the (64, HS) fp32 staging of the results
     * aliases them: OF32 <= 2 SF32), P dS, lse D c */
    static constexpr size_t BWD = 4 * OPND + 2 * SF32 + 2 * PB16 + 3 * ROWS;
    static_assert(OF32 <= 2 * SF32, "result staging must fit over S and dP");
};

/* dst (64, HS+8) bf16 = bf16(src rows [r0, r0+64), columns [0, hs)), src
 * rows `ld` floats apart; zeros for rows >= T and columns in [hs, HS).
 * All threads of the block take part (the caller synchronises). */
template <int HS>
__device__ __forceinline__ void stage_bf16(bf16_t *dst, const float *src, size_t ld, int r0,
                                           int T, int hs)
{
    for (int i = threadIdx.x; i < TC_TILE * HS; i += TC_THREADS) {
        const int r = i / HS, d = i % HS;
        const float x = (r0 + r < T && d < hs) ? src[(size_t)(r0 + r) * ld + d] : 0.0f;
        dst[r * tc_dims<HS>::LDH + d] = __float2bfloat16_rn(x);
    }
}

/* One warp: c (16, 64) fp32, ld ldc = a (16, K) b (64, K)^T, a and b bf16
 * row-major (ld lda, ldb). */
template <int K>
__device__ __forceinline__ void warp_abt(float *c, int ldc, const bf16_t *a, int lda,
                                         const bf16_t *b, int ldb)
{
#pragma unroll
    for (int n = 0; n < TC_TILE / 16; n++) {
        frag_acc acc;
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int k = 0; k < K / 16; k++) {
            frag_a_row fa;
            frag_b_col fb; /* (k, n) at b[n ldb + k]: b^T */
            wmma::load_matrix_sync(fa, a + k * 16, lda);
            wmma::load_matrix_sync(fb, b + (size_t)n * 16 * ldb + k * 16, ldb);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(c + n * 16, acc, ldc, wmma::mem_row_major);
    }
}

/* One warp: acc[n] (16, 16) += a (16, 64) b (64, HS)[:, 16n..], a bf16
 * row-major (ld lda), b bf16 row-major (ld ldb), for the HS/16 column
 * blocks n. */
template <int HS>
__device__ __forceinline__ void warp_ab_acc(frag_acc *acc, const bf16_t *a, int lda,
                                            const bf16_t *b, int ldb)
{
#pragma unroll
    for (int k = 0; k < TC_TILE / 16; k++) {
        frag_a_row fa;
        wmma::load_matrix_sync(fa, a + k * 16, lda);
#pragma unroll
        for (int n = 0; n < HS / 16; n++) {
            frag_b_row fb;
            wmma::load_matrix_sync(fb, b + (size_t)k * 16 * ldb + n * 16, ldb);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
    }
}

/* The column of a (64, 64) score tile that a lane visits i-th (i < 32):
 * the lane pair of row r takes the even (half 0) and odd (half 1) columns,
 * starting at a rotation by r, so that a warp's 32 lanes (rows r..r+15, ld
 * 68 floats: bank 4 r + col) hit 32 different banks of the fp32 tile
 * (bank 6 r + 2 i + half mod 32) and 32-bit words of the bf16 tile (ld 72
 * bf16 = 36 words: word 5 r + i). */
__device__ __forceinline__ int lane_col(int i, int r, int half)
{
    return 2 * ((i + r) & 31) + half;
}

/* ---------------------------------------------------------------- forward */

template <int HS>
__global__ void __launch_bounds__(TC_THREADS)
tc_forward_kernel(float *out, float *lse, const float *inp, int T, int C, int NH, int hs,
                  float zscale)
{
    typedef tc_dims<HS> D;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16_t *Qs = (bf16_t *)smem, *Ks = (bf16_t *)(smem + D::OPND),
           *Vs = (bf16_t *)(smem + 2 * D::OPND);
    float *Ss = (float *)(smem + 3 * D::OPND);
    bf16_t *Ps = (bf16_t *)(smem + 3 * D::OPND + D::SF32);
    float *Os = (float *)(smem + 3 * D::OPND + D::SF32 + D::PB16);
    float *rinv = (float *)(smem + 3 * D::OPND + D::SF32 + D::PB16 + D::OF32);

    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C3 = 3 * C;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * TC_TILE; /* the longest tiles first */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r = warp * 16 + lane / 2, half = lane & 1; /* this lane's row, column half */
    const int t = q0 + r;
    const float *base = inp + (size_t)b * T * C3 + (size_t)h * hs;

    stage_bf16<HS>(Qs, base, C3, q0, T, hs);
    frag_acc o[HS / 16]; /* the warp's 16 rows of O */
#pragma unroll
    for (int n = 0; n < HS / 16; n++)
        wmma::fill_fragment(o[n], 0.0f);
    float m = -INFINITY, l = 0.0f; /* m: an integer in the log2 domain, or -inf */
    const int kend = min(q0 + TC_TILE, T);
    for (int k0 = 0; k0 < kend; k0 += TC_TILE) {
        __syncthreads(); /* the previous tile's K, V reads are done */
        stage_bf16<HS>(Ks, base + C, C3, k0, T, hs);
        stage_bf16<HS>(Vs, base + 2 * C, C3, k0, T, hs);
        __syncthreads();
        warp_abt<HS>(Ss + warp * 16 * TC_LDS, TC_LDS, Qs + warp * 16 * D::LDH, D::LDH, Ks,
                     D::LDH);
        __syncwarp();
        float *srow = Ss + r * TC_LDS;
        bf16_t *prow = Ps + r * TC_LDP;
        float zmax = -INFINITY;
#pragma unroll 8
        for (int i = 0; i < 32; i++) {
            const int c = lane_col(i, r, half);
            const float z = (k0 + c <= t && t < T) ? srow[c] * zscale : -INFINITY;
            srow[c] = z;
            zmax = fmaxf(zmax, z);
        }
        zmax = fmaxf(zmax, __shfl_xor_sync(0xffffffffu, zmax, 1));
        const float mnew = fmaxf(m, floorf(zmax));
        /* exact (integers); 1 while the row has seen no key (O and l are 0) */
        const float corr = m == -INFINITY ? 1.0f : exp2f(m - mnew);
        const float mref = mnew == -INFINITY ? 0.0f : mnew; /* a masked row: E = 0 */
        float psum = 0.0f;
#pragma unroll 8
        for (int i = 0; i < 32; i++) {
            const int c = lane_col(i, r, half);
            const float e = exp2f(srow[c] - mref);
            psum += e;
            prow[c] = __float2bfloat16_rn(e);
        }
        psum += __shfl_xor_sync(0xffffffffu, psum, 1);
        l = l * corr + psum;
        m = mnew;
        /* O *= corr through shared memory (the accumulator's element-to-row
         * map is unspecified), only when some row of the warp needs it: the
         * integer m changes rarely after the first tiles */
        if (__any_sync(0xffffffffu, corr != 1.0f)) {
            float *ow = Os + warp * 16 * D::LDO;
#pragma unroll
            for (int n = 0; n < HS / 16; n++)
                wmma::store_matrix_sync(ow + n * 16, o[n], D::LDO, wmma::mem_row_major);
            __syncwarp();
            float *orow = Os + r * D::LDO;
#pragma unroll 8
            for (int d = half; d < HS; d += 2)
                orow[d] *= corr;
            __syncwarp();
#pragma unroll
            for (int n = 0; n < HS / 16; n++)
                wmma::load_matrix_sync(o[n], ow + n * 16, D::LDO, wmma::mem_row_major);
        }
        __syncwarp();
        /* O (this warp's 16 rows) += P V^ */
        warp_ab_acc<HS>(o, Ps + warp * 16 * TC_LDP, TC_LDP, Vs, D::LDH);
    }
#pragma unroll
    for (int n = 0; n < HS / 16; n++)
        wmma::store_matrix_sync(Os + warp * 16 * D::LDO + n * 16, o[n], D::LDO,
                                wmma::mem_row_major);
    if (half == 0) {
        rinv[r] = l > 0.0f ? 1.0f / l : 0.0f;
        if (t < T)
            lse[(size_t)bh * T + t] = m * TC_LN2 + logf(l);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < TC_TILE * HS; i += TC_THREADS) {
        const int rr = i / HS, d = i % HS;
        if (q0 + rr < T && d < hs)
            out[((size_t)b * T + q0 + rr) * C + (size_t)h * hs + d] = Os[rr * D::LDO + d] * rinv[rr];
    }
}

/* ---------------------------------------------------------------- backward */

/* The pointers of the backward kernels' shared memory (tc_dims::BWD). */
template <int HS> struct tc_bwd_smem {
    bf16_t *Qs, *Gs, *Ks, *Vs; /* (64, HS+8): q^, dout^, k^, v^ */
    float *Ss, *dPs;           /* (64, 68): scores, then z; dP */
    float *Rs;                 /* (64, HS+4) result staging, over Ss and dPs */
    bf16_t *Ps, *dSs;          /* (64, 72): bf16(P), bf16(dS) */
    float *Ls, *Ds, *Cs;       /* (64) per query row: lse log2 e (dq: its floor mb), D,
                                * (dq) c = 2^(mb - lse log2 e) */
    __device__ explicit tc_bwd_smem(unsigned char *p)
    {
        typedef tc_dims<HS> D;
        Qs = (bf16_t *)p;
        Gs = (bf16_t *)(p + D::OPND);
        Ks = (bf16_t *)(p + 2 * D::OPND);
        Vs = (bf16_t *)(p + 3 * D::OPND);
        Ss = (float *)(p + 4 * D::OPND);
        dPs = (float *)(p + 4 * D::OPND + D::SF32);
        Rs = Ss;
        Ps = (bf16_t *)(p + 4 * D::OPND + 2 * D::SF32);
        dSs = (bf16_t *)(p + 4 * D::OPND + 2 * D::SF32 + D::PB16);
        Ls = (float *)(p + 4 * D::OPND + 2 * D::SF32 + 2 * D::PB16);
        Ds = Ls + TC_TILE;
        Cs = Ds + TC_TILE;
    }
};

/* Stores the warp's fragments acc[HS/16] (rows warp*16..) into Rs, then
 * (after a block barrier) adds Rs rows [0, 64), each times rowscale[row]
 * (1 where rowscale is NULL), to dst rows r0.. (ld `ld`, columns [0, hs))
 * for rows < T. Every thread calls it; ends synchronised. */
template <int HS>
__device__ __forceinline__ void add_result(float *dst, size_t ld, float *Rs, frag_acc *acc,
                                           const float *rowscale, int r0, int T, int hs)
{
    typedef tc_dims<HS> D;
    const int warp = threadIdx.x / 32;
    __syncthreads(); /* Rs aliases S and dP, which other warps may still read */
#pragma unroll
    for (int n = 0; n < HS / 16; n++)
        wmma::store_matrix_sync(Rs + warp * 16 * D::LDO + n * 16, acc[n], D::LDO,
                                wmma::mem_row_major);
    __syncthreads();
    for (int i = threadIdx.x; i < TC_TILE * HS; i += TC_THREADS) {
        const int rr = i / HS, d = i % HS;
        if (r0 + rr < T && d < hs)
            dst[(size_t)(r0 + rr) * ld + d] +=
                rowscale ? Rs[rr * D::LDO + d] * rowscale[rr] : Rs[rr * D::LDO + d];
    }
    __syncthreads();
}

/* The probabilities of this lane's 32 entries (lane_col) of row r of the
 * (query tile q0, key tile k0) pair: Ss row (raw q^.k^) -> P = exp2(S zscale - L),
 * zero where key > query or query >= T; rounded to bf16 into prow. When
 * dsrow is given, also dS = bf16(P (dP - Di) scale) from the dP row. With
 * L = lse log2 e these are the probabilities and dS; with L = its floor
 * mb, the unnormalised E = 2^(z - mb) the forward rounded (bf16 commutes
 * with the power of two) and E (dP - D) scale, P and dS over c. */
__device__ __forceinline__ void bwd_row(bf16_t *prow, bf16_t *dsrow, const float *srow,
                                        const float *dprow, int r, int half, int t, int k0,
                                        int T, float zscale, float L, float Di, float scale)
{
#pragma unroll 16
    for (int i = 0; i < 32; i++) {
        const int c = lane_col(i, r, half);
        const bool ok = k0 + c <= t && t < T;
        const float p = ok ? exp2f(srow[c] * zscale - L) : 0.0f;
        if (prow)
            prow[c] = __float2bfloat16_rn(p);
        if (dsrow)
            dsrow[c] = __float2bfloat16_rn(p * (dprow[c] - Di) * scale);
    }
}

template <int HS>
__global__ void __launch_bounds__(TC_THREADS)
tc_dq_kernel(float *dinp, float *Dbuf, const float *dout, const float *inp, const float *lse,
             int T, int C, int NH, int hs, float scale, float zscale)
{
    typedef tc_dims<HS> D;
    extern __shared__ __align__(128) unsigned char smem[];
    tc_bwd_smem<HS> s(smem);
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C3 = 3 * C;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * TC_TILE;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r = warp * 16 + lane / 2, half = lane & 1;
    const int t = q0 + r;
    const float *base = inp + (size_t)b * T * C3 + (size_t)h * hs;
    const float *gbase = dout + (size_t)b * T * C + (size_t)h * hs;

    stage_bf16<HS>(s.Qs, base, C3, q0, T, hs);
    stage_bf16<HS>(s.Gs, gbase, C, q0, T, hs);
    if (threadIdx.x < TC_TILE) {
        /* E = 2^(z - mb) as the forward rounded it, c = P / E outside the
         * rounding (as px_attention_bf16_cpu.c): the recomputed output rows
         * are the forward's, so D is the reference's rowsum(dout * out) up
         * to fp32 sums, and dQ = c (bf16(E (dP - D) scale) k^) exactly the
         * reference's product */
        const int tt = q0 + threadIdx.x;
        const float L = tt < T ? lse[(size_t)bh * T + tt] * TC_LOG2E : 0.0f;
        s.Ls[threadIdx.x] = floorf(L);
        s.Cs[threadIdx.x] = exp2f(floorf(L) - L);
    }
    const int kend = min(q0 + TC_TILE, T);
    frag_acc acc[HS / 16];

    /* pass 1: the output rows O = c bf16(E) v^, then D = rowsum(dout * O) */
#pragma unroll
    for (int n = 0; n < HS / 16; n++)
        wmma::fill_fragment(acc[n], 0.0f);
    for (int k0 = 0; k0 < kend; k0 += TC_TILE) {
        __syncthreads();
        stage_bf16<HS>(s.Ks, base + C, C3, k0, T, hs);
        stage_bf16<HS>(s.Vs, base + 2 * C, C3, k0, T, hs);
        __syncthreads();
        warp_abt<HS>(s.Ss + warp * 16 * TC_LDS, TC_LDS, s.Qs + warp * 16 * D::LDH, D::LDH, s.Ks,
                     D::LDH);
        __syncwarp();
        bwd_row(s.Ps + r * TC_LDP, NULL, s.Ss + r * TC_LDS, NULL, r, half, t, k0, T, zscale,
                s.Ls[r], 0.0f, 0.0f);
        __syncwarp();
        warp_ab_acc<HS>(acc, s.Ps + warp * 16 * TC_LDP, TC_LDP, s.Vs, D::LDH);
    }
    __syncthreads(); /* Rs aliases the other warps' S */
#pragma unroll
    for (int n = 0; n < HS / 16; n++)
        wmma::store_matrix_sync(s.Rs + warp * 16 * D::LDO + n * 16, acc[n], D::LDO,
                                wmma::mem_row_major);
    __syncwarp();
    {
        float Di = 0.0f;
        const float *orow = s.Rs + r * D::LDO, c = s.Cs[r];
        if (t < T)
            for (int d = half; d < hs; d += 2)
                Di += gbase[(size_t)t * C + d] * (orow[d] * c);
        Di += __shfl_xor_sync(0xffffffffu, Di, 1);
        if (half == 0) {
            s.Ds[r] = Di;
            if (t < T)
                Dbuf[(size_t)bh * T + t] = Di;
        }
    }

    /* pass 2: dS / c = bf16(E (dP - D) scale), dQ = c (dS / c) k^ */
#pragma unroll
    for (int n = 0; n < HS / 16; n++)
        wmma::fill_fragment(acc[n], 0.0f);
    for (int k0 = 0; k0 < kend; k0 += TC_TILE) {
        __syncthreads(); /* K, V and (first) Rs reads done, Ds written */
        stage_bf16<HS>(s.Ks, base + C, C3, k0, T, hs);
        stage_bf16<HS>(s.Vs, base + 2 * C, C3, k0, T, hs);
        __syncthreads();
        warp_abt<HS>(s.Ss + warp * 16 * TC_LDS, TC_LDS, s.Qs + warp * 16 * D::LDH, D::LDH, s.Ks,
                     D::LDH);
        warp_abt<HS>(s.dPs + warp * 16 * TC_LDS, TC_LDS, s.Gs + warp * 16 * D::LDH, D::LDH, s.Vs,
                     D::LDH);
        __syncwarp();
        bwd_row(NULL, s.dSs + r * TC_LDP, s.Ss + r * TC_LDS, s.dPs + r * TC_LDS, r, half, t, k0,
                T, zscale, s.Ls[r], s.Ds[r], scale);
        __syncwarp();
        warp_ab_acc<HS>(acc, s.dSs + warp * 16 * TC_LDP, TC_LDP, s.Ks, D::LDH);
    }
    add_result<HS>(dinp + (size_t)b * T * C3 + (size_t)h * hs, C3, s.Rs, acc, s.Cs, q0, T, hs);
}

template <int HS>
__global__ void __launch_bounds__(TC_THREADS)
tc_dkv_kernel(float *dinp, const float *Dbuf, const float *dout, const float *inp,
              const float *lse, int T, int C, int NH, int hs, float scale, float zscale)
{
    typedef tc_dims<HS> D;
    extern __shared__ __align__(128) unsigned char smem[];
    tc_bwd_smem<HS> s(smem);
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C3 = 3 * C;
    const int k0 = blockIdx.x * TC_TILE; /* the first key tiles see the most queries */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r = warp * 16 + lane / 2, half = lane & 1;
    const float *base = inp + (size_t)b * T * C3 + (size_t)h * hs;
    const float *gbase = dout + (size_t)b * T * C + (size_t)h * hs;

    stage_bf16<HS>(s.Ks, base + C, C3, k0, T, hs);
    stage_bf16<HS>(s.Vs, base + 2 * C, C3, k0, T, hs);
    frag_acc dk[HS / 16], dv[HS / 16];
#pragma unroll
    for (int n = 0; n < HS / 16; n++) {
        wmma::fill_fragment(dk[n], 0.0f);
        wmma::fill_fragment(dv[n], 0.0f);
    }
    for (int q0 = k0; q0 < T; q0 += TC_TILE) {
        __syncthreads(); /* the previous tile's Q, dO, P, dS reads are done */
        stage_bf16<HS>(s.Qs, base, C3, q0, T, hs);
        stage_bf16<HS>(s.Gs, gbase, C, q0, T, hs);
        if (threadIdx.x < TC_TILE) {
            const int tt = q0 + threadIdx.x;
            s.Ls[threadIdx.x] = tt < T ? lse[(size_t)bh * T + tt] * TC_LOG2E : 0.0f;
            s.Ds[threadIdx.x] = tt < T ? Dbuf[(size_t)bh * T + tt] : 0.0f;
        }
        __syncthreads();
        /* warps by query rows: S, dP, then P and dS */
        warp_abt<HS>(s.Ss + warp * 16 * TC_LDS, TC_LDS, s.Qs + warp * 16 * D::LDH, D::LDH, s.Ks,
                     D::LDH);
        warp_abt<HS>(s.dPs + warp * 16 * TC_LDS, TC_LDS, s.Gs + warp * 16 * D::LDH, D::LDH, s.Vs,
                     D::LDH);
        __syncwarp();
        bwd_row(s.Ps + r * TC_LDP, s.dSs + r * TC_LDP, s.Ss + r * TC_LDS, s.dPs + r * TC_LDS, r,
                half, q0 + r, k0, T, zscale, s.Ls[r], s.Ds[r], scale);
        __syncthreads();
        /* warps by key rows: dV += P^T dO^, dK += dS^T q^ (the k loop
         * rolled: 2 HS/16 accumulators live already, no spills at HS 128) */
#pragma unroll 1
        for (int k = 0; k < TC_TILE / 16; k++) {
            frag_a_col fa; /* (key, query) at P[query ld + key]: P^T */
            wmma::load_matrix_sync(fa, s.Ps + k * 16 * TC_LDP + warp * 16, TC_LDP);
#pragma unroll
            for (int n = 0; n < HS / 16; n++) {
                frag_b_row fb;
                wmma::load_matrix_sync(fb, s.Gs + k * 16 * D::LDH + n * 16, D::LDH);
                wmma::mma_sync(dv[n], fa, fb, dv[n]);
            }
            wmma::load_matrix_sync(fa, s.dSs + k * 16 * TC_LDP + warp * 16, TC_LDP);
#pragma unroll
            for (int n = 0; n < HS / 16; n++) {
                frag_b_row fb;
                wmma::load_matrix_sync(fb, s.Qs + k * 16 * D::LDH + n * 16, D::LDH);
                wmma::mma_sync(dk[n], fa, fb, dk[n]);
            }
        }
    }
    float *dst = dinp + (size_t)b * T * C3 + (size_t)h * hs;
    add_result<HS>(dst + 2 * C, C3, s.Rs, dv, NULL, k0, T, hs);
    add_result<HS>(dst + C, C3, s.Rs, dk, NULL, k0, T, hs);
}

/* ---------------------------------------------------------------- launch */

/* Lets `kern` use `bytes` of dynamic shared memory (above the 48 KiB
 * default); once per kernel. 0 on failure (sticky error). */
template <typename K> static int smem_opt_in(K kern, size_t bytes, int *done)
{
    if (*done)
        return 1;
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)bytes);
    if (e != cudaSuccess) {
        px__cuda_check(e, "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)", __FILE__,
                       __LINE__);
        return 0;
    }
    *done = 1;
    return 1;
}

template <int HS>
static void tc_forward(float *out, float *lse, const float *inp, int B, int T, int C, int NH)
{
    static int opted;
    const size_t bytes = tc_dims<HS>::FWD;
    if (!smem_opt_in(tc_forward_kernel<HS>, bytes, &opted))
        return;
    const int hs = C / NH;
    const float scale = 1.0f / sqrtf((float)hs);
    dim3 grid((T + TC_TILE - 1) / TC_TILE, B * NH);
    tc_forward_kernel<HS><<<grid, TC_THREADS, bytes, px__cuda.stream>>>(out, lse, inp, T, C, NH,
                                                                        hs, scale * TC_LOG2E);
    PX_CUDA_LAUNCHED();
}

template <int HS>
static void tc_backward(float *dinp, const float *dout, const float *inp, const float *lse,
                        int B, int T, int C, int NH)
{
    static int opted_dq, opted_dkv;
    const size_t bytes = tc_dims<HS>::BWD;
    if (!smem_opt_in(tc_dq_kernel<HS>, bytes, &opted_dq) ||
        !smem_opt_in(tc_dkv_kernel<HS>, bytes, &opted_dkv))
        return;
    float *Dbuf = (float *)px__cuda_scratch((size_t)B * NH * T * sizeof(float));
    if (!Dbuf)
        return;
    const int hs = C / NH;
    const float scale = 1.0f / sqrtf((float)hs);
    dim3 grid((T + TC_TILE - 1) / TC_TILE, B * NH);
    tc_dq_kernel<HS><<<grid, TC_THREADS, bytes, px__cuda.stream>>>(
        dinp, Dbuf, dout, inp, lse, T, C, NH, hs, scale, scale * TC_LOG2E);
    PX_CUDA_LAUNCHED();
    tc_dkv_kernel<HS><<<grid, TC_THREADS, bytes, px__cuda.stream>>>(
        dinp, Dbuf, dout, inp, lse, T, C, NH, hs, scale, scale * TC_LOG2E);
    PX_CUDA_LAUNCHED();
}

/* ---------------------------------------------------------------- selection */

/* the kernel family PX_CUDA_ATTN (px_cuda_attention_kernels_set) asks for */
enum { ATTN_AUTO, ATTN_SIMT, ATTN_CUDNN };
static int attn_choice = ATTN_AUTO;

extern "C" px_status_t px_cuda_attention_kernels_set(const char *name)
{
    if (!name || !*name || !strcmp(name, "auto") || !strcmp(name, "tc")) {
        attn_choice = ATTN_AUTO;
        return PX_OK;
    }
    if (!strcmp(name, "simt")) {
        attn_choice = ATTN_SIMT;
        return PX_OK;
    }
    if (!strcmp(name, "cudnn")) {
        attn_choice = ATTN_CUDNN;
        return PX_OK;
    }
    px_error("PX_CUDA_ATTN='%s' is not a kernel choice (auto, tc, simt or cudnn)", name);
    return PX_ERR_INVALID_ARGUMENT;
}

/* 1 when the open device lets a block have `bytes` of shared memory (the
 * opt-in limit: 227 KiB on H100, 163 KiB on A100, 99 KiB on sm_86/89, where
 * the HS 128 backward's 121 KiB does not fit); also 1 while no device is
 * open (nothing runs then; the answer is taken again once one is). */
static int smem_fits(size_t bytes)
{
    static int optin = -1; /* bytes, once known */
    if (optin < 0) {
        int v;
        if (px__cuda.device < 0)
            return 1;
        if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                   px__cuda.device) != cudaSuccess) {
            cudaGetLastError(); /* not an op's error: clear it */
            v = 48 * 1024;      /* the limit without opt-in */
        }
        optin = v;
    }
    return bytes <= (size_t)optin;
}

/* 1 when the tensor-core kernels take a (C, NH) attention */
static int use_tc(int C, int NH)
{
    if (attn_choice == ATTN_SIMT || NH <= 0 || C % NH)
        return 0;
    const int hs = C / NH;
    if (hs % 16 || hs > 128)
        return 0;
    return hs <= 64 ? smem_fits(tc_dims<64>::FWD > tc_dims<64>::BWD ? tc_dims<64>::FWD
                                                                    : tc_dims<64>::BWD)
                    : smem_fits(tc_dims<128>::FWD > tc_dims<128>::BWD ? tc_dims<128>::FWD
                                                                      : tc_dims<128>::BWD);
}

/* 1 when cuDNN is asked for, takes the shape, and has not failed to load
 * (a shape it refused falls back call by call, logged once) */
static int want_cudnn(int C, int NH)
{
    if (attn_choice != ATTN_CUDNN || !px_sdpa_supported(C, NH))
        return 0;
    const char *why = px__cudnn_sdpa_unavailable();
    return !why || px__cudnn_sdpa_version() > 0; /* loaded: refusals are per shape */
}

extern "C" const char *px_cuda_attention_kernels_name(int C, int NH)
{
    if (want_cudnn(C, NH))
        return "cudnn";
    return use_tc(C, NH) ? "tc" : "simt";
}

void px__cuda_attention_sel_bf16_forward(float *out, float *att, const float *inp, int B, int T,
                                         int C, int NH)
{
    if (want_cudnn(C, NH) && px__cuda_attention_cudnn_forward(out, att, inp, B, T, C, NH))
        return;
    if (!use_tc(C, NH)) {
        px__cuda_attention_bf16_forward(out, att, inp, B, T, C, NH);
        return;
    }
    if (B <= 0 || T <= 0)
        return;
    if (C / NH <= 64)
        tc_forward<64>(out, att, inp, B, T, C, NH);
    else
        tc_forward<128>(out, att, inp, B, T, C, NH);
}

/* the backward on these kernels or the CUDA-core ones (not cuDNN) */
static void own_backward(float *dinp, float *scratch, const float *dout, const float *inp,
                         const float *att, int B, int T, int C, int NH)
{
    if (!use_tc(C, NH)) {
        px__cuda_attention_bf16_backward(dinp, scratch, dout, inp, att, B, T, C, NH);
        return;
    }
    if (B <= 0 || T <= 0)
        return;
    if (C / NH <= 64)
        tc_backward<64>(dinp, dout, inp, att, B, T, C, NH);
    else
        tc_backward<128>(dinp, dout, inp, att, B, T, C, NH);
}

void px__cuda_attention_sel_bf16_backward(float *dinp, float *scratch, const float *dout,
                                          const float *inp, const float *att, int B, int T,
                                          int C, int NH)
{
    if (want_cudnn(C, NH) &&
        px__cuda_attention_cudnn_backward(dinp, dout, inp, NULL, att, B, T, C, NH))
        return;
    own_backward(dinp, scratch, dout, inp, att, B, T, C, NH);
}

void px__cuda_attention_sel_bf16_backward_out(float *dinp, float *scratch, const float *dout,
                                              const float *inp, const float *out,
                                              const float *att, int B, int T, int C, int NH)
{
    if (want_cudnn(C, NH) &&
        px__cuda_attention_cudnn_backward(dinp, dout, inp, out, att, B, T, C, NH))
        return;
    /* these kernels rebuild the rows they need from their own rounding */
    own_backward(dinp, scratch, dout, inp, att, B, T, C, NH);
}
