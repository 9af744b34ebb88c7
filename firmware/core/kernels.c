/* The core's kernels: softmax, argmax, requantisation and element-wise add of 2-D
 * tensors [rows, cols] in DRAM, each described by a descriptor in DRAM (kdesc.h,
 * generated from systolica/firmware/core_kernels.py, which also states each
 * algorithm in numpy).
 *
 * Every address a kernel will touch is checked before its first access (the
 * descriptor lies below dram_bytes and names this kernel; each view has an element
 * type the kernel takes, is aligned for it and ends below dram_bytes; each parameter
 * is in its range), so a bad descriptor stops the step with an FwStepProblem, never
 * with an access outside DRAM, an overflow or a hang. Integer arithmetic only:
 * RV32IM, no floating point, no library calls (64-bit products are mul + mulh).
 *
 * A view's element (r, c) is at base + r*row_stride + (c / block)*block_stride
 * + (c % block)*elem_stride; a cursor walks a row a run of one block at a time. */
#include "kernels.h"

#include "kdesc.h"
#include "runtime.h"
#include "table.h"

#define DRAM ((uint8_t *)FW_DRAM_BASE)

/* -- views ---------------------------------------------------------------------------- */

static uint32_t elem_bytes(uint32_t dtype)
{
    switch (dtype) {
    case ELEM_INT8:
    case ELEM_UINT8:
        return 1;
    case ELEM_INT32:
        return 4;
    case ELEM_INT64:
        return 8;
    default:
        return 0;
    }
}

#define TYPES(a) (1u << (a))
#define BYTES8 (TYPES(ELEM_INT8) | TYPES(ELEM_UINT8))

/* `v` of rows x cols elements has a type of `allowed`, is aligned for it and ends at
 * or below `limit`. Strides are unsigned, so the farthest element is the last one of
 * the last row's last block, or of its block before (which is whole). */
static int view_ok(const struct kview *v, uint32_t rows, uint32_t cols, uint32_t allowed,
                   uint32_t limit)
{
    uint32_t size = elem_bytes(v->dtype);
    uint32_t last_block, last_in_block;
    uint64_t far, full;

    if (!size || v->dtype > 31 || !(allowed & TYPES(v->dtype)) || v->block == 0)
        return 0;
    if (size > 1 && ((v->base | v->row_stride | v->block_stride | v->elem_stride) & 3))
        return 0;
    last_block = (cols - 1) / v->block;
    last_in_block = (cols - 1) % v->block;
    far = (uint64_t)last_block * v->block_stride + (uint64_t)last_in_block * v->elem_stride;
    if (last_block) {
        full = (uint64_t)(last_block - 1) * v->block_stride
               + (uint64_t)(v->block - 1) * v->elem_stride;
        if (full > far)
            far = full;
    }
    far += (uint64_t)(rows - 1) * v->row_stride + v->base + size;
    return far <= limit;
}

/* An int8 or uint8 output's zero point and clamp lie in its type's range. */
static int out_ok(uint32_t dtype, int32_t zp, int32_t lo, int32_t hi)
{
    int32_t tmin = dtype == ELEM_UINT8 ? 0 : -128;
    int32_t tmax = dtype == ELEM_UINT8 ? 255 : 127;
    return tmin <= lo && lo <= hi && hi <= tmax && tmin <= zp && zp <= tmax;
}

/* A zero point of an input of type `dtype` (int32: only 0). */
static int zp_ok(uint32_t dtype, int32_t zp)
{
    if (dtype == ELEM_INT8)
        return -128 <= zp && zp <= 127;
    if (dtype == ELEM_UINT8)
        return 0 <= zp && zp <= 255;
    return zp == 0;
}

/* A walk along one row of a view, a run of elements inside one block at a time: the
 * inner loops only step pointers. */
struct cursor {
    uint32_t p, block_p, left, block, block_stride, elem_stride;
};

