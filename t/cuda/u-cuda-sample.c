/* u-cuda-sample.c - the device's half of sampling (kernels/sample.cu) against the host's
 * sampler on whole rows: for greedy rows the same index as capy_sampler_next, for top-k rows
 * the same tokens, draw after draw, from the device's candidate list as from the whole row;
 * on a 248k vocabulary and small ones (some whose rows are not 16-byte aligned), continuous
 * logits, heavy ties, rows of one value, NaN and infinities, k larger than the row; rows with
 * ties beyond the list reported. With a token mask (structured output): the same tokens as
 * capy_sampler_next_masked on the same logits, for sparse masks, a single allowed id (first
 * or last), allowed ids whose logits are all -inf or NaN, and a range at the end of the
 * vocabulary. */
#include "test.h"

#include "cuda-test.h"
#include "constrain/mask.h"
#include "sample/sample.h"

#include <string.h>

enum shape { CONTINUOUS, TIES, FLAT, SPECIAL };

static void fill(float *l, uint64_t V, enum shape sh, uint64_t *seed)
{
	for (uint64_t i = 0; i < V; i++) {
		float r = test_rand(seed);
		switch (sh) {
		case CONTINUOUS:
			l[i] = 6.0f * r + (i % 997 == 0 ? 12.0f : 0.0f);
			break;
		case TIES: /* 8000 distinct values: a few tokens each */
			l[i] = (float)(int)(4000.0f * r) * 0.01f;
			break;
		case FLAT:
			l[i] = 1.5f;
			break;
		case SPECIAL:
			l[i] = i % 5 == 1 ? NAN : i % 7 == 3 ? -INFINITY : 3.0f * r;
			break;
		}
	}
}

/* Token masks: none, one id in 8 (pseudo-random), one id (the last), the ids 3 mod 7 (in a
 * SPECIAL row: -inf or NaN, nothing finite), the last 300 ids; and the first id allowed when
 * its logit is NaN (SPECIAL: ids 1 mod 5) along with a few finite ones. */
enum mask_kind { M_NONE, M_SPARSE, M_SINGLE, M_NOT_FINITE, M_TAIL, M_NAN_FIRST, M_KINDS };

static void fill_mask(uint32_t *bits, uint64_t V, enum mask_kind mk, uint64_t *seed)
{
	memset(bits, 0, (V + 31) / 32 * 4);
	for (uint64_t i = 0; i < V; i++) {
		bool on = false;
		switch (mk) {
		case M_NONE:
			on = true;
			break;
		case M_SPARSE:
			on = test_rand(seed) < 0.125f;
			break;
		case M_SINGLE:
			on = i == V - 1;
			break;
		case M_NOT_FINITE:
			on = i % 7 == 3;
			break;
		case M_TAIL:
			on = i + 300 >= V;
			break;
		case M_NAN_FIRST:
			on = i == 1 || i % 97 == 0;
			break;
		case M_KINDS:
			break;
		}
		if (on)
			bits[i / 32] |= 1u << (i % 32);
	}
	if (mk == M_NAN_FIRST)
		bits[0] &= ~1u; /* id 0 (97 * 0) out: the lowest allowed id is 1 */
}

struct rowcase {
	uint64_t V;
	enum shape sh;
	struct capy_sampler_params p;
	enum mask_kind mk;
};

