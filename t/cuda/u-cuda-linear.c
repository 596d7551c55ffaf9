/* u-cuda-linear.c - kernels/linear.cu and kernels/moe.cu against the CPU backend (the oracle):
 * ck_linear for F32/F16/BF16 (tolerance, and batch invariance bit for bit) and NVFP4 (bit for
 * bit: 1, 2 and 3 parts, calibrated and dynamic input scales, Inf/NaN rows, records at 4- and
 * 8-byte offsets), the router against a C copy of the CPU's route(), the routed experts per
 * slot against a capy_linear chain (NVFP4 bit for bit, BF16 by tolerance) and against the
 * offloading engine's CPU expert pool (libcore/offload/cpu-experts.h: every slot a miss, its
 * input handed over quantized as the GPU hands it, bit for bit), and the combine; ck_linear_rows
 * (some rows of a BF16 matrix, the MTP head's draft vocabulary) bit for bit ck_linear's rows. */
#include "test.h"
#include "cuda-test.h"
#include "cpu/linear.h"
#include "offload/cpu-experts.h"
#include "quant/floats.h"
#include "quant/nvfp4.h"

static uint64_t seed_next = 1;

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		abort();
	return p;
}

/* Activations [m][k] with a different magnitude per row (2^-3 .. 2^3). */
static float *make_x(uint64_t m, uint64_t k, uint64_t seed)
{
	float *x = xmalloc(m * k * sizeof(float));

	test_fill(x, m * k, seed, 1.0f);
	for (uint64_t i = 0; i < m; i++)
		for (uint64_t j = 0; j < k; j++)
			x[i * k + j] *= ldexpf(1.0f, (int)(i % 7) - 3);
	return x;
}

static const char *dt_name(enum ck_dtype dt)
{
	static const char *names[] = { "F32", "F16", "BF16", "NVFP4" };

	return names[dt];
}

static enum capy_dtype capy_dt(enum ck_dtype dt)
{
	return dt == CK_F32 ? CAPY_DT_F32 : dt == CK_F16 ? CAPY_DT_F16 : dt == CK_BF16 ? CAPY_DT_BF16 : CAPY_DT_NVFP4;
}

/* A weight matrix on the host, as the artifact stores it, with its ck_linear description
 * (data still the host pointer). */
struct hw {
	void *data;
	size_t bytes;
	struct ck_linear ck;
};

static void make_plain(struct hw *h, enum ck_dtype dt, uint64_t n, uint64_t k, uint64_t seed)
{
	float *w = xmalloc(n * k * sizeof(float));

	test_fill(w, n * k, seed, 0.5f);
	memset(h, 0, sizeof(*h));
	h->bytes = n * k * (dt == CK_F32 ? 4 : 2);
	h->data = xmalloc(h->bytes);
	for (uint64_t i = 0; i < n * k; i++) {
		if (dt == CK_F32)
			((float *)h->data)[i] = w[i];
		else
			((uint16_t *)h->data)[i] = dt == CK_F16 ? capy_f32_to_f16(w[i]) : capy_f32_to_bf16(w[i]);
	}
	free(w);
	h->ck.dtype = dt;
	h->ck.n = n;
	h->ck.k = k;
	h->ck.nparts = 0;
}

/* An NVFP4 record of nparts parts (rows[p] each): part p's weights scaled by (p + 1) so the
 * parts get different weight_scale_2, quantized with ModelOpt's rule; input_scale[p] as given
 * (0: dynamic). */
static void make_nvfp4(struct hw *h, uint64_t n, uint64_t k, uint32_t nparts, const uint64_t *rows,
		       const float *input_scale, uint64_t seed)
{
	struct capy_nvfp4_layout l;
	float *w = xmalloc(n * k * sizeof(float));
	uint64_t r0 = 0;

	memset(h, 0, sizeof(*h));
	CHECK(capy_nvfp4_layout(n, k, nparts, &l) == 0);
	test_fill(w, n * k, seed, 0.5f);
	h->bytes = l.slice_bytes;
	h->data = calloc(1, h->bytes);
	for (uint32_t p = 0; p < nparts; p++) {
		float amax = 0, s2;
		for (uint64_t i = r0 * k; i < (r0 + rows[p]) * k; i++) {
			w[i] *= (float)(p + 1);
			amax = fmaxf(amax, fabsf(w[i]));
		}
		s2 = capy_nvfp4_weight_scale2(amax);
		capy_nvfp4_quantize(w + r0 * k, rows[p], k, s2, (uint8_t *)h->data + l.codes_off + r0 * k / 2,
				    (uint8_t *)h->data + l.scales_off + r0 * k / 16);
		memcpy((uint8_t *)h->data + l.globals_off + 4 * p, &s2, 4);
		memcpy((uint8_t *)h->data + l.globals_off + 4 * (nparts + p), &input_scale[p], 4);
		h->ck.part_rows[p] = rows[p];
		h->ck.scale2[p] = s2;
		h->ck.input_scale[p] = input_scale[p];
		r0 += rows[p];
	}
	free(w);
	h->ck.dtype = CK_NVFP4;
	h->ck.n = n;
	h->ck.k = k;
	h->ck.nparts = nparts;
	h->ck.codes_off = l.codes_off;
	h->ck.scales_off = l.scales_off;
	h->ck.globals_off = l.globals_off;
}

/* y[m][n] = x W^T on the CPU (the record or plain data at host address data). */
static void cpu_linear(const struct ck_linear *ck, const void *data, const float *x, uint64_t m, float *y)
{
	struct capy_err err = { 0 };
	struct capy_linear w;
	struct capy_linear_input *in;
	void *ws;

	if (capy_linear_init(&w, capy_dt(ck->dtype), ck->n, ck->k, ck->nparts, ck->part_rows, data, &err) < 0) {
		fprintf(stderr, "FATAL capy_linear_init: %s\n", err.msg);
		exit(1);
	}
	ws = aligned_alloc(64, CAPY_ALIGN_UP(capy_linear_input_bytes(&w, m), 64));
	capy_linear_prepare(&w, x, m, ws, &in);
	capy_linear_rows(&w, in, y, 0, ck->n);
	free(ws);
}

/* Elements whose bits differ, both NaN counting as equal (*nan_bits counts NaNs whose bit
 * patterns differ). */
