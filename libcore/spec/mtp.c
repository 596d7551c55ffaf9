/* mtp.c - MTP drafts (spec.h): the hidden states a sequence's steps hand over, the head run
 * over the positions it has not seen, then chained on its own outputs. */
#include "spec.h"
#include "../engine/engine.h"
#include "../util/file.h"
#include "../util/rng.h"

#include <errno.h>
#include <math.h>

#include <time.h>

struct capy_mtp {
	struct capy_engine *e;
	struct capy_seq *seq;
	int32_t *ids;        /* the draft vocabulary, or NULL for all of it */
	uint64_t n_ids;      /* width of a logits row: n_ids, or the vocabulary */
	uint64_t len;        /* the head's rows at positions [0, len) are final */
	float *hid;          /* [cap][H]: hidden states of positions len, len + 1, ... */
	uint64_t cap, have;  /* rows allocated; rows given (positions [len, len + have)) */
	int32_t *tokens;     /* [cap] the token after each of those positions */
	float *g, *logits;   /* [H] the last row's output; [n_ids] its logits */
	/* sampled drafts (capy_mtp_sample): q rows [max_k][vocab] of the last draft call */
	float temperature, *q;
	uint64_t max_k;
	struct capy_rng rng;
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int capy_mtp_new(struct capy_mtp **out, struct capy_engine *e, struct capy_seq *seq, const int32_t *ids,
		 uint64_t n_ids, struct capy_err *err)
{
	const struct capy_model_config *c = capy_engine_config(e);
	struct capy_mtp *m;

	if (!capy_engine_has_mtp(e))
		return capy_err_set(err, CAPY_EINVAL, "MTP drafts need an engine opened with its MTP head");
	if (ids && !n_ids)
		return capy_err_set(err, CAPY_EINVAL, "an empty draft vocabulary");
	for (uint64_t i = 0; ids && i < n_ids; i++)
		if (ids[i] < 0 || (uint64_t)ids[i] >= c->vocab_size)
			return capy_err_set(err, CAPY_EINVAL, "draft vocabulary id %" PRId32 " is outside [0, %" PRIu64 ")",
					    ids[i], c->vocab_size);
	if (!(m = calloc(1, sizeof(*m))))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	m->e = e;
	m->seq = seq;
	m->n_ids = ids ? n_ids : c->vocab_size;
	m->g = malloc(c->hidden_size * sizeof(float));
	m->logits = malloc(m->n_ids * sizeof(float));
	if (ids && (m->ids = malloc(n_ids * sizeof(*ids))))
		memcpy(m->ids, ids, n_ids * sizeof(*ids));
	if (!m->g || !m->logits || (ids && !m->ids)) {
		capy_mtp_free(m);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	}
	*out = m;
	return 0;
}

void capy_mtp_free(struct capy_mtp *m)
{
	if (!m)
		return;
	free(m->ids);
	free(m->hid);
	free(m->tokens);
	free(m->g);
	free(m->logits);
	free(m->q);
	free(m);
}

uint64_t capy_mtp_len(const struct capy_mtp *m)
{
	return m->len;
}

static int reserve_rows(struct capy_mtp *m, uint64_t rows, struct capy_err *err)
{
	uint64_t H = capy_engine_config(m->e)->hidden_size, cap = m->cap ? m->cap : 16;
	float *h;
	int32_t *t;

	if (rows <= m->cap)
		return 0;
	while (cap < rows)
		cap *= 2;
	if (!(h = realloc(m->hid, cap * H * sizeof(float))))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory for %" PRIu64 " hidden states", cap);
	m->hid = h;
	if (!(t = realloc(m->tokens, cap * sizeof(*t))))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory for %" PRIu64 " hidden states", cap);
	m->tokens = t;
	m->cap = cap;
	return 0;
}

float *capy_mtp_hidden_at(struct capy_mtp *m, uint64_t pos, uint64_t n, struct capy_err *err)
{
	uint64_t H = capy_engine_config(m->e)->hidden_size;

	if (pos < m->len) {
		capy_err_set(err, CAPY_EINVAL, "hidden states of position %" PRIu64 ": the MTP head has run %" PRIu64, pos,
			     m->len);
		return NULL;
	}
	if (pos > m->len + m->have) {
		capy_err_set(err, CAPY_EINVAL, "hidden states of position %" PRIu64 " leave a gap after %" PRIu64, pos,
			     m->len + m->have);
		return NULL;
	}
	if (reserve_rows(m, pos - m->len + n, err) < 0)
		return NULL;
	m->have = pos - m->len + n;
	return m->hid + (pos - m->len) * H;
}

int capy_mtp_sample(struct capy_mtp *m, float temperature, uint64_t seed, uint64_t max_k, struct capy_err *err)
{
	uint64_t V = capy_engine_config(m->e)->vocab_size;
	float *q;

	if (!(temperature > 0) || !max_k)
		return capy_err_set(err, CAPY_EINVAL, "sampled drafts need a temperature above 0 and room for a draft");
	if (!(q = realloc(m->q, max_k * V * sizeof(float))))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory for the drafts' distributions");
	m->q = q;
	m->max_k = max_k;
	m->temperature = temperature;
	capy_rng_seed(&m->rng, seed);
	return 0;
}

const float *capy_mtp_q(const struct capy_mtp *m)
{
	return m->temperature > 0 ? m->q : NULL;
}

/* Draft j from the last row: its first maximum over the draft vocabulary (in the vocabulary's
 * order), or, sampling, a draw from q = softmax(logits / temperature) there, written out as
 * q row j over the whole vocabulary (zero outside the draft vocabulary). */
static int32_t draft_pick(struct capy_mtp *m, uint64_t j)
{
	uint64_t best = 0, V = capy_engine_config(m->e)->vocab_size;

	for (uint64_t i = 1; i < m->n_ids; i++)
		if (m->logits[i] > m->logits[best])
			best = i;
	if (m->temperature > 0) {
		float *q = m->q + j * V;
		double sum = 0, u, acc = 0;
		memset(q, 0, V * sizeof(float));
		for (uint64_t i = 0; i < m->n_ids; i++)
			sum += exp((double)((m->logits[i] - m->logits[best]) / m->temperature));
		u = capy_rng_uniform(&m->rng);
		for (uint64_t i = 0, picked = 0; i < m->n_ids; i++) {
			double w = exp((double)((m->logits[i] - m->logits[best]) / m->temperature)) / sum;
			q[m->ids ? (uint64_t)m->ids[i] : i] = (float)w;
			acc += w;
			if (!picked && u < acc && w > 0) {
				best = i;
				picked = 1;
			}
		}
	}
	return m->ids ? m->ids[best] : (int32_t)best;
}

int capy_mtp_draft(struct capy_mtp *m, int32_t next, uint64_t k, int32_t *out, double *seconds,
		   struct capy_err *err)
{
	uint64_t L = capy_seq_len(m->seq), n;
	const int32_t *hist = capy_seq_tokens(m->seq);
	double t0 = now();
	int rc;