static void run_case(const struct rowcase *rc, int draws)
{
	const uint64_t V = rc->V;
	float *l = malloc(V * sizeof(float)), *x = malloc(V * sizeof(float)), *dl;
	struct ck_sample_out *out = malloc(sizeof(*out)), *dout;
	struct ck_sample_row row, *drow;
	struct capy_sampler *a, *b;
	uint64_t seed = rc->V * 31 + (uint64_t)rc->sh * 7 + (uint64_t)rc->p.top_k + (uint64_t)rc->mk * 1009;
	uint32_t *bits = malloc((V + 31) / 32 * 4), *dbits = NULL;
	int same = 0, fallbacks = 0;
	float temp;
	int k;

	capy_sampler_new(&a, V, &rc->p, NULL);
	capy_sampler_new(&b, V, &rc->p, NULL);
	enum capy_sample_mode mode = capy_sampler_mode(b, &temp, &k);
	row = (struct ck_sample_row){ temp, k, mode == CAPY_SAMPLE_GREEDY ? CK_SAMPLE_GREEDY : CK_SAMPLE_TOP_K, 0, NULL };
	if (rc->mk != M_NONE) {
		fill_mask(bits, V, rc->mk, &seed);
		dbits = dev_from(bits, (V + 31) / 32 * 4);
		row.mask = dbits;
		row.first = (int32_t)capy_sampler_mask_first(bits, V);
		CHECK(row.first >= 0);
	}
	drow = dev_from(&row, sizeof(row));
	dout = dev_from(NULL, sizeof(*out));
	dl = dev_from(NULL, V * sizeof(float));
	for (int d = 0; d < draws; d++) {
		int32_t want, got;
		fill(l, V, rc->sh, &seed);
		CUDA_OK(cudaMemcpy(dl, l, V * sizeof(float), cudaMemcpyHostToDevice));
		CK_OK(ck_sample(dl, 1, V, drow, dout, NULL, NULL));
		dev_to(out, dout, sizeof(*out));
		memcpy(x, l, V * sizeof(float));
		want = dbits ? capy_sampler_next_masked(a, x, bits) : capy_sampler_next(a, x);
		if (out->status) { /* the host takes the row, as the backend does */
			memcpy(x, l, V * sizeof(float));
			got = dbits ? capy_sampler_next_masked(b, x, bits) : capy_sampler_next(b, x);
			fallbacks++;
		} else if (mode == CAPY_SAMPLE_GREEDY) {
			got = capy_sampler_take(b, out->greedy);
		} else {
			/* a mask can leave nothing to list (allowed ids all NaN): the host then gives first */
			CHECK_MSG((out->n >= 1 || dbits) && out->n <= CK_SAMPLE_CAP, "list of %d", out->n);
			got = capy_sampler_next_top_masked(b, out->v, out->id, (uint64_t)out->n, row.first);
		}
		same += want == got;
		if (dbits)
			CHECK_MSG(got >= 0 && capy_mask_has(bits, got), "mask %d: token %d not allowed", rc->mk, got);
	}
	CHECK_MSG(same == draws, "V %lu shape %d temp %.2f top_k %d mask %d: %d of %d draws the same (%d from the row)",
		  (unsigned long)V, rc->sh, rc->p.temperature, rc->p.top_k, rc->mk, same, draws, fallbacks);
	uint64_t n_allowed = 0;
	for (uint64_t i = 0; i < V; i++)
		n_allowed += !dbits || capy_mask_has(bits, (int32_t)i);
	if (rc->sh == FLAT && mode == CAPY_SAMPLE_TOP_K) /* every allowed id ties: a list only if they fit */
		CHECK_MSG(fallbacks == (n_allowed > CK_SAMPLE_CAP ? draws : 0), "a flat row of %lu allowed ids: %d fell back",
			  (unsigned long)n_allowed, fallbacks);
	/* (a SPECIAL row under M_NOT_FINITE allows only -inf and NaN: ties that may overflow) */
	else if (rc->sh != FLAT && !(rc->sh == SPECIAL && rc->mk == M_NOT_FINITE))
		CHECK_MSG(fallbacks == 0, "V %lu shape %d: %d rows fell back", (unsigned long)V, rc->sh, fallbacks);
	capy_sampler_free(a);
	capy_sampler_free(b);
	cudaFree(dl);
	cudaFree(drow);
	cudaFree(dout);
	cudaFree(dbits);
	free(l);
	free(x);
	free(out);
	free(bits);
}