static size_t differ(const float *a, const float *b, size_t n, size_t *nan_bits)
{
	size_t d = 0;

	for (size_t i = 0; i < n; i++) {
		if (isnan(a[i]) && isnan(b[i]))
			*nan_bits += memcmp(&a[i], &b[i], 4) != 0;
		else
			d += memcmp(&a[i], &b[i], 4) != 0;
	}
	return d;
}

/* ck_linear on the GPU: the weights copied to a device buffer at byte offset off. */
static void gpu_linear(const struct hw *h, uint64_t off, const float *x, uint64_t m, float *y, int wsoff)
{
	uint8_t *dw = dev_from(NULL, h->bytes + off);
	float *dx = dev_from(x, m * h->ck.k * sizeof(float)), *dy = dev_from(NULL, m * h->ck.n * sizeof(float));
	struct ck_linear ck = h->ck;
	size_t wsb = ck_linear_ws_bytes(&ck, m);
	uint8_t *ws = wsb ? dev_from(NULL, wsb + (size_t)wsoff) : NULL;

	CUDA_OK(cudaMemcpy(dw + off, h->data, h->bytes, cudaMemcpyHostToDevice));
	ck.data = dw + off;
	CK_OK(ck_linear(&ck, dx, m, dy, ws ? ws + wsoff : NULL, NULL));
	dev_to(y, dy, m * h->ck.n * sizeof(float));
	CUDA_OK(cudaFree(dw));
	CUDA_OK(cudaFree(dx));
	CUDA_OK(cudaFree(dy));
	if (ws)
		CUDA_OK(cudaFree(ws));
}

/* One ck_linear case: the m-row result against the CPU, then rows 0, m/2 and m-1 computed
 * alone against their rows of the m-row result (bit for bit). */
static void linear_case(const struct hw *h, const char *what, uint64_t m, uint64_t off, bool bad_rows)
{
	const uint64_t n = h->ck.n, k = h->ck.k, seed = seed_next++;
	float *x = make_x(m, k, seed), *ref = xmalloc(m * n * 4), *y = xmalloc(m * n * 4), *y1 = xmalloc(n * 4);
	size_t nan_bits = 0, d = 0, inv = 0;
	double err = 0;
	const bool nv = h->ck.dtype == CK_NVFP4;

	if (bad_rows && m > 2) {
		x[1 * k + 3] = NAN;
		x[2 * k + k - 1] = -INFINITY;
	}
	cpu_linear(&h->ck, h->data, x, m, ref);
	gpu_linear(h, off, x, m, y, (int)(seed % 2) * 4);
	if (nv) {
		d = differ(y, ref, m * n, &nan_bits);
		CHECK_MSG(d == 0, "%s m=%" PRIu64 ": %zu of %" PRIu64 " elements differ", what, m, d, m * n);
		if (bad_rows && m > 2)
			for (uint64_t j = 0; j < n; j++)
				CHECK(isnan(y[1 * n + j]) && isnan(y[2 * n + j]));
	} else {
		err = rel_err(y, ref, m * n);
		CHECK_MSG(err < 1e-5, "%s m=%" PRIu64 ": rel_err %g", what, m, err);
	}
	if (m > 1) {
		const uint64_t rows[3] = { 0, m / 2, m - 1 };
		for (int q = 0; q < 3; q++) {
			gpu_linear(h, off, x + rows[q] * k, 1, y1, 0);
			inv += differ(y1, y + rows[q] * n, n, &nan_bits);
		}
		CHECK_MSG(inv == 0, "%s m=%" PRIu64 ": rows alone differ from rows in the batch (%zu elements)",
			  what, m, inv);
	}
	printf("linear %-5s %-28s n=%-5" PRIu64 " k=%-5" PRIu64 " m=%-3" PRIu64 " off=%" PRIu64 ": ", dt_name(h->ck.dtype),
	       what, n, k, m, off);
	if (nv)
		printf("%s", d ? "BITS DIFFER" : "bit-identical");
	else
		printf("rel_err %.3g", err);
	printf("%s%s\n", m > 1 ? (inv ? ", NOT batch-invariant" : ", batch-invariant") : "",
	       nan_bits ? " (NaN bit patterns differ)" : "");
	free(x);
	free(ref);
	free(y);
	free(y1);
}

static const uint64_t ms[] = { 1, 2, 3, 8, 17, 64, 300 };
#define NMS (sizeof(ms) / sizeof(ms[0]))

static void test_plain(void)
{
	/* the last three: 16 slices of k per tile in one block, then clusters of 8 and 5 blocks
	 * (64 and 40 slices, k_skinny_wide: the hyper-connection mixers' down, 324 x 10240) */
	static const uint64_t shapes[][2] = { { 64, 64 },     { 100, 67 },    { 96, 256 },  { 40, 136 },
					      { 1024, 2048 }, { 2048, 512 },  { 8200, 2048 }, { 32, 4096 },
					      { 16, 16384 },  { 324, 10240 } };

	for (int dt = CK_F32; dt <= CK_BF16; dt++)
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
			for (size_t i = 0; i < NMS; i++) {
				struct hw h;
				make_plain(&h, (enum ck_dtype)dt, shapes[s][0], shapes[s][1], seed_next++);
				/* an unaligned copy (scalar loads) once per shape */
				linear_case(&h, "plain", ms[i], i == 2 ? 4 : 0, false);
				free(h.data);
			}
}

static void test_nvfp4(void)
{
	static const uint64_t shapes[][2] = { { 64, 64 }, { 96, 128 }, { 100, 144 }, { 40, 256 },
					      { 1024, 2048 }, { 2048, 512 }, { 8200, 2048 } };

	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (int parts = 1; parts <= 3; parts++)
			for (int dyn = 0; dyn < 2; dyn++)
				for (size_t i = 0; i < NMS; i++) {
					const uint64_t n = shapes[s][0], k = shapes[s][1];
					uint64_t rows[3];
					float is[3];
					char what[64];
					struct hw h;
					if (parts == 3 && (i % 2 || n < 64))
						continue; /* 3 parts: a sample */
					rows[0] = parts == 1 ? n : n / 2;
					rows[1] = parts == 2 ? n - rows[0] : n / 4;
					rows[2] = n - rows[0] - rows[1];
					/* calibrated: about the amax of the activations over 6 * 448,
					 * different per part (the last part dynamic in the mixed
					 * case) */
					for (int p = 0; p < parts; p++)
						is[p] = dyn ? 0.0f : (8.0f / 2688.0f) * (float)(p + 1) * 0.75f;
					if (!dyn && parts == 3)
						is[2] = 0;
					make_nvfp4(&h, n, k, (uint32_t)parts, rows, is, seed_next++);
					snprintf(what, sizeof(what), "%d part%s %s%s", parts, parts > 1 ? "s" : "",
						 dyn ? "dynamic" : "calibrated", parts == 3 && !dyn ? "+dynamic" : "");
					/* records at 8- and 4-byte offsets (8- and 1-byte code loads) now
					 * and then; Inf/NaN rows in some cases */
					linear_case(&h, what, ms[i], i == 3 ? 8 : i == 4 ? 4 : 0, i == 2 || i == 5);
					free(h.data);
				}
}

