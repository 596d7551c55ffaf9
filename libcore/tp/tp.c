/* tp.c - tensor parallelism's split, payloads and the NCCL id's hand-over (tp.h). */
#include "tp.h"
#include "../quant/floats.h"
#include "../util/file.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const payload_names[] = { "fp32", "fp16-shift", "bf16" };

int capy_tp_payload_parse(const char *name)
{
	for (int i = 0; i < (int)ARRAY_SIZE(payload_names); i++)
		if (name && !strcmp(name, payload_names[i]))
			return i;
	return -1;
}

const char *capy_tp_payload_name(enum capy_tp_payload p)
{
	return (unsigned)p < ARRAY_SIZE(payload_names) ? payload_names[p] : "?";
}

/* n over ranks in equal parts, or fail naming it. */
static int even(struct capy_tp_range *r, uint64_t n, int ranks, const char *what, struct capy_err *err)
{
	r->n = n;
	r->per = n / (uint64_t)ranks;
	if (n % (uint64_t)ranks)
		return capy_err_set(err, CAPY_EINVAL, "tensor parallel over %d ranks: %s (%" PRIu64 ") is not a multiple of %d",
				    ranks, what, n, ranks);
	return 0;
}

int capy_tp_split(struct capy_tp_split *sp, const struct capy_model_config *c, int ranks, struct capy_err *err)
{
	int rc;

	memset(sp, 0, sizeof(*sp));
	if (ranks < 1 || ranks > CAPY_TP_MAX_RANKS)
		return capy_err_set(err, CAPY_EINVAL, "tensor parallel: %d ranks (1 to %d)", ranks, CAPY_TP_MAX_RANKS);
	sp->ranks = ranks;
	if ((rc = even(&sp->heads, c->n_heads, ranks, "num_attention_heads", err)) < 0 ||
	    (rc = even(&sp->gdn_v_heads, c->linear_value_heads, ranks, "linear_num_value_heads", err)) < 0 ||
	    (rc = even(&sp->gdn_k_heads, c->linear_key_heads, ranks, "linear_num_key_heads", err)) < 0 ||
	    (rc = even(&sp->mlp, c->intermediate_size, ranks, "intermediate_size", err)) < 0 ||
	    (rc = even(&sp->shared, c->shared_expert_intermediate_size, ranks, "shared_expert_intermediate_size", err)) < 0 ||
	    (rc = even(&sp->experts, c->n_experts, ranks, "num_experts", err)) < 0)
		return rc;
	/* key/value heads: split when they go evenly, else held whole (each rank's query
	 * heads read the ones they share) */
	sp->kv_heads.n = c->n_kv_heads;
	sp->kv_heads.per = c->n_kv_heads % (uint64_t)ranks ? 0 : c->n_kv_heads / (uint64_t)ranks;
	sp->vocab.n = c->vocab_size;
	sp->vocab.per = (c->vocab_size + (uint64_t)ranks - 1) / (uint64_t)ranks;
	return 0;
}

int capy_tp_fp16_shift(float amax)
{
	int e;

	if (!(amax > 0) || !isfinite(amax))
		return 0;
	frexpf(amax, &e); /* amax in [2^(e-1), 2^e) */
	/* amax * 2^s in [2^14, 2^15); kept where scaling back stays exact in fp32 (an fp16
	 * subnormal, 2^-24, times 2^-s above 2^-149) and where 2^15 * 2^-s stays finite */
	int s = 15 - e;
	return s > 125 ? 125 : s < -112 ? -112 : s;
}

static float bf16_round(float x)
{
	return capy_bf16_to_f32(capy_f32_to_bf16(x));
}

/* What a receiver gets for value x of a row with shift s. */
static float received(enum capy_tp_payload p, float x, int s)
{
	if (p == CAPY_TP_BF16)
		return bf16_round(x);
	if (p != CAPY_TP_FP16_SHIFT)
		return x;
	float v = ldexpf(x, s); /* exact: a power of two, and no overflow by the choice of s */
	if (isfinite(v)) /* saturate (only where s was clamped); Inf and NaN stay */
		v = v > 65504.0f ? 65504.0f : v < -65504.0f ? -65504.0f : v;
	return ldexpf(capy_f16_to_f32(capy_f32_to_f16(v)), -s);
}

static float row_amax(const float *row, size_t n)
{
	float amax = 0;

	for (size_t i = 0; i < n; i++)
		if (isfinite(row[i]) && fabsf(row[i]) > amax)
			amax = fabsf(row[i]);
	return amax;
}

void capy_tp_encode_row(enum capy_tp_payload p, float *row, size_t n)
{
	const int s = p == CAPY_TP_FP16_SHIFT ? capy_tp_fp16_shift(row_amax(row, n)) : 0;

	for (size_t i = 0; i < n; i++)
		row[i] = received(p, row[i], s);
}

void capy_tp_reduce_row(enum capy_tp_payload p, const float *const *parts, int ranks, size_t n, float *out)
{
	int s[CAPY_TP_MAX_RANKS] = { 0 };

	if (p == CAPY_TP_FP16_SHIFT)
		for (int r = 0; r < ranks; r++)
			s[r] = capy_tp_fp16_shift(row_amax(parts[r], n));
	/* element i of every part is read before out[i] is written: out may be parts[0] */
	for (size_t i = 0; i < n; i++) {
		float acc = received(p, parts[0][i], s[0]);
		for (int r = 1; r < ranks; r++) {
			acc += received(p, parts[r][i], s[r]);
			if (p == CAPY_TP_BF16) /* each partial sum rounded, as a bf16 all-reduce does */
				acc = bf16_round(acc);
		}
		out[i] = acc;
	}
}

int capy_tp_id_publish(const char *path, const uint8_t *id, size_t n, struct capy_err *err)
{
	struct capy_outfile o;
	int rc;

	if ((rc = capy_outfile_open(&o, path, err)) < 0)
		return rc;
	if ((rc = capy_pwrite_full(o.fd, id, n, 0, o.tmp_path, err)) < 0 || (rc = capy_outfile_commit(&o, err)) < 0) {
		capy_outfile_abort(&o);
		return rc;
	}
	return 0;
}

int capy_tp_id_wait(const char *path, uint8_t *id, size_t n, double timeout_s, struct capy_err *err)
{
	struct timespec t0, now, nap = { 0, 10 * 1000 * 1000 };
	char *buf;
	size_t len;
	int rc;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (access(path, F_OK) < 0) {
		if (errno != ENOENT)
			return capy_err_errno(err, errno, "cannot open '%s'", path);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec) >= timeout_s)
			return capy_err_set(err, CAPY_EIO, "%s: no id after %.0f s (rank 0 writes it)", path,
					    timeout_s);
		nanosleep(&nap, NULL);
	}
	/* published whole (renamed into place): what is there is the id, or not an id at all */
	if ((rc = capy_read_file(path, (size_t)1 << 20, &buf, &len, err)) < 0)
		return rc;
	if (len != n)
		rc = capy_err_set(err, CAPY_EFORMAT, "%s: %zu bytes, not an id of %zu", path, len, n);
	else
		memcpy(id, buf, n);
	free(buf);
	return rc;
}
