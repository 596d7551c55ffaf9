/* u-nvfp4.c - NVFP4 and E4M3 numerics against vectors recorded from the Python rules
 * (ModelOpt for weights, vLLM's emulation for activations, torch for E4M3 casts):
 * t/fixtures/nvfp4_vectors.json, made by t/fixtures/make_fixtures.py. */
#include "test.h"
#include "quant/floats.h"
#include "quant/nvfp4.h"
#include "util/file.h"
#include "util/json.h"

static cJSON *vectors;

static uint64_t num(const cJSON *o, const char *key)
{
	uint64_t v = 0;
	capy_json_u64(cJSON_GetObjectItemCaseSensitive(o, key), &v);
	return v;
}

/* An array of unsigned integers into out (at most max); returns the count. */
static size_t u64s(const cJSON *o, const char *key, uint64_t *out, size_t max)
{
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key), *it;
	size_t n = 0;

	cJSON_ArrayForEach(it, a) {
		if (n < max)
			capy_json_u64(it, &out[n]);
		n++;
	}
	return n;
}

static void test_e4m3(void)
{
	const cJSON *it;
	int n = 0;

	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(vectors, "e4m3")) {
		float f = capy_f32_from_bits((uint32_t)num(it, "f32_bits"));
		uint8_t want = (uint8_t)num(it, "e4m3"), got = capy_f32_to_e4m3(f);
		CHECK_MSG(got == want, "e4m3(%a) = 0x%02x, torch gives 0x%02x", (double)f, got, want);
		n++;
	}
	CHECK(n >= 30);
	/* Every finite code decodes and re-encodes to itself. */
	for (int c = 0; c < 256; c++) {
		if (capy_e4m3_is_nan((uint8_t)c))
			continue;
		CHECK_MSG(capy_f32_to_e4m3(capy_e4m3_to_f32((uint8_t)c)) == c || c == 0x80, "code 0x%02x", c);
	}
}

static void test_weights(void)
{
	static uint64_t bits[65536], scales[4096], packed[32768];
	const cJSON *it;
	int n = 0;

	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(vectors, "weights")) {
		uint64_t shape[2];
		size_t nw = u64s(it, "w_bf16_bits", bits, 65536), ns = u64s(it, "weight_scale_e4m3", scales, 4096);
		size_t np = u64s(it, "packed", packed, 32768);
		const char *name = cJSON_GetObjectItemCaseSensitive(it, "name")->valuestring;
		float *w, amax = 0, s2;
		uint8_t *codes, *sc;

		u64s(it, "shape", shape, 2);
		CHECK(nw == shape[0] * shape[1] && ns == nw / 16 && np == nw / 2);
		w = malloc(nw * sizeof(float));
		codes = malloc(np);
		sc = malloc(ns);
		for (size_t i = 0; i < nw; i++) {
			w[i] = capy_bf16_to_f32((uint16_t)bits[i]);
			amax = fmaxf(amax, fabsf(w[i]));
		}
		s2 = capy_nvfp4_weight_scale2(amax);
		CHECK_MSG(capy_f32_bits(s2) == num(it, "weight_scale_2_f32_bits"), "%s: weight_scale_2 %a", name,
			  (double)s2);
		capy_nvfp4_quantize(w, shape[0], shape[1], s2, codes, sc);
		for (size_t i = 0; i < ns; i++)
			CHECK_MSG(sc[i] == scales[i], "%s: block scale %zu: 0x%02x, want 0x%02" PRIx64, name, i, sc[i],
				  scales[i]);
		for (size_t i = 0; i < np; i++)
			CHECK_MSG(codes[i] == packed[i], "%s: code byte %zu: 0x%02x, want 0x%02" PRIx64, name, i,
				  codes[i], packed[i]);
		free(w);
		free(codes);
		free(sc);
		n++;
	}
	CHECK(n >= 3);
}

