/* u-tp.c - tensor parallelism's split and payloads (libcore/tp/tp.h): the fp16-shift
 * exponent, what each payload gives back (exact powers of two, saturation, NaN and Inf, a row
 * of zeros), the reductions (fp32 = the plain sum in rank order, bf16 rounding each partial
 * sum, fp16-shift within 2^-11 of each part's largest element), and the split of real
 * configurations with the refusal naming the dimension; the NCCL id's hand-over through a
 * file (published whole, waited for, refused when missing past the timeout or of another size). */
#include "test.h"
#include "test-fixture.h"
#include "quant/floats.h"
#include "tp/tp.h"
#include "util/rng.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_names(void)
{
	CHECK_EQ_INT(capy_tp_payload_parse("fp32"), CAPY_TP_FP32);
	CHECK_EQ_INT(capy_tp_payload_parse("fp16-shift"), CAPY_TP_FP16_SHIFT);
	CHECK_EQ_INT(capy_tp_payload_parse("bf16"), CAPY_TP_BF16);
	CHECK_EQ_INT(capy_tp_payload_parse("fp16"), -1);
	CHECK_EQ_INT(capy_tp_payload_parse(NULL), -1);
	CHECK_STR(capy_tp_payload_name(CAPY_TP_FP16_SHIFT), "fp16-shift");
}

static void test_shift(void)
{
	/* amax * 2^s in [2^14, 2^15) */
	static const float a[] = { 1.0f, 0.75f, 16384.0f, 32767.0f, 32768.0f, 3.0e-20f, 1.0e20f, 65504.0f };
	for (size_t i = 0; i < ARRAY_SIZE(a); i++) {
		const float v = ldexpf(a[i], capy_tp_fp16_shift(a[i]));
		CHECK_MSG(v >= 16384.0f && v < 32768.0f, "amax %g: scaled to %g", (double)a[i], (double)v);
	}
	CHECK_EQ_INT(capy_tp_fp16_shift(0), 0);
	CHECK_EQ_INT(capy_tp_fp16_shift(INFINITY), 0);
	CHECK_EQ_INT(capy_tp_fp16_shift(NAN), 0);
	CHECK_EQ_INT(capy_tp_fp16_shift(1.0f), 14);
}

static void test_encode(void)
{
	/* powers of two and small integers times the row's scale come back exactly */
	float r[8] = { 1024.0f, -3.0f, 0.5f, 0.0f, -0.0f, 96.0f, 1.0f / 64, 7.0f };
	float want[8];
	memcpy(want, r, sizeof(r));
	capy_tp_encode_row(CAPY_TP_FP16_SHIFT, r, 8);
	CHECK(!memcmp(r, want, sizeof(r)));
	/* 11 significant bits relative to the largest: 1 + 2^-12 is lost next to 1024 */
	float q[2] = { 1024.0f, 1.0f + 1.0f / 4096 };
	capy_tp_encode_row(CAPY_TP_FP16_SHIFT, q, 2);
	CHECK(q[0] == 1024.0f && q[1] == 1.0f);
	/* a row of tiny values keeps its precision: the shift is the row's own */
	float t[2] = { 3.0e-30f, 1.0e-30f };
	float tw[2] = { t[0], t[1] };
	capy_tp_encode_row(CAPY_TP_FP16_SHIFT, t, 2);
	CHECK(fabsf(t[0] - tw[0]) <= tw[0] * 1e-3f && fabsf(t[1] - tw[1]) <= tw[1] * 1e-3f);
	/* NaN and Inf pass, the finite values keep their scale */
	float n[3] = { NAN, INFINITY, 2.0f };
	capy_tp_encode_row(CAPY_TP_FP16_SHIFT, n, 3);
	CHECK(isnan(n[0]) && isinf(n[1]) && n[1] > 0 && n[2] == 2.0f);
	/* bf16: each value rounded alone; fp32: unchanged */
	float b[2] = { 1.0f + 1.0f / 512, 3.14159265f };
	capy_tp_encode_row(CAPY_TP_BF16, b, 2);
	CHECK(b[0] == 1.0f && b[1] == capy_bf16_to_f32(capy_f32_to_bf16(3.14159265f)));
	float f[1] = { 3.14159265f };
	capy_tp_encode_row(CAPY_TP_FP32, f, 1);
	CHECK(f[0] == 3.14159265f);
}

