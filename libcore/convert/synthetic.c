/* synthetic.c - random weights of realistic scale, generated at disk speed.
 *
 * Values come from tables built once per seed: 64 Ki standard normal samples for
 * plain weights (scaled to each tensor's mean and std), and for NVFP4 tensors a
 * table of code bytes drawn from the distribution a real quantized weight has and
 * a table of plausible block scales. Each chunk of each tensor slice is seeded from
 * (seed, tensor name, slice, offset), so the output does not depend on how the
 * work is spread over threads: same seed, same artifact.
 */
#include "convert-impl.h"
#include "../quant/floats.h"
#include "../quant/nvfp4.h"
#include "../util/hash.h"
#include "../util/rng.h"

#include <math.h>

#define TABLE 65536

struct synth_tables {
	uint64_t seed;
	float normal[TABLE];
	uint8_t codes[TABLE];  /* two E2M1 codes per byte */
	uint8_t scales[256];   /* E4M3 block scales */
};

/* A realistic weight quantized with ModelOpt's rule has values / block_scale
 * distributed about N(0, 6 / 2.5): the block's largest value maps to 6. */
#define CODE_STD 2.4
#define SYNTH_SCALE2 (4 * 0.02f / 2688.0f) /* tensor amax ~ 4 sigma, sigma 0.02 */
#define SYNTH_INPUT_SCALE (8.0f / 2688.0f) /* activations with amax ~ 8 */

int synth_tables_new(struct synth_tables **out, uint64_t seed, struct capy_err *err)
{
	struct synth_tables *t = malloc(sizeof(*t));
	struct capy_rng rng;

	if (!t)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	t->seed = seed;
	capy_rng_seed(&rng, seed);
	for (int i = 0; i < TABLE; i++)
		t->normal[i] = (float)capy_rng_normal(&rng);
	for (int i = 0; i < TABLE; i++) {
		uint8_t lo = capy_e2m1_code((float)(capy_rng_normal(&rng) * CODE_STD));
		uint8_t hi = capy_e2m1_code((float)(capy_rng_normal(&rng) * CODE_STD));
		t->codes[i] = (uint8_t)(hi << 4 | lo);
	}
	for (int i = 0; i < 256; i++) {
		double ps = 448.0 * (0.35 + 0.25 * fabs(capy_rng_normal(&rng)));
		t->scales[i] = capy_f32_to_e4m3((float)CAPY_MIN(ps, 448.0));
	}
	*out = t;
	return 0;
}

void synth_tables_free(struct synth_tables *t)
{
	free(t);
}

static void seed_chunk(struct capy_rng *rng, const struct synth_tables *t, const char *name,
		       uint64_t slice, uint64_t offset)
{
	uint64_t s = t->seed ^ capy_xxh3(name, strlen(name));

	s ^= capy_splitmix64(&(uint64_t){ slice * 0x9E3779B97F4A7C15ull + offset });
	capy_rng_seed(rng, s);
}

static void fill_bf16(const struct synth_tables *t, struct capy_rng *rng, const struct plan_out *o,
		      uint8_t *buf, uint64_t len)
{
	const float mean = (float)o->rand_mean, std = (float)o->rand_std;
	uint16_t *vals = malloc(TABLE * sizeof(*vals));
	uint64_t i = 0;

	if (!vals) { /* fall back to converting every value */
		for (; i + 2 <= len; i += 2) {
			uint16_t v = capy_f32_to_bf16(mean + std * t->normal[capy_rng_next(rng) & 0xffff]);
			buf[i] = (uint8_t)v;
			buf[i + 1] = (uint8_t)(v >> 8);
		}
		return;
	}
	/* This chunk's values, scaled once: the inner loop is then a table lookup. */
	for (int k = 0; k < TABLE; k++)
		vals[k] = capy_f32_to_bf16(mean + std * t->normal[k]);
	for (; i + 8 <= len; i += 8) {
		uint64_t r = capy_rng_next(rng), v = 0;
		for (int k = 0; k < 4; k++)
			v |= (uint64_t)vals[(r >> (16 * k)) & 0xffff] << (16 * k);
		memcpy(buf + i, &v, 8); /* little-endian host: BF16 values in order */
	}
	for (; i + 2 <= len; i += 2) {
		uint16_t v = vals[capy_rng_next(rng) & 0xffff];
		buf[i] = (uint8_t)v;
		buf[i + 1] = (uint8_t)(v >> 8);
	}
	free(vals);
}