/* --- router ---------------------------------------------------------------------------- */

/* libcore/backend/cpu/moe.c route(), for one row. */
static void ref_route(const float *l, uint64_t E, uint64_t k, bool norm, int32_t *ids, float *w)
{
	float *p = xmalloc(E * sizeof(float)), mx = -INFINITY, sum = 0, top = 0;

	for (uint64_t x = 0; x < E; x++)
		mx = fmaxf(mx, l[x]);
	for (uint64_t x = 0; x < E; x++) {
		p[x] = expf(l[x] - mx);
		sum += p[x];
	}
	for (uint64_t x = 0; x < E; x++)
		p[x] /= sum;
	for (uint64_t n = 0; n < k; n++) {
		uint64_t best = 0;
		bool found = false;
		for (uint64_t x = 0; x < E; x++)
			if (p[x] >= 0 && (!found || p[x] > p[best])) {
				best = x;
				found = true;
			}
		ids[n] = (int32_t)best;
		w[n] = p[best];
		top += p[best];
		p[best] = -1;
	}
	if (norm)
		for (uint64_t n = 0; n < k; n++)
			w[n] /= top;
	for (uint64_t a = 1; a < k; a++)
		for (uint64_t b = a; b > 0 && ids[b - 1] > ids[b]; b--) {
			int32_t ti = ids[b];
			float tw = w[b];
			ids[b] = ids[b - 1];
			w[b] = w[b - 1];
			ids[b - 1] = ti;
			w[b - 1] = tw;
		}
	free(p);
}

static void test_route(void)
{
	/* k > E (rounds with none left), k > 32 (the choices through global memory), E past
	 * 512 (32 values a lane) and past 1024 (the block kernel) */
	static const uint64_t cases[][3] = { { 1, 8, 2 },      { 5, 8, 1 },    { 3, 64, 8 },   { 1, 512, 10 },
					     { 17, 512, 10 },  { 64, 256, 8 }, { 300, 512, 10 }, { 2, 6, 9 },
					     { 3, 96, 40 },    { 2, 1000, 8 }, { 2, 2000, 8 } };

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
		for (int norm = 0; norm < 2; norm++) {
			const uint64_t T = cases[c][0], E = cases[c][1], k = cases[c][2];
			float *l = xmalloc(T * E * 4), *w = xmalloc(T * k * 4), *rw = xmalloc(T * k * 4), *dl, *dw;
			int32_t *ids = xmalloc(T * k * 4), *rids = xmalloc(T * k * 4), *dids;
			size_t bad_ids = 0;
			float werr = 0;

			test_fill(l, T * E, seed_next++, 4.0f);
			if (T > 1) /* ties: row 1 has equal pairs, the lower index must win */
				for (uint64_t x = 1; x < E; x += 2)
					l[E + x] = l[E + x - 1];
			for (uint64_t t = 0; t < T; t++)
				ref_route(l + t * E, E, k, norm, rids + t * k, rw + t * k);
			dl = dev_from(l, T * E * 4);
			dw = dev_from(NULL, T * k * 4);
			dids = dev_from(NULL, T * k * 4);
			CK_OK(ck_moe_route(dl, T, E, k, norm, dids, dw, NULL));
			dev_to(ids, dids, T * k * 4);
			dev_to(w, dw, T * k * 4);
			/* the warm-up experiment (CAPY_CUDA_WARM=1): the same bits */
			ck_set_route_warm(1);
			CUDA_OK(cudaMemset(dids, 0xff, T * k * 4));
			CUDA_OK(cudaMemset(dw, 0xff, T * k * 4));
			CK_OK(ck_moe_route(dl, T, E, k, norm, dids, dw, NULL));
			ck_set_route_warm(0);
			{
				int32_t *wids = xmalloc(T * k * 4);
				float *ww = xmalloc(T * k * 4);
				dev_to(wids, dids, T * k * 4);
				dev_to(ww, dw, T * k * 4);
				CHECK_MSG(!memcmp(wids, ids, T * k * 4) && !memcmp(ww, w, T * k * 4),
					  "route T=%" PRIu64 " E=%" PRIu64 " k=%" PRIu64 ": warmed, other bits", T, E, k);
				free(wids);
				free(ww);
			}
			for (uint64_t i = 0; i < T * k; i++) {
				bad_ids += ids[i] != rids[i];
				werr = fmaxf(werr, fabsf(w[i] - rw[i])); /* NaN: fmaxf ignores, checked below */
				CHECK(!isnan(w[i]));
			}
			CHECK_MSG(bad_ids == 0, "route T=%" PRIu64 " E=%" PRIu64 " k=%" PRIu64 ": %zu ids differ", T, E,
				  k, bad_ids);
			CHECK_MSG(werr <= 1e-6f, "route: weights differ by %g", (double)werr);
			printf("route T=%-3" PRIu64 " E=%-3" PRIu64 " k=%-2" PRIu64 " norm=%d: %s, max weight error %.3g\n", T,
			       E, k, norm, bad_ids ? "IDS DIFFER" : "ids equal", (double)werr);
			CUDA_OK(cudaFree(dl));
			CUDA_OK(cudaFree(dw));
			CUDA_OK(cudaFree(dids));
			free(l);
			free(w);
			free(rw);
			free(ids);
			free(rids);
		}
}

/* --- experts ----------------------------------------------------------------------------- */

static float silu_ref(float v)
{
	return v / (1.0f + expf(-v));
}

/* E experts' gate_up [2I, H] and down [H, I] records, one contiguous stack each (stride =
 * the record size). NVFP4: gate_up in two parts (gate, up) with their own scales; every
 * expert its own input scales (dyn: all 0). */
struct stack {
	struct hw *ex; /* [E] */
	uint64_t E, stride;
	uint8_t *dev;
	struct ck_expert_stack ck;
};