/* Several rows of different modes in one launch, masked and not: each as alone. */
static void test_rows_together(void)
{
	enum { R = 7, V = 50000, W = (V + 31) / 32 };
	struct ck_sample_row rows[R] = {
		{ 0, 0, CK_SAMPLE_GREEDY, 0, NULL },	  { 0.7f, 20, CK_SAMPLE_TOP_K, 0, NULL },
		{ 0, 0, CK_SAMPLE_NONE, 0, NULL },	  { 1.3f, 1024, CK_SAMPLE_TOP_K, 0, NULL },
		{ 0, 0, CK_SAMPLE_GREEDY, 0, NULL },	  { 0, 0, CK_SAMPLE_GREEDY, 0, NULL },
		{ 0.9f, 50, CK_SAMPLE_TOP_K, 0, NULL },
	};
	float *l = malloc(R * V * sizeof(float));
	struct ck_sample_out *all = malloc(R * sizeof(*all)), *one = malloc(sizeof(*one));
	uint32_t *bits = malloc(2 * W * 4), *dbits;
	uint64_t seed = 5;
	float *dl;
	struct ck_sample_row *drows;
	struct ck_sample_out *dout;

	for (int r = 0; r < R; r++)
		fill(l + (uint64_t)r * V, V, r == 3 ? TIES : CONTINUOUS, &seed);
	/* rows 5 and 6 masked, as the backend lays them out: one mask row each */
	fill_mask(bits, V, M_SPARSE, &seed);
	fill_mask(bits + W, V, M_TAIL, &seed);
	dbits = dev_from(bits, 2 * W * 4);
	for (int r = 5; r < R; r++) {
		rows[r].mask = dbits + (r - 5) * W;
		rows[r].first = (int32_t)capy_sampler_mask_first(bits + (r - 5) * W, V);
	}
	dl = dev_from(l, R * V * sizeof(float));
	drows = dev_from(rows, sizeof(rows));
	dout = dev_from(NULL, R * sizeof(*all));
	/* the heads also written into page-locked records, as the backend reads them */
	struct ck_sample_out *heads;
	CUDA_OK(cudaMallocHost((void **)&heads, R * sizeof(*heads)));
	memset(heads, 0x5a, R * sizeof(*heads));
	CK_OK(ck_sample(dl, R, V, drows, dout, heads, NULL));
	dev_to(all, dout, R * sizeof(*all));
	for (int r = 0; r < R; r++) {
		if (rows[r].mode == CK_SAMPLE_NONE)
			continue;
		CHECK_EQ_INT(heads[r].status, all[r].status);
		CHECK_EQ_INT(heads[r].n, all[r].n);
		CHECK_EQ_INT(heads[r].greedy, all[r].greedy);
		CHECK_EQ_INT(heads[r].id[0], 0x5a5a5a5a); /* the lists stay on the device */
	}
	cudaFreeHost(heads);
	for (int r = 0; r < R; r++) {
		if (rows[r].mode == CK_SAMPLE_NONE)
			continue;
		struct ck_sample_out *d1 = dev_from(NULL, sizeof(*one));
		struct ck_sample_row *dr = dev_from(&rows[r], sizeof(rows[r]));
		CK_OK(ck_sample(dl + (uint64_t)r * V, 1, V, dr, d1, NULL, NULL));
		dev_to(one, d1, sizeof(*one));
		CHECK_EQ_INT(all[r].status, one->status);
		if (rows[r].mode == CK_SAMPLE_GREEDY) {
			CHECK_EQ_INT(all[r].greedy, one->greedy);
			if (rows[r].mask)
				CHECK(capy_mask_has(bits + (r - 5) * W, all[r].greedy));
		} else {
			CHECK_EQ_INT(all[r].n, one->n);
			/* the same set (the order is the device's) */
			int64_t sa = 0, sb = 0;
			for (int i = 0; i < one->n; i++) {
				sa += all[r].id[i];
				sb += one->id[i];
			}
			CHECK(sa == sb);
		}
		cudaFree(d1);
		cudaFree(dr);
	}
	cudaFree(dl);
	cudaFree(drows);
	cudaFree(dout);
	cudaFree(dbits);
	free(l);
	free(all);
	free(one);
	free(bits);
}

int main(void)
{
	const uint64_t Vs[] = { 248320, 151936, 3000, 700, 1001, 4094 }; /* 1001, 4094: rows off float4 alignment */
	const struct capy_sampler_params ps[] = {
		{ .temperature = 0 },
		{ .temperature = 0.7f, .top_k = 20, .top_p = 0.8f, .seed = 1 },
		{ .temperature = 1.0f, .top_k = 2, .seed = 2 },
		{ .temperature = 1.3f, .top_k = 200, .min_p = 0.02f, .seed = 3 },
		{ .temperature = 0.6f, .top_k = 1024, .top_p = 0.95f, .seed = 4 },
	};
	int n = 0;

	for (size_t v = 0; v < ARRAY_SIZE(Vs); v++)
		for (int sh = CONTINUOUS; sh <= SPECIAL; sh++)
			for (size_t p = 0; p < ARRAY_SIZE(ps); p++)
				for (int mk = M_NONE; mk < M_KINDS; mk++) {
					struct rowcase rc = { Vs[v], (enum shape)sh, ps[p], (enum mask_kind)mk };
					run_case(&rc, (Vs[v] > 100000 ? 12 : 40) / (mk == M_NONE ? 1 : 2));
					n++;
				}
	printf("%d row cases\n", n);
	test_rows_together();
	return test_summary();
}