static void test_reduce(void)
{
	enum { N = 300 };
	float a[N], b[N], c[N], out[N];
	const float *parts[3] = { a, b, c };
	struct capy_rng g;

	capy_rng_seed(&g, 7);

	for (int i = 0; i < N; i++) {
		a[i] = 4.0f * ((float)capy_rng_uniform(&g) - 0.5f);
		b[i] = 4.0f * ((float)capy_rng_uniform(&g) - 0.5f);
		c[i] = 0.001f * ((float)capy_rng_uniform(&g) - 0.5f);
	}
	/* fp32: the sum in rank order, bit for bit */
	capy_tp_reduce_row(CAPY_TP_FP32, parts, 3, N, out);
	for (int i = 0; i < N; i++)
		CHECK(out[i] == (a[i] + b[i]) + c[i]);
	/* 2 ranks: either order (what NCCL's ring may do) */
	const float *swapped[2] = { b, a };
	float out2[N];
	capy_tp_reduce_row(CAPY_TP_FP32, parts, 2, N, out);
	capy_tp_reduce_row(CAPY_TP_FP32, swapped, 2, N, out2);
	CHECK(!memcmp(out, out2, sizeof(out)));
	/* bf16: rounded parts, every partial sum rounded */
	capy_tp_reduce_row(CAPY_TP_BF16, parts, 2, N, out);
	for (int i = 0; i < N; i++) {
		float w = capy_bf16_to_f32(capy_f32_to_bf16(capy_bf16_to_f32(capy_f32_to_bf16(a[i])) +
							   capy_bf16_to_f32(capy_f32_to_bf16(b[i]))));
		CHECK(out[i] == w);
	}
	/* fp16-shift: each part within half an fp16 ulp of its row's largest element; the tiny
	 * third part keeps its own scale */
	capy_tp_reduce_row(CAPY_TP_FP16_SHIFT, parts, 3, N, out);
	float am[3] = { 0 };
	for (int r = 0; r < 3; r++)
		for (int i = 0; i < N; i++)
			am[r] = fmaxf(am[r], fabsf(parts[r][i]));
	for (int i = 0; i < N; i++) {
		const float exact = (a[i] + b[i]) + c[i], bound = (am[0] + am[1] + am[2]) * 0x1p-11f + 1e-6f;
		CHECK_MSG(fabsf(out[i] - exact) <= bound, "%d: %g against %g", i, (double)out[i], (double)exact);
	}
	/* in place: out = parts[0] */
	float a2[N];
	memcpy(a2, a, sizeof(a));
	const float *inplace[2] = { a2, b };
	capy_tp_reduce_row(CAPY_TP_FP16_SHIFT, parts, 2, N, out);
	capy_tp_reduce_row(CAPY_TP_FP16_SHIFT, inplace, 2, N, a2);
	CHECK(!memcmp(out, a2, sizeof(out)));
	/* the double-rounding trap: halves that nearly cancel */
	float x = 1.00390625f * 256, y = -1.0f * 256 + 0.01f, xs[1] = { x }, ys[1] = { y }, z[1];
	const float *pp[2] = { xs, ys };
	capy_tp_reduce_row(CAPY_TP_BF16, pp, 2, 1, z);
	const float e32 = x + y;
	CHECK(fabsf(z[0] - e32) > 0.5f * fabsf(e32)); /* bf16 loses the 0.01 entirely */
	capy_tp_reduce_row(CAPY_TP_FP32, pp, 2, 1, z);
	CHECK(z[0] == e32);
}