static void make_stack(struct stack *s, enum ck_dtype dt, uint64_t E, uint64_t n, uint64_t k, bool two_parts,
		       bool dyn)
{
	s->E = E;
	s->ex = xmalloc(E * sizeof(*s->ex));
	for (uint64_t x = 0; x < E; x++) {
		if (dt == CK_NVFP4) {
			const uint64_t rows[2] = { two_parts ? n / 2 : n, n / 2 };
			const float is[2] = { dyn ? 0.0f : 0.002f * (float)(x % 3 + 1),
					      dyn ? 0.0f : 0.0015f * (float)(x % 2 + 1) };
			make_nvfp4(&s->ex[x], n, k, two_parts ? 2 : 1, rows, is, seed_next++);
		} else {
			make_plain(&s->ex[x], dt, n, k, seed_next++);
		}
	}
	s->stride = s->ex[0].bytes;
	s->dev = dev_from(NULL, E * s->stride);
	for (uint64_t x = 0; x < E; x++)
		CUDA_OK(cudaMemcpy(s->dev + x * s->stride, s->ex[x].data, s->stride, cudaMemcpyHostToDevice));
	s->ck.first = s->ex[0].ck;
	s->ck.first.data = s->dev;
	s->ck.stride = s->stride;
	s->ck.E = E;
}

static void free_stack(struct stack *s)
{
	for (uint64_t x = 0; x < s->E; x++)
		free(s->ex[x].data);
	free(s->ex);
	CUDA_OK(cudaFree(s->dev));
}

/* The grouped experts (prefill rows): every row grouped, within tolerance of the CPU (the
 * same quantized operands, products exact, sums in fp32; a value that lands on a rounding
 * boundary of the next quantization may move by one FP4 step); then the even rows grouped
 * and the odd ones exact: the grouped rows bitwise equal to the all-grouped run (a slot's
 * result does not depend on the slots it shares tiles with), the exact rows bitwise equal to
 * the CPU. */
static void grouped_cases(const struct stack *gu, const struct stack *dn, const float *dx, uint64_t T, uint64_t k,
			  uint64_t H, const int32_t *dids, uint8_t *ws, const float *ref)
{
	const uint64_t S = T * k;
	uint8_t *flags = xmalloc(T), *dflags;
	float *all = xmalloc(S * H * 4), *mix = xmalloc(S * H * 4), *dout = dev_from(NULL, S * H * 4);
	size_t nan_bits = 0, dg = 0, de = 0;
	double err;

	memset(flags, 1, T);
	dflags = dev_from(flags, T);
	CK_OK(ck_moe_experts(&gu->ck, &dn->ck, dx, T, k, dids, dflags, T, dout, ws, NULL));
	dev_to(all, dout, S * H * 4);
	err = rel_err(all, ref, S * H);
	CHECK_MSG(err < 2e-3, "experts grouped: rel_err %g", err);
	for (uint64_t t = 0; t < T; t++)
		flags[t] = t % 2 == 0;
	CUDA_OK(cudaMemcpy(dflags, flags, T, cudaMemcpyHostToDevice));
	CK_OK(ck_moe_experts(&gu->ck, &dn->ck, dx, T, k, dids, dflags, (T + 1) / 2, dout, ws, NULL));
	dev_to(mix, dout, S * H * 4);
	for (uint64_t t = 0; t < T; t++) {
		if (flags[t])
			dg += differ(mix + t * k * H, all + t * k * H, k * H, &nan_bits);
		else
			de += differ(mix + t * k * H, ref + t * k * H, k * H, &nan_bits);
	}
	CHECK_MSG(dg == 0 && de == 0, "experts grouped/exact mix: %zu grouped, %zu exact elements differ", dg, de);
	printf("experts grouped T=%-3" PRIu64 " k=%-2" PRIu64 ": rel_err %.3g vs cpu; mixed with exact rows: %s\n", T, k,
	       err, dg || de ? "BITS DIFFER" : "grouped rows bitwise as alone, exact rows bit-identical to the cpu");
	CUDA_OK(cudaFree(dflags));
	CUDA_OK(cudaFree(dout));
	free(flags);
	free(all);
	free(mix);
}

/* Every slot computed as a miss by the CPU expert pool (3 threads, so both its whole-expert
 * and row-slice splits occur across the cases), the input quantized on the CPU into the GPU's
 * hand-over format: the number of elements that differ from the GPU's out. */
static size_t pool_differs(const struct stack *gu, const struct stack *dn, const float *x, uint64_t T, uint64_t k,
			   uint64_t H, const int32_t *ids, const float *gpu)
{
	const uint64_t S = T * k, E = gu->E;
	struct capy_linear *g = xmalloc(E * sizeof(*g)), *d = xmalloc(E * sizeof(*d));
	struct capy_cpu_experts_job *job = calloc(1, sizeof(*job));
	float *xs = xmalloc(S * H * 4), *out = xmalloc(S * H * 4), *gs = xmalloc(2 * S * 4);
	int8_t *qa = xmalloc(2 * S * H);
	int32_t *sa = xmalloc(2 * S * (H / 16) * 4);
	struct capy_cpu_experts *pool = NULL;
	struct capy_err err = { 0 };
	size_t diff = 0, nan_bits = 0;

	for (uint64_t e = 0; e < E; e++) {
		const struct ck_linear *a = &gu->ex[e].ck, *b = &dn->ex[e].ck;
		CHECK_EQ_INT(capy_linear_init(&g[e], capy_dt(a->dtype), a->n, a->k, a->nparts, a->part_rows,
					      gu->ex[e].data, &err), 0);
		CHECK_EQ_INT(capy_linear_init(&d[e], capy_dt(b->dtype), b->n, b->k, b->nparts, b->part_rows,
					      dn->ex[e].data, &err), 0);
	}
	for (uint64_t s = 0; s < S; s++) {
		void *ws = aligned_alloc(64, CAPY_ALIGN_UP(capy_linear_input_bytes(&g[ids[s]], 1), 64));
		int8_t q[2 * 4096];
		int32_t sc[2 * 256];
		float f[2];
		memcpy(xs + s * H, x + (s / k) * H, H * 4);
		capy_linear_quantize_rows(&g[ids[s]], xs + s * H, 1, ws, q, sc, f, 1);
		for (uint32_t p = 0; p < g[ids[s]].nparts; p++) {
			memcpy(qa + (p * S + s) * H, q + p * H, H);
			memcpy(sa + (p * S + s) * (H / 16), sc + p * (H / 16), (H / 16) * 4);
			gs[p * S + s] = f[p];
		}
		free(ws);
	}
	*job = (struct capy_cpu_experts_job){ .gate_up = g, .down = d, .n_experts = (uint32_t)E,
					      .n_misses = (uint32_t)S, .expert = ids, .out = out,
					      .in = { qa, sa, gs, S } };
	CHECK_MSG(capy_cpu_experts_new(&pool, &(struct capy_cpu_experts_opts){ .threads = 3, .no_pin = true },
				       &err) == 0, "%s", err.msg);
	if (pool) {
		CHECK_MSG(capy_cpu_experts_submit(pool, job, &err) == 0, "%s", err.msg);
		diff = differ(out, gpu, S * H, &nan_bits);
		capy_cpu_experts_forget(pool, job);
		capy_cpu_experts_free(pool);
	}
	free(g);
	free(d);
	free(job);
	free(xs);
	free(out);
	free(gs);
	free(qa);
	free(sa);
	return diff;
}