	if (!k || (m->temperature > 0 && k > m->max_k))
		return capy_err_set(err, CAPY_EINVAL, "%" PRIu64 " drafts asked for", k);
	if (L <= m->len)
		return capy_err_set(err, CAPY_EINVAL, "the MTP head has run %" PRIu64 " positions of a sequence of %" PRIu64
				    " (cut back below them, or no new position)", m->len, L);
	n = L - m->len;
	if (m->have < n)
		return capy_err_set(err, CAPY_EINVAL, "the hidden states of positions %" PRIu64 " .. %" PRIu64
				    " were not given", m->len + m->have, L - 1);
	/* Row t takes the token at t + 1: the history's, then next for the last position. */
	for (uint64_t i = 0; i + 1 < n; i++)
		m->tokens[i] = hist[m->len + i + 1];
	m->tokens[n - 1] = next;
	struct capy_mtp_rows r = { .seq = m->seq, .pos = m->len, .n = n, .hidden = m->hid, .tokens = m->tokens,
				   .g = m->g, .ids = m->ids, .n_ids = m->ids ? m->n_ids : 0, .logits = m->logits };
	if ((rc = capy_engine_mtp(m->e, &r, err)) < 0)
		return rc;
	m->len = L;
	m->have = 0;
	out[0] = draft_pick(m, 0);
	for (uint64_t j = 1; j < k; j++) { /* chained: scratch rows past the sequence's length */
		r.pos = L - 1 + j;
		r.n = 1;
		r.hidden = m->g; /* read before the head writes g */
		r.tokens = &out[j - 1];
		if ((rc = capy_engine_mtp(m->e, &r, err)) < 0)
			return rc;
		out[j] = draft_pick(m, j);
	}
	if (seconds)
		*seconds += now() - t0;
	return 0;
}

int capy_mtp_catch_up(struct capy_mtp *m, double *seconds, struct capy_err *err)
{
	uint64_t L = capy_seq_len(m->seq), H = capy_engine_config(m->e)->hidden_size, n;
	const int32_t *hist = capy_seq_tokens(m->seq);
	double t0 = now();
	int rc;

	if (L <= m->len + 1)
		return 0;
	n = L - 1 - m->len;
	if (m->have < n + 1)
		return capy_err_set(err, CAPY_EINVAL, "the hidden states of positions %" PRIu64 " .. %" PRIu64
				    " were not given", m->len + m->have, L - 1);
	for (uint64_t i = 0; i < n; i++)
		m->tokens[i] = hist[m->len + i + 1];
	struct capy_mtp_rows r = { .seq = m->seq, .pos = m->len, .n = n, .hidden = m->hid, .tokens = m->tokens,
				   .ids = m->ids, .n_ids = m->ids ? m->n_ids : 0 };
	if ((rc = capy_engine_mtp(m->e, &r, err)) < 0)
		return rc;
	/* The rows given past L - 1 (none from a step, which gives what it ran) go with it. */
	memmove(m->hid, m->hid + n * H, (m->have - n) * H * sizeof(float));
	m->have -= n;
	m->len += n;
	if (seconds)
		*seconds += now() - t0;
	return 0;
}

const float *capy_mtp_pending(const struct capy_mtp *m)
{
	return m->have && capy_seq_len(m->seq) == m->len + 1 ? m->hid : NULL;
}

int capy_mtp_resume(struct capy_mtp *m, uint64_t len, const float *hidden, struct capy_err *err)
{
	uint64_t H = capy_engine_config(m->e)->hidden_size;
	int rc;

	if (m->len || m->have)
		return capy_err_set(err, CAPY_EINVAL, "an MTP drafter resumes before it has run anything");
	if (capy_seq_len(m->seq) <= len)
		return capy_err_set(err, CAPY_EINVAL, "the MTP head resumes at %" PRIu64 " of a sequence of %" PRIu64, len,
				    capy_seq_len(m->seq));
	if ((rc = reserve_rows(m, 1, err)) < 0)
		return rc;
	memcpy(m->hid, hidden, H * sizeof(float));
	m->len = len;
	m->have = 1;
	return 0;
}

const float *capy_mtp_logits(const struct capy_mtp *m)
{
	return m->logits;
}

int capy_shortlist_read(const char *path, uint64_t vocab, int32_t **ids, uint64_t *n, struct capy_err *err)
{
	char *text, *p, *end;
	size_t len;
	uint64_t cap = 1024, cnt = 0, line = 0;
	int32_t *v = NULL;
	uint8_t *seen = NULL;
	int rc;

	if ((rc = capy_read_file(path, 1u << 30, &text, &len, err)) < 0)
		return rc;
	v = malloc(cap * sizeof(*v));
	seen = calloc(vocab, 1);
	if (!v || !seen) {
		rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
		goto out;
	}
	for (p = text; p < text + len; p = end + 1) {
		char *nl = memchr(p, '\n', (size_t)(text + len - p)), *q;
		long long id;
		end = nl ? nl : text + len;
		line++;
		*end = 0;
		if (*p == '#' || p == end)
			continue;
		errno = 0;
		id = strtoll(p, &q, 10);
		while (q < end && (*q == ' ' || *q == '\t' || *q == '\r'))
			q++;
		if (q == p || q != end || errno || id < 0 || (uint64_t)id >= vocab) {
			rc = capy_err_set(err, CAPY_EFORMAT, "'%s' line %" PRIu64 ": not a token id below %" PRIu64, path, line,
					  vocab);
			goto out;
		}
		if (seen[id]) {
			rc = capy_err_set(err, CAPY_EFORMAT, "'%s' line %" PRIu64 ": id %lld is listed twice", path, line, id);
			goto out;
		}
		seen[id] = 1;
		if (cnt == cap) {
			int32_t *w = realloc(v, 2 * cap * sizeof(*v));
			if (!w) {
				rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
				goto out;
			}
			v = w;
			cap *= 2;
		}
		v[cnt++] = (int32_t)id;
	}
	if (!cnt) {
		rc = capy_err_set(err, CAPY_EFORMAT, "'%s': no token ids", path);
		goto out;
	}
	*ids = v;
	*n = cnt;
	v = NULL;
	rc = 0;
out:
	free(v);
	free(seen);
	free(text);
	return rc;
}