static void test_activations(void)
{
	static uint64_t bits[65536], scales[4096], dq[65536];
	const cJSON *it;
	int n = 0;

	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(vectors, "activations")) {
		uint64_t shape[2];
		size_t nx = u64s(it, "x_f32_bits", bits, 65536), ns = u64s(it, "block_scales_e4m3", scales, 4096);
		const char *name = cJSON_GetObjectItemCaseSensitive(it, "name")->valuestring;
		const cJSON *fp4 = cJSON_GetObjectItemCaseSensitive(it, "fp4_values");
		float is = capy_f32_from_bits((uint32_t)num(it, "input_scale_f32_bits"));
		float gs = 1.0f / is;
		float *x;
		uint8_t *codes, *sc;

		u64s(it, "shape", shape, 2);
		u64s(it, "x_dq_f32_bits", dq, 65536);
		CHECK(nx == shape[0] * shape[1] && ns == nx / 16);
		x = malloc(nx * sizeof(float));
		codes = malloc(nx / 2);
		sc = malloc(ns);
		for (size_t i = 0; i < nx; i++)
			x[i] = capy_f32_from_bits((uint32_t)bits[i]);
		for (uint64_t r = 0; r < shape[0]; r++)
			capy_nvfp4_quantize_act(x + r * shape[1], shape[1], is, codes + r * shape[1] / 2,
						sc + r * shape[1] / 16);
		for (size_t i = 0; i < ns; i++)
			CHECK_MSG(sc[i] == scales[i], "%s: block scale %zu: 0x%02x, want 0x%02" PRIx64, name, i, sc[i],
				  scales[i]);
		for (size_t i = 0; i < nx; i++) {
			float q = capy_nvfp4_code_value(codes, i);
			float want = (float)cJSON_GetArrayItem(fp4, (int)i)->valuedouble;
			/* x_dq = q * (s / gs), in float32 */
			float deq = q * (capy_e4m3_to_f32(sc[i / 16]) / gs);
			CHECK_MSG(q == want, "%s: element %zu: %g, want %g", name, i, (double)q, (double)want);
			CHECK_MSG(capy_f32_bits(deq) == dq[i] || (deq == 0 && capy_f32_from_bits((uint32_t)dq[i]) == 0),
				  "%s: dequantized element %zu: %a", name, i, (double)deq);
		}
		free(x);
		free(codes);
		free(sc);
		n++;
	}
	CHECK(n >= 3);
}

static void test_e2m1_rule(void)
{
	/* Ties go to the even mantissa; small negatives keep their sign (code 8). */
	CHECK_EQ_INT(capy_e2m1_code(0.25f), 0);
	CHECK_EQ_INT(capy_e2m1_code(0.2500001f), 1);
	CHECK_EQ_INT(capy_e2m1_code(0.75f), 2);
	CHECK_EQ_INT(capy_e2m1_code(1.25f), 2);
	CHECK_EQ_INT(capy_e2m1_code(1.75f), 4);
	CHECK_EQ_INT(capy_e2m1_code(2.5f), 4);
	CHECK_EQ_INT(capy_e2m1_code(3.5f), 6);
	CHECK_EQ_INT(capy_e2m1_code(5.0f), 6);
	CHECK_EQ_INT(capy_e2m1_code(5.01f), 7);
	CHECK_EQ_INT(capy_e2m1_code(100.0f), 7);
	CHECK_EQ_INT(capy_e2m1_code(-0.1f), 8);
	CHECK_EQ_INT(capy_e2m1_code(-0.0f), 0);
	CHECK_EQ_INT(capy_e2m1_code(-6.0f), 15);
	/* An all-zero tensor gets scale 1 instead of a division by zero. */
	CHECK(capy_nvfp4_weight_scale2(0) == 1.0f);
}

static void test_bf16_f16(void)
{
	CHECK_EQ_INT(capy_f32_to_bf16(1.0f), 0x3f80);
	CHECK_EQ_INT(capy_f32_to_bf16(capy_f32_from_bits(0x3f808000)), 0x3f80); /* tie, even stays */
	CHECK_EQ_INT(capy_f32_to_bf16(capy_f32_from_bits(0x3f818000)), 0x3f82); /* tie, odd rounds up */
	CHECK_EQ_INT(capy_f32_to_f16(1.0f), 0x3c00);
	CHECK_EQ_INT(capy_f32_to_f16(65504.0f), 0x7bff);
	CHECK_EQ_INT(capy_f32_to_f16(65520.0f), 0x7c00);
	CHECK(capy_f16_to_f32(0x0001) == ldexpf(1, -24));
	for (uint32_t h = 0; h < 0x7c00; h++)
		CHECK_MSG(capy_f32_to_f16(capy_f16_to_f32((uint16_t)h)) == h, "f16 0x%04x", h);
}

int main(void)
{
	if (!(vectors = test_fixture_json("nvfp4_vectors.json")))
		return 1;
	RUN(test_e4m3);
	RUN(test_weights);
	RUN(test_activations);
	RUN(test_e2m1_rule);
	RUN(test_bf16_f16);
	cJSON_Delete(vectors);
	return test_summary();
}