static void test_split(void)
{
	struct capy_model_config c = { 0 };
	struct capy_tp_split sp;
	struct capy_err err = { 0 };

	/* Flash-Next's dimensions */
	c.n_heads = 16;
	c.n_kv_heads = 2;
	c.linear_value_heads = 32;
	c.linear_key_heads = 16;
	c.n_experts = 512;
	c.shared_expert_intermediate_size = 512;
	c.vocab_size = 248320;
	CHECK_EQ_INT(capy_tp_split(&sp, &c, 2, &err), 0);
	CHECK_EQ_U64(sp.heads.per, 8);
	CHECK_EQ_U64(sp.kv_heads.per, 1);
	CHECK_EQ_U64(sp.experts.per, 256);
	CHECK_EQ_INT(capy_tp_expert_rank(&sp, 255), 0);
	CHECK_EQ_INT(capy_tp_expert_rank(&sp, 256), 1);
	CHECK_EQ_U64(capy_tp_lo(&sp.gdn_v_heads, 1), 16);
	CHECK_EQ_U64(capy_tp_hi(&sp.gdn_v_heads, 1), 32);
	CHECK_EQ_U64(sp.mlp.per, 0); /* no dense MLP */
	/* 4 ranks: the 2 key/value heads are held whole */
	CHECK_EQ_INT(capy_tp_split(&sp, &c, 4, &err), 0);
	CHECK_EQ_U64(sp.kv_heads.per, 0);
	CHECK_EQ_U64(capy_tp_lo(&sp.kv_heads, 3), 0);
	CHECK_EQ_U64(capy_tp_hi(&sp.kv_heads, 3), 2);
	/* an odd vocabulary is gathered, not summed: uneven ranges are fine */
	c.vocab_size = 1001;
	CHECK_EQ_INT(capy_tp_split(&sp, &c, 2, &err), 0);
	CHECK_EQ_U64(capy_tp_hi(&sp.vocab, 0), 501);
	CHECK_EQ_U64(capy_tp_hi(&sp.vocab, 1), 1001);
	/* refusals name the dimension */
	CHECK_EQ_INT(capy_tp_split(&sp, &c, 3, &err), CAPY_EINVAL);
	CHECK_CONTAINS(err.msg, "num_attention_heads (16) is not a multiple of 3");
	c.n_experts = 510;
	CHECK_EQ_INT(capy_tp_split(&sp, &c, 4, &err), CAPY_EINVAL);
	CHECK_CONTAINS(err.msg, "num_experts (510)");
	CHECK_EQ_INT(capy_tp_split(&sp, &c, 0, &err), CAPY_EINVAL);
	CHECK_EQ_INT(capy_tp_split(&sp, &c, CAPY_TP_MAX_RANKS + 1, &err), CAPY_EINVAL);
}

static void test_id_file(void)
{
	struct capy_err err;
	char dir[256], path[300];
	uint8_t id[128], back[128];

	snprintf(dir, sizeof(dir), "/tmp/capy-unit-tp-%d", (int)getpid());
	CHECK(mkdir(dir, 0700) == 0);
	snprintf(path, sizeof(path), "%s/nccl-id", dir);
	for (int i = 0; i < 128; i++)
		id[i] = (uint8_t)(i * 37 + 11);
	/* nothing published yet: a short wait ends with the path named */
	CHECK_EQ_INT(capy_tp_id_wait(path, back, sizeof(back), 0.05, &err), CAPY_EIO);
	CHECK_CONTAINS(err.msg, path);
	CHECK_CONTAINS(err.msg, "no id after");
	CHECK_EQ_INT(capy_tp_id_publish(path, id, sizeof(id), &err), 0);
	memset(back, 0, sizeof(back));
	CHECK_EQ_INT(capy_tp_id_wait(path, back, sizeof(back), 1, &err), 0);
	CHECK(!memcmp(id, back, sizeof(id)));
	/* published again (a new run): replaced whole */
	id[0] ^= 0xff;
	CHECK_EQ_INT(capy_tp_id_publish(path, id, sizeof(id), &err), 0);
	CHECK_EQ_INT(capy_tp_id_wait(path, back, sizeof(back), 1, &err), 0);
	CHECK(!memcmp(id, back, sizeof(id)));
	/* a file of another size is not an id */
	CHECK_EQ_INT(capy_tp_id_wait(path, back, 64, 1, &err), CAPY_EFORMAT);
	CHECK_CONTAINS(err.msg, "128 bytes, not an id of 64");
	/* nowhere to write: the error names the file */
	CHECK(capy_tp_id_publish("/nonexistent-capy-dir/nccl-id", id, sizeof(id), &err) < 0);
	CHECK_CONTAINS(err.msg, "/nonexistent-capy-dir");
	unlink(path);
	CHECK(rmdir(dir) == 0);
}

int main(void)
{
	RUN(test_names);
	RUN(test_shift);
	RUN(test_encode);
	RUN(test_reduce);
	RUN(test_split);
	RUN(test_id_file);
	return test_summary();
}
