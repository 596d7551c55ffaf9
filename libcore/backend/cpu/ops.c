/* ops.c - element-wise and row operations of the forward pass, and the helpers that
 * spread work over the engine's threads. All in fp32, each with a fixed order. */
#include "cpu-impl.h"
#include "../../cpu/expert.h"
#include "../../quant/floats.h"

#include <math.h>

struct par_ctx {
	uint64_t n;
	range_fn fn;
	void *ctx;
};

static void par_worker(void *p, int ith, int nth)
{
	struct par_ctx *c = p;
	uint64_t b, e;

	capy_slice(c->n, ith, nth, &b, &e);
	if (b < e)
		c->fn(c->ctx, b, e, ith);
}

void par_for(struct cpu_engine *e, uint64_t n, range_fn fn, void *ctx)
{
	par_for_work(e, n, UINT64_MAX, fn, ctx);
}

void par_for_work(struct cpu_engine *e, uint64_t n, uint64_t work, range_fn fn, void *ctx)
{
	struct par_ctx c = { n, fn, ctx };

	if (n == 0)
		return;
	if (e->nth == 1 || n == 1 || work < CPU_SMALL_WORK) {
		fn(ctx, 0, n, 0);
		return;
	}
	capy_pool_run(e->pool, par_worker, &c);
}

struct lin_ctx {
	const struct capy_linear *w;
	const struct capy_linear_input *in;
	float *y;
};

static void lin_rows(void *p, uint64_t b, uint64_t e, int ith)
{
	(void)ith;
	struct lin_ctx *c = p;
	capy_linear_rows(c->w, c->in, c->y, b, e);
}

void par_linear(struct cpu_engine *e, const struct capy_linear *w, const float *x, uint64_t m, float *y)
{
	struct lin_ctx c = { w, NULL, y };

	if (capy_linear_input_bytes(w, m) > e->s.lin_ws_bytes)
		CAPY_BUG("linear workspace too small: %zu > %zu", capy_linear_input_bytes(w, m), e->s.lin_ws_bytes);
	capy_linear_prepare(w, x, m, e->s.lin_ws, (struct capy_linear_input **)&c.in);
	par_for_work(e, w->n, w->n * w->k * m, lin_rows, &c);
}

struct lin_ids_ctx {
	const struct capy_linear *w;
	const struct capy_linear_input *in;
	const int32_t *ids;
	float *y;
};

/* Runs of consecutive ids go to the kernel together (a shortlist is mostly long runs). */
static void lin_ids_rows(void *p, uint64_t b, uint64_t e, int ith)
{
	(void)ith;
	struct lin_ids_ctx *c = p;
	for (uint64_t i = b; i < e;) {
		uint64_t j = i + 1;
		while (j < e && c->ids[j] == c->ids[j - 1] + 1)
			j++;
		capy_linear_rows(c->w, c->in, c->y, (uint64_t)c->ids[i], (uint64_t)c->ids[j - 1] + 1);
		i = j;
	}
}

void par_linear_ids(struct cpu_engine *e, const struct capy_linear *w, const float *x, const int32_t *ids,
		    uint64_t n_ids, float *y)
{
	struct lin_ids_ctx c = { w, NULL, ids, y };

	capy_linear_prepare(w, x, 1, e->s.lin_ws, (struct capy_linear_input **)&c.in);
	par_for_work(e, n_ids, n_ids * w->k, lin_ids_rows, &c);
}

void rmsnorm_1p(const float *x, const float *w1p, float *y, uint64_t n, uint64_t group, float eps)
{
	for (uint64_t g0 = 0; g0 < n; g0 += group) {
		float ss = 0, r;
		for (uint64_t i = g0; i < g0 + group; i++)
			ss += x[i] * x[i];
		r = 1.0f / sqrtf(ss / (float)group + eps);
		for (uint64_t i = g0; i < g0 + group; i++)
			y[i] = (x[i] * r) * w1p[i];
	}
}

float silu(float x)
{
	return capy_silu(x);
}

float sigmoidf_(float x)
{
	return 1.0f / (1.0f + expf(-x));
}

float softplusf_(float x)
{
	/* torch's softplus (beta 1, threshold 20): linear above the threshold. */
	return x > 20.0f ? x : log1pf(expf(x));
}

/* NeoX-style rotation of the first `rot` dims: pairs (i, i + rot/2). */
void rope_apply(const struct cpu_engine *e, float *v, uint64_t pos)
{
	uint64_t half = e->rot / 2;

	for (uint64_t i = 0; i < half; i++) {
		float ang = (float)pos * e->rope_inv_freq[i];
		float c = cosf(ang), s = sinf(ang);
		float x1 = v[i], x2 = v[i + half];
		v[i] = x1 * c - x2 * s;
		v[i + half] = x2 * c + x1 * s;
	}
}

void to_f32(const void *p, enum capy_dtype dt, uint64_t n, float *out)
{
	if (capy_floats_to_f32(p, dt, n, out) < 0)
		CAPY_BUG("to_f32 of %s", capy_dtype_name(dt));
}