static inline void cursor_row(struct cursor *c, const struct kview *v, uint32_t r)
{
    c->p = c->block_p = v->base + r * v->row_stride;
    c->left = c->block = v->block;
    c->block_stride = v->block_stride;
    c->elem_stride = v->elem_stride;
}

/* Past `n` elements (at most c->left). */
static inline void cursor_skip(struct cursor *c, uint32_t n)
{
    c->left -= n;
    if (c->left == 0) {
        c->left = c->block;
        c->block_p += c->block_stride;
        c->p = c->block_p;
    } else {
        c->p += n * c->elem_stride;
    }
}

static inline uint32_t min_u32(uint32_t a, uint32_t b)
{
    return a < b ? a : b;
}

/* An 8-bit element: `flip` is 0x80 for int8 (the byte's sign), 0 for uint8. */
static inline int32_t load8(uint32_t at, int32_t flip)
{
    return (int32_t)(DRAM[at] ^ (uint32_t)flip) - flip;
}

static inline int32_t load32(uint32_t at)
{
    return *(const int32_t *)(DRAM + at);
}

static inline int32_t flip_of(uint32_t dtype)
{
    return dtype == ELEM_INT8 ? 0x80 : 0;
}

static inline int32_t clamp(int32_t v, int32_t lo, int32_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* -- softmax -------------------------------------------------------------------------- */

/* floor(n / d) for n < 2**62 and 2**30 <= d < 2**62, whose quotient is below 2**32:
 * n's high word is below d, so 32 steps of restoring division give it. */
static uint32_t div_q32(uint64_t n, uint64_t d)
{
    uint64_t rem = n >> 32;
    uint32_t low = (uint32_t)n, q = 0;

    for (int i = 31; i >= 0; i--) {
        rem = rem << 1 | ((low >> i) & 1u);
        q <<= 1;
        if (rem >= d) {
            rem -= d;
            q |= 1;
        }
    }
    return q;
}

/* Per row: m = max x, S = sum T[m - x] (64 bits), R = floor(NUM / S),
 * y = clamp(zp + ((T[m - x]*R + 2**45) >> 46)). T[0] = 2**30, so S >= 2**30 and
 * R < 2**32: one 32x32->64 product per element, of which only the high word counts
 * (2**45 and the shift by 46 fall on it). */
static uint32_t softmax(const struct kd_softmax *d, uint32_t limit)
{
    struct kview x = d->x, y = d->y;
    uint32_t rows = d->rows, cols = d->cols;
    int32_t zp = d->out_zp, lo = d->out_min, hi = d->out_max, flip = flip_of(x.dtype);
    const uint32_t *table = d->table;
    uint64_t num = (uint64_t)d->num_hi << 32 | d->num_lo;
    const uint32_t half_hi = 1u << (SOFTMAX_NUM_BITS - 1 - 32);

    if (!view_ok(&x, rows, cols, BYTES8, limit) || !view_ok(&y, rows, cols, BYTES8, limit))
        return FW_STEP_PROBLEM_BAD_VIEW;
    if (!out_ok(y.dtype, zp, lo, hi) || d->num_hi >= SOFTMAX_NUM_HI_LIMIT
        || table[0] != SOFTMAX_ONE)
        return FW_STEP_PROBLEM_BAD_DESCRIPTOR;
    for (uint32_t r = 0; r < rows; r++) {
        struct cursor cx, cy;
        int32_t m = -256;           /* below every 8-bit value */
        uint64_t sum = 0;
        uint32_t recip, n;
        const uint32_t *t;

        cursor_row(&cx, &x, r);
        for (uint32_t i = 0; i < cols; i += n) {
            uint32_t px = cx.p, es = cx.elem_stride;
            n = min_u32(cols - i, cx.left);
            for (uint32_t j = n; j; j--, px += es) {
                int32_t v = load8(px, flip);
                if (v > m)
                    m = v;
            }
            cursor_skip(&cx, n);
        }
        t = table + m;              /* T[m - v] = t[-v] */
        cursor_row(&cx, &x, r);
        for (uint32_t i = 0; i < cols; i += n) {
            uint32_t px = cx.p, es = cx.elem_stride;
            n = min_u32(cols - i, cx.left);
            for (uint32_t j = n; j; j--, px += es)
                sum += t[-load8(px, flip)];
            cursor_skip(&cx, n);
        }
        recip = div_q32(num, sum);
        cursor_row(&cx, &x, r);
        cursor_row(&cy, &y, r);
        for (uint32_t i = 0; i < cols; i += n) {
            uint32_t px = cx.p, py = cy.p, es = cx.elem_stride, ys = cy.elem_stride;
            n = min_u32(cols - i, min_u32(cx.left, cy.left));
            for (uint32_t j = n; j; j--, px += es, py += ys) {
                uint32_t e = t[-load8(px, flip)];
                uint32_t q = ((uint32_t)(((uint64_t)e * recip) >> 32) + half_hi)
                             >> (SOFTMAX_NUM_BITS - 32);
                DRAM[py] = (uint8_t)clamp(zp + (int32_t)q, lo, hi);
            }
            cursor_skip(&cx, n);
            cursor_skip(&cy, n);
        }
    }
    return 0;
}

/* -- argmax --------------------------------------------------------------------------- */

static uint32_t argmax(const struct kd_argmax *d, uint32_t limit)
{
    struct kview x = d->x, y = d->y;
    uint32_t rows = d->rows, cols = d->cols, last = d->select_last;
    int32_t flip = flip_of(x.dtype), wide = x.dtype == ELEM_INT32;

    if (!view_ok(&x, rows, cols, BYTES8 | TYPES(ELEM_INT32), limit)
        || !view_ok(&y, rows, 1, TYPES(ELEM_INT32) | TYPES(ELEM_INT64), limit))
        return FW_STEP_PROBLEM_BAD_VIEW;
    if (last > 1)
        return FW_STEP_PROBLEM_BAD_DESCRIPTOR;
    for (uint32_t r = 0; r < rows; r++) {
        struct cursor cx;
        uint32_t at = 0, n, out = y.base + r * y.row_stride;
        int32_t best = wide ? load32(x.base + r * x.row_stride)
                            : load8(x.base + r * x.row_stride, flip);

        /* the first (last) of the largest: a later element replaces it if larger (or
         * equal); `last` lowers each later element's bar by one */
        cursor_row(&cx, &x, r);
        for (uint32_t i = 0; i < cols; i += n) {
            uint32_t px = cx.p, es = cx.elem_stride;
            n = min_u32(cols - i, cx.left);
            if (wide) {
                for (uint32_t j = 0; j < n; j++, px += es) {
                    int32_t v = load32(px);
                    if (v > best || (last && v == best)) {
                        best = v;
                        at = i + j;
                    }
                }
            } else {
                for (uint32_t j = 0; j < n; j++, px += es) {
                    int32_t v = load8(px, flip) + (int32_t)last;
                    if (v > best) {
                        best = v - (int32_t)last;
                        at = i + j;
                    }
                }
            }
            cursor_skip(&cx, n);
        }
        *(uint32_t *)(DRAM + out) = at;
        if (y.dtype == ELEM_INT64)
            *(uint32_t *)(DRAM + out + 4) = 0;
    }
    return 0;
}

/* -- requantisation ------------------------------------------------------------------- */

/* floor(p / 2**shift) of a 64-bit p, saturated to +-2**30 (past every clamp). */
static inline int32_t shift_saturate(int64_t p, uint32_t shift)
{
    int32_t hi = (int32_t)(p >> 32), top, low;

    if (shift >= 32)
        return hi >> (shift - 32);
    top = hi >> shift;
    low = (int32_t)(((uint32_t)p >> shift) | (((uint32_t)hi << 1) << (31 - shift)));
    if (top != low >> 31 || low >= (1 << 30) || low < -(1 << 30))
        return top < 0 ? -(1 << 30) : 1 << 30;
    return low;
}

/* The vector unit's rule: y = clamp(zp + ((x - x_zp)*mult + 2**(shift-1)) >> shift).
 * An 8-bit input with mult < 2**22 and shift <= 30 keeps the sum in 32 bits; otherwise
 * it is a 64-bit product (mult < 2**31, so it and the rounding term fit). */
static uint32_t requantise(const struct kd_requantise *d, uint32_t limit)
{
    struct kview x = d->x, y = d->y;
    uint32_t rows = d->rows, cols = d->cols, shift = d->shift;
    int32_t x_zp = d->x_zp, zp = d->out_zp, lo = d->out_min, hi = d->out_max;
    int32_t mult = (int32_t)d->mult, flip = flip_of(x.dtype);
    int narrow, wide = x.dtype == ELEM_INT32;

    if (!view_ok(&x, rows, cols, BYTES8 | TYPES(ELEM_INT32), limit)
        || !view_ok(&y, rows, cols, BYTES8, limit))
        return FW_STEP_PROBLEM_BAD_VIEW;
    if (!zp_ok(x.dtype, x_zp) || !out_ok(y.dtype, zp, lo, hi)
        || d->mult >= REQUANT_MULT_LIMIT || shift > REQUANT_SHIFT_MAX)
        return FW_STEP_PROBLEM_BAD_DESCRIPTOR;
    narrow = !wide && d->mult < (1u << 22) && shift <= 30;
    for (uint32_t r = 0; r < rows; r++) {
        struct cursor cx, cy;
        uint32_t n;

        cursor_row(&cx, &x, r);
        cursor_row(&cy, &y, r);
        for (uint32_t i = 0; i < cols; i += n) {
            uint32_t px = cx.p, py = cy.p, es = cx.elem_stride, ys = cy.elem_stride;
            n = min_u32(cols - i, min_u32(cx.left, cy.left));
            if (narrow) {
                /* x*mult + (round - x_zp*mult), in unsigned arithmetic: the parts
                 * may pass 2**31 where the sum does not */
                uint32_t round = (shift ? 1u << (shift - 1) : 0) - (uint32_t)(x_zp * mult);
                for (uint32_t j = n; j; j--, px += es, py += ys) {
                    int32_t v = (int32_t)((uint32_t)(load8(px, flip) * mult) + round) >> shift;
                    DRAM[py] = (uint8_t)clamp(zp + v, lo, hi);
                }
            } else {
                int64_t round = shift ? (int64_t)1 << (shift - 1) : 0;
                for (uint32_t j = n; j; j--, px += es, py += ys) {
                    int32_t in = wide ? load32(px) : load8(px, flip) - x_zp;
                    int32_t v = shift_saturate((int64_t)in * mult + round, shift);
                    DRAM[py] = (uint8_t)clamp(zp + v, lo, hi);
                }
            }
            cursor_skip(&cx, n);
            cursor_skip(&cy, n);
        }
    }
    return 0;
}

/* -- element-wise add ----------------------------------------------------------------- */

/* y = clamp(zp + ((ma*(a - a_zp) + mb*(b - b_zp) + 2**(shift-1)) >> shift)) in 32 bits:
 * |ma*(a - a_zp) + mb*(b - b_zp)| < 2*255*2**20 and the rounding term is at most
 * 2**30. */
static uint32_t add(const struct kd_add *d, uint32_t limit)
{
    struct kview a = d->a, b = d->b, y = d->y;
    uint32_t rows = d->rows, cols = d->cols, shift = d->shift;
    int32_t a_zp = d->a_zp, b_zp = d->b_zp, zp = d->out_zp, lo = d->out_min, hi = d->out_max;
    int32_t ma = (int32_t)d->mult_a, mb = (int32_t)d->mult_b;
    uint32_t round;
    int32_t fa = flip_of(a.dtype), fb = flip_of(b.dtype);

    if (!view_ok(&a, rows, cols, BYTES8, limit) || !view_ok(&b, rows, cols, BYTES8, limit)
        || !view_ok(&y, rows, cols, BYTES8, limit))
        return FW_STEP_PROBLEM_BAD_VIEW;
    if (!zp_ok(a.dtype, a_zp) || !zp_ok(b.dtype, b_zp) || !out_ok(y.dtype, zp, lo, hi)
        || d->mult_a >= ADD_MULT_LIMIT || d->mult_b >= ADD_MULT_LIMIT
        || shift > ADD_SHIFT_MAX)
        return FW_STEP_PROBLEM_BAD_DESCRIPTOR;
    /* the zero points and the rounding term folded into one constant, summed in
     * unsigned arithmetic: the parts may pass 2**31 where the sum does not */
    round = (shift ? 1u << (shift - 1) : 0) - (uint32_t)(ma * a_zp) - (uint32_t)(mb * b_zp);
    for (uint32_t r = 0; r < rows; r++) {
        struct cursor ca, cb, cy;
        uint32_t n;

        cursor_row(&ca, &a, r);
        cursor_row(&cb, &b, r);
        cursor_row(&cy, &y, r);
        for (uint32_t i = 0; i < cols; i += n) {
            uint32_t pa = ca.p, pb = cb.p, py = cy.p;
            uint32_t as = ca.elem_stride, bs = cb.elem_stride, ys = cy.elem_stride;
            n = min_u32(cols - i, min_u32(ca.left, min_u32(cb.left, cy.left)));
            for (uint32_t j = n; j; j--, pa += as, pb += bs, py += ys) {
                int32_t v = (int32_t)((uint32_t)(ma * load8(pa, fa))
                                      + (uint32_t)(mb * load8(pb, fb)) + round);
                DRAM[py] = (uint8_t)clamp(zp + (v >> shift), lo, hi);
            }
            cursor_skip(&ca, n);
            cursor_skip(&cb, n);
            cursor_skip(&cy, n);
        }
    }
    return 0;
}

/* -- the step ------------------------------------------------------------------------- */

static const uint32_t descriptor_bytes[KERNEL_COUNT + 1] = {
    [KERNEL_SOFTMAX] = sizeof(struct kd_softmax),
    [KERNEL_ARGMAX] = sizeof(struct kd_argmax),
    [KERNEL_REQUANTISE] = sizeof(struct kd_requantise),
    [KERNEL_ADD] = sizeof(struct kd_add),
};

uint32_t run_kernel(uint32_t kernel, uint32_t at, uint32_t dram_bytes)
{
    const uint32_t *head;
    const void *d;

    if (kernel == 0 || kernel > KERNEL_COUNT)
        return FW_STEP_PROBLEM_NO_KERNEL;
    if (dram_bytes > FW_DRAM_WINDOW_BYTES)
        dram_bytes = FW_DRAM_WINDOW_BYTES;
    if ((at & 3) || (uint64_t)at + descriptor_bytes[kernel] > dram_bytes)
        return FW_STEP_PROBLEM_BAD_DESCRIPTOR;
    d = head = (const uint32_t *)(DRAM + at);
    /* no more elements than DRAM has bytes: a view of stride 0 cannot make a kernel
     * run for ever */
    if (head[0] != kernel || head[1] == 0 || head[2] == 0
        || (uint64_t)head[1] * head[2] > dram_bytes)
        return FW_STEP_PROBLEM_BAD_DESCRIPTOR;
    switch (kernel) {
    case KERNEL_SOFTMAX:
        return softmax(d, dram_bytes);
    case KERNEL_ARGMAX:
        return argmax(d, dram_bytes);
    case KERNEL_REQUANTISE:
        return requantise(d, dram_bytes);
    default:
        return add(d, dram_bytes);
    }
}