static void experts_case(enum ck_dtype dt, uint64_t E, uint64_t H, uint64_t I, uint64_t T, uint64_t k, bool dyn)
{
	const uint64_t S = T * k;
	struct stack gu, dn;
	float *x = make_x(T, H, seed_next++), *out = xmalloc(S * H * 4), *ref = xmalloc(S * H * 4);
	float *act = xmalloc(2 * I * 4), *dx, *dout;
	int32_t *ids = xmalloc(S * 4), *dids;
	size_t wsb, d = 0, nan_bits = 0;
	uint8_t *ws;
	double err = 0;

	make_stack(&gu, dt, E, 2 * I, H, true, dyn);
	make_stack(&dn, dt, E, H, I, false, dyn);
	/* k distinct experts per row, ascending (as the router gives them) */
	for (uint64_t t = 0; t < T; t++) {
		uint64_t st = seed_next++ * 0x9e3779b97f4a7c15ull + 7, n = 0;
		for (uint64_t x0 = 0; x0 < E && n < k; x0++) {
			st ^= st << 13;
			st ^= st >> 7;
			st ^= st << 17;
			if ((st % (E - x0)) < k - n)
				ids[t * k + n++] = (int32_t)x0;
		}
	}
	for (uint64_t s = 0; s < S; s++) {
		const int32_t e = ids[s];
		cpu_linear(&gu.ex[e].ck, gu.ex[e].data, x + (s / k) * H, 1, act);
		for (uint64_t i = 0; i < I; i++)
			act[i] = silu_ref(act[i]) * act[I + i];
		cpu_linear(&dn.ex[e].ck, dn.ex[e].data, act, 1, ref + s * H);
	}
	dx = dev_from(x, T * H * 4);
	dout = dev_from(NULL, S * H * 4);
	dids = dev_from(ids, S * 4);
	wsb = ck_moe_ws_bytes(&gu.ck, &dn.ck, S);
	ws = dev_from(NULL, wsb);
	CK_OK(ck_moe_experts(&gu.ck, &dn.ck, dx, T, k, dids, NULL, 0, dout, ws, NULL));
	dev_to(out, dout, S * H * 4);
	if (dt == CK_NVFP4) {
		d = differ(out, ref, S * H, &nan_bits);
		CHECK_MSG(d == 0, "experts NVFP4: %zu of %" PRIu64 " elements differ", d, S * H);
		size_t dp = pool_differs(&gu, &dn, x, T, k, H, ids, out);
		CHECK_MSG(dp == 0, "experts NVFP4: the CPU expert pool differs from the GPU in %zu of %" PRIu64
			  " elements", dp, S * H);
		d += dp;
		grouped_cases(&gu, &dn, dx, T, k, H, dids, ws, ref);
	} else {
		err = rel_err(out, ref, S * H);
		CHECK_MSG(err < 1e-5, "experts %s: rel_err %g", dt_name(dt), err);
	}
	printf("experts %-5s E=%-3" PRIu64 " H=%-5" PRIu64 " I=%-4" PRIu64 " T=%-3" PRIu64 " k=%-2" PRIu64 " %s: ",
	       dt_name(dt), E, H, I, T, k, dt == CK_NVFP4 ? (dyn ? "dynamic" : "calibrated") : "");
	if (dt == CK_NVFP4)
		printf("%s\n", d ? "BITS DIFFER" : "bit-identical per slot, and to the CPU expert pool");
	else
		printf("rel_err %.3g\n", err);
	CUDA_OK(cudaFree(dx));
	CUDA_OK(cudaFree(dout));
	CUDA_OK(cudaFree(dids));
	CUDA_OK(cudaFree(ws));
	free_stack(&gu);
	free_stack(&dn);
	free(x);
	free(out);
	free(ref);
	free(act);
	free(ids);
}

static void test_experts(void)
{
	experts_case(CK_NVFP4, 8, 64, 32, 1, 2, false);
	experts_case(CK_NVFP4, 8, 64, 32, 3, 4, true);
	experts_case(CK_NVFP4, 16, 256, 128, 17, 8, false);
	experts_case(CK_NVFP4, 16, 2048, 512, 1, 10, false);
	experts_case(CK_NVFP4, 16, 2048, 512, 1, 10, true);
	experts_case(CK_NVFP4, 16, 2048, 512, 7, 10, false);
	/* Flash-Next's hidden size: three code loads a lane in the fused decode kernel, the last
	 * not every lane's; and rows of 48, which that kernel leaves to the two-kernel form */
	experts_case(CK_NVFP4, 16, 2560, 512, 1, 10, true);
	experts_case(CK_NVFP4, 8, 48, 48, 2, 2, false);
	/* 64 slots: gate_up past the fused kernel's block limit (both stages in two kernels) */
	experts_case(CK_NVFP4, 16, 2048, 512, 8, 8, false);
	/* enough slots per expert for whole and partial tiles of the grouped kernel */
	experts_case(CK_NVFP4, 4, 256, 96, 300, 2, false);
	experts_case(CK_NVFP4, 32, 2048, 512, 64, 8, true);
	experts_case(CK_BF16, 8, 64, 32, 1, 2, false);
	experts_case(CK_BF16, 16, 256, 128, 17, 8, false);
	experts_case(CK_BF16, 16, 2048, 512, 3, 10, false);
}

/* --- combine ----------------------------------------------------------------------------- */