/* Bytes [off, off + len) of one NVFP4 slice record. */
static void fill_nvfp4(const struct synth_tables *t, struct capy_rng *rng, const struct capy_tensor_info *ti,
		       uint8_t *buf, uint64_t off, uint64_t len)
{
	struct capy_nvfp4_layout l;

	capy_nvfp4_layout(ti->shape[ti->ndim - 2], ti->shape[ti->ndim - 1], ti->nparts, &l);
	for (uint64_t i = 0; i < len;) {
		uint64_t pos = off + i, end;
		uint8_t *d = buf + i;
		if (pos < l.codes_bytes) {
			end = CAPY_MIN(off + len, l.codes_bytes);
			for (uint64_t j = 0; j < end - pos; j++)
				d[j] = t->codes[capy_rng_next(rng) & 0xffff];
		} else if (pos < l.scales_off) {
			end = CAPY_MIN(off + len, l.scales_off);
			memset(d, 0, end - pos);
		} else if (pos < l.scales_off + l.scales_bytes) {
			end = CAPY_MIN(off + len, l.scales_off + l.scales_bytes);
			for (uint64_t j = 0; j < end - pos; j++)
				d[j] = t->scales[capy_rng_next(rng) & 0xff];
		} else if (pos < l.globals_off) {
			end = CAPY_MIN(off + len, l.globals_off);
			memset(d, 0, end - pos);
		} else if (pos < l.globals_off + 8ull * l.parts) {
			uint8_t g[8 * CAPY_MAX_PARTS];
			for (uint32_t p = 0; p < l.parts; p++) {
				uint32_t a = capy_f32_bits(SYNTH_SCALE2), b = capy_f32_bits(SYNTH_INPUT_SCALE);
				for (int k = 0; k < 4; k++) {
					g[4 * p + (uint32_t)k] = (uint8_t)(a >> (8 * k));
					g[4 * (l.parts + p) + (uint32_t)k] = (uint8_t)(b >> (8 * k));
				}
			}
			end = CAPY_MIN(off + len, l.globals_off + 8ull * l.parts);
			memcpy(d, g + (pos - l.globals_off), end - pos);
		} else {
			end = CAPY_MIN(off + len, l.slice_bytes);
			memset(d, 0, end - pos);
		}
		i += end - pos;
	}
}

void synth_fill(const struct synth_tables *t, const struct plan *p, const struct plan_out *o,
		uint64_t slice, const struct capy_tensor_info *ti, uint8_t *buf, uint64_t offset,
		uint64_t len)
{
	const struct plan_src *s = &p->srcs[o->bands[0].src];
	struct capy_rng rng;

	seed_chunk(&rng, t, o->name, slice, offset);
	if (ti->dtype == CAPY_DT_NVFP4) {
		fill_nvfp4(t, &rng, ti, buf, offset, len);
	} else if (ti->dtype == CAPY_DT_I64) {
		for (uint64_t i = 0; i < len; i++) {
			uint64_t e = (offset + i) / 8;
			uint64_t v = s->expect_i64 ? (uint64_t)s->expect_i64[e] : 0;
			buf[i] = (uint8_t)(v >> (8 * ((offset + i) % 8)));
		}
	} else if (o->rand_std == 0) {
		uint16_t v = capy_f32_to_bf16((float)o->rand_mean);
		for (uint64_t i = 0; i + 1 < len; i += 2) {
			buf[i] = (uint8_t)v;
			buf[i + 1] = (uint8_t)(v >> 8);
		}
	} else {
		fill_bf16(t, &rng, o, buf, len);
	}
}