static void test_combine(void)
{
	static const uint64_t cases[][3] = { { 1, 2, 64 }, { 3, 8, 256 }, { 17, 10, 2048 }, { 64, 10, 2048 } };

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		const uint64_t T = cases[c][0], k = cases[c][1], H = cases[c][2];
		float *mo = xmalloc(T * k * H * 4), *w = xmalloc(T * k * 4), *sh = xmalloc(T * H * 4),
		      *g = xmalloc(T * 4), *ref = xmalloc(T * H * 4), *out = xmalloc(T * H * 4);
		float *dmo, *dw, *dsh, *dg, *dout;
		size_t bits;
		double err;

		test_fill(mo, T * k * H, seed_next++, 1.0f);
		test_fill(w, T * k, seed_next++, 0.5f);
		test_fill(sh, T * H, seed_next++, 1.0f);
		test_fill(g, T, seed_next++, 4.0f);
		for (uint64_t t = 0; t < T; t++) {
			float gg = 1.0f / (1.0f + expf(-g[t]));
			for (uint64_t i = 0; i < H; i++) {
				float o = 0;
				for (uint64_t j = 0; j < k; j++)
					o += mo[(t * k + j) * H + i] * w[t * k + j];
				ref[t * H + i] = o + gg * sh[t * H + i];
			}
		}
		dmo = dev_from(mo, T * k * H * 4);
		dw = dev_from(w, T * k * 4);
		dsh = dev_from(sh, T * H * 4);
		dg = dev_from(g, T * 4);
		dout = dev_from(NULL, T * H * 4);
		CK_OK(ck_moe_combine(dmo, dw, dsh, dg, T, k, H, dout, NULL));
		dev_to(out, dout, T * H * 4);
		err = rel_err(out, ref, T * H);
		bits = bits_differ(out, ref, T * H);
		CHECK_MSG(err < 1e-6, "combine: rel_err %g", err);
		printf("combine T=%-3" PRIu64 " k=%-2" PRIu64 " H=%-5" PRIu64 ": rel_err %.3g, %zu elements not bit-identical "
		       "(expf)\n", T, k, H, err, bits);
		CUDA_OK(cudaFree(dmo));
		CUDA_OK(cudaFree(dw));
		CUDA_OK(cudaFree(dsh));
		CUDA_OK(cudaFree(dg));
		CUDA_OK(cudaFree(dout));
		free(mo);
		free(w);
		free(sh);
		free(g);
		free(ref);
		free(out);
	}
}

/* ck_linear_multi: matrices of different heights over one input (the fused decode
 * projections) give every element the bits ck_linear gives it alone; mixed dtypes fall back
 * to one launch each. */
static void multi_case(enum ck_dtype dt0, enum ck_dtype dt3, uint64_t k, uint64_t m)
{
	const uint64_t ns[4] = { 300, 32, 1, 77 };
	struct hw h[4];
	const struct ck_linear *w[4];
	struct ck_linear ck[4];
	float *x = make_x(m, k, seed_next++), *dy[4], *y = NULL, *one = NULL;
	uint8_t *dw[4];
	size_t bad = 0;

	for (int j = 0; j < 4; j++) {
		make_plain(&h[j], j == 3 ? dt3 : dt0, ns[j], k, seed_next++);
		dw[j] = dev_from(h[j].data, h[j].bytes);
		ck[j] = h[j].ck;
		ck[j].data = dw[j];
		w[j] = &ck[j];
		dy[j] = dev_from(NULL, m * ns[j] * sizeof(float));
	}
	float *dx = dev_from(x, m * k * sizeof(float));
	CK_OK(ck_linear_multi(w, 4, dx, m, dy, NULL, NULL));
	for (int j = 0; j < 4; j++) {
		float *d1 = dev_from(NULL, m * ns[j] * sizeof(float));
		y = xmalloc(m * ns[j] * 4);
		one = xmalloc(m * ns[j] * 4);
		CK_OK(ck_linear(&ck[j], dx, m, d1, NULL, NULL));
		dev_to(y, dy[j], m * ns[j] * 4);
		dev_to(one, d1, m * ns[j] * 4);
		bad += bits_differ(y, one, m * ns[j]);
		CUDA_OK(cudaFree(d1));
		CUDA_OK(cudaFree(dy[j]));
		CUDA_OK(cudaFree(dw[j]));
		free(y);
		free(one);
		free(h[j].data);
	}
	printf("multi %s/%s k %4" PRIu64 " m %3" PRIu64 ": %zu elements differ from single launches\n", dt_name(dt0),
	       dt_name(dt3), k, m, bad);
	CHECK_MSG(bad == 0, "ck_linear_multi %s/%s k %" PRIu64 " m %" PRIu64 ": %zu elements differ", dt_name(dt0),
		  dt_name(dt3), k, m, bad);
	CUDA_OK(cudaFree(dx));
	free(x);
}

static void test_multi(void)
{
	multi_case(CK_BF16, CK_BF16, 2048, 1);
	multi_case(CK_BF16, CK_BF16, 2048, 8);
	multi_case(CK_BF16, CK_BF16, 136, 17);
	multi_case(CK_F32, CK_F32, 512, 3);
	multi_case(CK_BF16, CK_F16, 256, 5);
}

/* The hyper-connection mixer's decode launches: ck_linear_multi_ep (down and inject with their
 * activations in the GEMV's epilogue) against ck_linear_multi then the activations' own
 * kernels, and ck_hc_add_rmsnorm against ck_hc_add_injected then ck_rmsnorm: bit for bit.
 * Flash-Next's shapes (hidden 2560, 4 streams, low rank 320: the wide kernel) and a narrow
 * one (one block a tile), at 1, 3 and 8 rows (and 17: two groups of 8 a block). */
static void hc_ep_case(uint64_t H, uint64_t hc, uint64_t r, uint64_t m)
{
	const uint64_t k = H * hc, ns[2] = { r, hc };
	struct hw h[2];
	struct ck_linear ck[2];
	const struct ck_linear *w[2] = { &ck[0], &ck[1] };
	const enum ck_epilogue ep[2] = { CK_EP_HC_LOW, CK_EP_HC_INJECT };
	float *x = make_x(m, k, seed_next++), *dx = dev_from(x, m * k * 4), *a[2], *b[2], *ha, *hb;
	uint8_t *dw[2];
	size_t bad = 0;

	for (int j = 0; j < 2; j++) {
		make_plain(&h[j], CK_BF16, ns[j], k, seed_next++);
		dw[j] = dev_from(h[j].data, h[j].bytes);
		ck[j] = h[j].ck;
		ck[j].data = dw[j];
		a[j] = dev_from(NULL, m * ns[j] * 4);
		b[j] = dev_from(NULL, m * ns[j] * 4);
	}
	CHECK(ck_linear_multi_ep_ok(w, 2, dx, m));
	CHECK(!ck_linear_multi_ep_ok(w, 2, dx, 1024)); /* prompt rows: the tiled kernel, no epilogue */
	CK_OK(ck_linear_multi_ep(w, 2, dx, m, a, ep, (float)hc, NULL));
	CK_OK(ck_linear_multi(w, 2, dx, m, b, NULL, NULL));
	CK_OK(ck_hc_low_act(b[0], m * r, (float)hc, NULL));
	CK_OK(ck_hc_inject_act(b[1], m * hc, (float)hc, NULL));
	for (int j = 0; j < 2; j++) {
		ha = xmalloc(m * ns[j] * 4);
		hb = xmalloc(m * ns[j] * 4);
		dev_to(ha, a[j], m * ns[j] * 4);
		dev_to(hb, b[j], m * ns[j] * 4);
		bad += bits_differ(ha, hb, m * ns[j]);
		free(ha);
		free(hb);
		CUDA_OK(cudaFree(a[j]));
		CUDA_OK(cudaFree(b[j]));
		CUDA_OK(cudaFree(dw[j]));
		free(h[j].data);
	}
	printf("hc epilogue k %5" PRIu64 " low rank %3" PRIu64 " m %2" PRIu64 ": %zu elements differ from the separate kernels\n",
	       k, r, m, bad);
	CHECK_MSG(bad == 0, "ck_linear_multi_ep k %" PRIu64 " m %" PRIu64 ": %zu elements differ", k, m, bad);

	/* the injection with the next mixer's norm */
	float *out = make_x(m, H, seed_next++), *inj = make_x(m, hc, seed_next++), *wn = make_x(1, k, seed_next++);
	float *dX1 = dev_from(x, m * k * 4), *dX2 = dev_from(x, m * k * 4), *dout = dev_from(out, m * H * 4);
	float *dinj = dev_from(inj, m * hc * 4), *dw1 = dev_from(wn, k * 4), *y1 = dev_from(NULL, m * k * 4);
	float *y2 = dev_from(NULL, m * k * 4), *hx[2], *hy[2];
	CK_OK(ck_hc_add_rmsnorm(dX1, dout, dinj, dw1, y1, m, H, hc, 1e-6f, NULL));
	CK_OK(ck_hc_add_injected(dX2, dout, dinj, m, H, hc, NULL));
	CK_OK(ck_rmsnorm(dX2, k, dw1, k, y2, k, m, k, H, 1e-6f, NULL));
	bad = 0;
	for (int j = 0; j < 2; j++) {
		hx[j] = xmalloc(m * k * 4);
		hy[j] = xmalloc(m * k * 4);
		dev_to(hx[j], j ? dX2 : dX1, m * k * 4);
		dev_to(hy[j], j ? y2 : y1, m * k * 4);
	}
	bad = bits_differ(hx[0], hx[1], m * k) + bits_differ(hy[0], hy[1], m * k);
	printf("hc injection + norm H %" PRIu64 " x %" PRIu64 " m %2" PRIu64 ": %zu elements differ from the separate kernels\n", H,
	       hc, m, bad);
	CHECK_MSG(bad == 0, "ck_hc_add_rmsnorm m %" PRIu64 ": %zu elements differ", m, bad);
	for (int j = 0; j < 2; j++) {
		free(hx[j]);
		free(hy[j]);
	}
	void *dev[] = { dx, dX1, dX2, dout, dinj, dw1, y1, y2 };
	for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
		CUDA_OK(cudaFree(dev[i]));
	free(x);
	free(out);
	free(inj);
	free(wn);
}

static void test_hc(void)
{
	static const uint64_t ms_hc[] = { 1, 3, 8, 17 };

	for (size_t i = 0; i < sizeof(ms_hc) / sizeof(ms_hc[0]); i++) {
		hc_ep_case(2560, 4, 320, ms_hc[i]);
		hc_ep_case(128, 4, 48, ms_hc[i]);
	}
}

/* ck_gemm (cuBLASLt, the prompt rows of BF16 linears): against the CPU within 2e-5 (cuBLASLt's
 * sums are less exact than ck_linear's: 1.1e-5 at k = 4096 on these inputs, 2-4e-6 below), the
 * same bits when run again, and the rows of one GEMM the same bits inside a GEMM of twice as
 * many rows (one algorithm per matrix shape). */
static void test_gemm(void)
{
	static const uint64_t shapes[][2] = { { 64, 64 }, { 1024, 2048 }, { 12352, 2048 }, { 2048, 4096 }, { 2560, 512 } };
	static const uint64_t gm[] = { 16, 17, 300, 2048 };
	struct ck_blas *b = NULL;
	char why[256];

	CHECK_MSG(ck_blas_open(&b, 4096, why, sizeof(why)) == 0, "ck_blas_open: %s", why);
	if (!b)
		return;
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (size_t i = 0; i < sizeof(gm) / sizeof(gm[0]); i++) {
			const uint64_t n = shapes[s][0], k = shapes[s][1], m = gm[i], seed = seed_next++;
			struct hw h;
			make_plain(&h, CK_BF16, n, k, seed);
			float *x = make_x(2 * m, k, seed), *ref = xmalloc(m * n * 4), *y = xmalloc(2 * m * n * 4),
			      *y2 = xmalloc(2 * m * n * 4);
			uint8_t *dw = dev_from(h.data, h.bytes), *ws = dev_from(NULL, ck_gemm_ws_bytes(k, 2 * m));
			float *dx = dev_from(x, 2 * m * k * 4), *dy = dev_from(NULL, 2 * m * n * 4);
			struct ck_linear ck = h.ck;
			size_t nan_bits = 0, again, wider;

			ck.data = dw;
			CHECK(ck_gemm_supported(&ck) == (n % 4 == 0 && k % 8 == 0));
			cpu_linear(&h.ck, h.data, x, m, ref);
			CK_OK(ck_gemm(b, &ck, dx, m, dy, n, ws, NULL));
			dev_to(y, dy, m * n * 4);
			CK_OK(ck_gemm(b, &ck, dx, m, dy, n, ws, NULL));
			dev_to(y2, dy, m * n * 4);
			again = differ(y, y2, m * n, &nan_bits);
			CK_OK(ck_gemm(b, &ck, dx, 2 * m, dy, n, ws, NULL));
			dev_to(y2, dy, 2 * m * n * 4);
			wider = differ(y, y2, m * n, &nan_bits);
			const double err = rel_err(y, ref, m * n);
			printf("gemm  bf16  n=%-5" PRIu64 " k=%-5" PRIu64 " m=%-4" PRIu64 ": rel_err %.3g, %s, %s\n", n, k, m,
			       err, again ? "NOT deterministic" : "deterministic",
			       wider ? "rows differ inside a wider GEMM" : "rows the same inside a wider GEMM");
			CHECK_MSG(err < 2e-5, "gemm n=%" PRIu64 " k=%" PRIu64 " m=%" PRIu64 ": rel_err %g", n, k, m, err);
			CHECK_MSG(wider == 0, "gemm n=%" PRIu64 " k=%" PRIu64 " m=%" PRIu64 ": %zu elements differ in a wider GEMM",
				  n, k, m, wider);
			CHECK_MSG(again == 0, "gemm n=%" PRIu64 " k=%" PRIu64 " m=%" PRIu64 ": %zu elements differ run to run",
				  n, k, m, again);
			CUDA_OK(cudaFree(dw));
			CUDA_OK(cudaFree(ws));
			CUDA_OK(cudaFree(dx));
			CUDA_OK(cudaFree(dy));
			free(h.data);
			free(x);
			free(ref);
			free(y);
			free(y2);
		}
	ck_blas_close(b);
}

/* Row list `list` of an n-row matrix into rows (n + 1 room); returns its length: 0 every row
 * from the last, 1 every third, 2 a scattered fifth with a repeat, 3 one row, 4 the last five. */
static uint64_t row_list(int list, uint64_t n, int32_t *rows)
{
	uint64_t nr = 0;

	switch (list) {
	case 0:
		for (uint64_t i = 0; i < n; i++)
			rows[nr++] = (int32_t)(n - 1 - i);
		break;
	case 1:
		for (uint64_t r = 0; r < n; r += 3)
			rows[nr++] = (int32_t)r;
		break;
	case 2:
		for (uint64_t i = 0; i <= n / 5; i++)
			rows[nr++] = (int32_t)((i * 7919 + 13) % n);
		rows[nr++] = rows[0];
		break;
	case 3:
		rows[nr++] = (int32_t)(n / 2);
		break;
	default:
		for (uint64_t i = 0; i < 5 && i < n; i++)
			rows[nr++] = (int32_t)(n - 5 + i);
	}
	return nr;
}

/* ck_linear_rows: lists of rows of BF16 matrices whose k slices per tile span 1 to 16 (576 x 64:
 * 1, 32000 x 512: 2, 1024 x 2048 and 8200 x 2048: 8, 64 x 4096: 16), each element bit for bit
 * the element of ck_linear's whole product; F32 and unaligned weights, and matrices whose
 * slices take clusters of blocks (16 x 16384: 64), are refused (the caller computes the whole
 * product there). */
static void test_rows(void)
{
	static const uint64_t shapes[][2] = { { 576, 64 }, { 32000, 512 }, { 1024, 2048 }, { 8200, 2048 }, { 64, 4096 },
					      { 16, 16384 } };
	static const uint64_t rms[] = { 1, 3, 17 };

	for (size_t sh = 0; sh < sizeof(shapes) / sizeof(shapes[0]); sh++) {
		const uint64_t n = shapes[sh][0], k = shapes[sh][1];
		struct hw h;
		make_plain(&h, CK_BF16, n, k, seed_next++);
		int32_t *rows = xmalloc((n + 1) * sizeof(int32_t));
		uint8_t *dw = dev_from(h.data, h.bytes);
		struct ck_linear ck = h.ck;
		ck.data = dw;
		for (size_t mi = 0; mi < sizeof(rms) / sizeof(rms[0]); mi++) {
			const uint64_t m = rms[mi];
			float *x = make_x(m, k, seed_next++), *full = xmalloc(m * n * 4), *y = xmalloc(m * (n + 1) * 4);
			float *dx = dev_from(x, m * k * 4), *dfull = dev_from(NULL, m * n * 4);
			float *dy = dev_from(NULL, m * (n + 1) * 4);
			size_t bad = 0;
			CK_OK(ck_linear(&ck, dx, m, dfull, NULL, NULL));
			dev_to(full, dfull, m * n * 4);
			const bool wide = n == 16 && k == 16384;
			CHECK(ck_linear_rows_ok(&ck, dx) == !wide);
			for (int list = 0; list < (wide ? 0 : 5); list++) {
				const uint64_t nr = row_list(list, n, rows);
				int32_t *drows = dev_from(rows, nr * 4);
				CK_OK(ck_linear_rows(&ck, dx, m, drows, nr, dy, nr, NULL));
				dev_to(y, dy, m * nr * 4);
				for (uint64_t t = 0; t < m; t++)
					for (uint64_t i = 0; i < nr; i++)
						bad += memcmp(&y[t * nr + i], &full[t * n + (uint64_t)rows[i]], 4) != 0;
				CUDA_OK(cudaFree(drows));
			}
			printf("rows  bf16  n=%-5" PRIu64 " k=%-5" PRIu64 " m=%-3" PRIu64 ": %zu elements of 5 row lists differ "
			       "from ck_linear's\n", n, k, m, bad);
			CHECK_MSG(bad == 0, "ck_linear_rows n=%" PRIu64 " k=%" PRIu64 " m=%" PRIu64 ": %zu elements differ", n, k,
				  m, bad);
			CUDA_OK(cudaFree(dx));
			CUDA_OK(cudaFree(dfull));
			CUDA_OK(cudaFree(dy));
			free(x);
			free(full);
			free(y);
		}
		ck.data = dw + 2;
		CHECK(!ck_linear_rows_ok(&ck, (const float *)dw));
		ck.data = dw;
		ck.dtype = CK_F32;
		CHECK(!ck_linear_rows_ok(&ck, (const float *)dw));
		CUDA_OK(cudaFree(dw));
		free(rows);
		free(h.data);
	}
}

int main(void)
{
	if (!test_gpu_init()) {
		fprintf(stderr, "u-cuda-linear: no usable GPU\n");
		return 1;
	}
	RUN(test_plain);
	RUN(test_nvfp4);
	RUN(test_route);
	RUN(test_experts);
	RUN(test_combine);
	RUN(test_multi);
	RUN(test_hc);
	RUN(test_gemm);
	RUN(test_rows);
	return test_summary();
}
