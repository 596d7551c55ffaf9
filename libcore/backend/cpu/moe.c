/* moe.c - the SwiGLU MLP and the sparse MoE block: softmax router over all experts,
 * top-k (renormalized when the config says so), routed experts summed in ascending
 * expert order (the reference's order), plus the sigmoid-gated shared expert. */
#include "cpu-impl.h"
#include "../../cpu/expert.h"

#include <math.h>
#include <stdatomic.h>

void mlp_forward(struct cpu_engine *e, const struct capy_mlp_w *m, const float *xn, uint64_t T, float *out,
		 float *act)
{
	par_linear(e, &m->gate_up, xn, T, act);
	capy_swiglu_rows(act, T, m->gate_up.n / 2);
	if (e->tp.ranks > 1) /* the dense MLP's intermediate columns split over the ranks */
		tp_linear(e, &m->down, act, T, out, &e->tp.mlp, 1);
	else
		par_linear(e, &m->down, act, T, out);
}

/* Token t's routed experts, weighted, into o (zeroed here) in ascending expert order (the
 * reference's); rank >= 0: only those the tensor-parallel rank holds (tp.c). */
static void routed_sum(const struct cpu_engine *e, uint64_t t, int rank, float *o)
{
	const uint64_t k = e->c.n_experts_per_tok, H = e->c.hidden_size;
	const struct scratch *s = &e->s;

	memset(o, 0, H * sizeof(float));
	for (uint64_t j = 0; j < k; j++) {
		if (rank >= 0 && capy_tp_expert_rank(&e->tp, (uint64_t)s->moe_ids[t * k + j]) != rank)
			continue;
		const float *d = s->moe_out + (t * k + j) * H;
		const float wt = s->moe_w[t * k + j];
		for (uint64_t i = 0; i < H; i++)
			o[i] += d[i] * wt;
	}
}

/* The combine as N ranks compute it (tp.c): rank r adds the token's routed experts it holds
 * (by id, ascending, as below), weighted, then the gated slice of the shared expert it holds;
 * the all-reduce adds the ranks. */
static void tp_combine(struct cpu_engine *e, const struct capy_moe_w *m, const float *xn, uint64_t T, float *out,
		       const float *gate)
{
	const uint64_t H = e->c.hidden_size;
	struct scratch *s = &e->s;
	float *acc = s->tp_x; /* free again once the partials are in */

	par_linear(e, &m->shared.gate_up, xn, T, s->big3);
	capy_swiglu_rows(s->big3, T, m->shared.gate_up.n / 2);
	tp_partials(e, &m->shared.down, s->big3, T, &e->tp.shared, 1);
	for (uint64_t t = 0; t < T; t++) {
		const float g = sigmoidf_(gate[t]);
		for (int r = 0; r < e->tp.ranks; r++) {
			float *sh = s->tp_part[r] + t * H;
			routed_sum(e, t, r, acc);
			for (uint64_t i = 0; i < H; i++)
				sh[i] = acc[i] + g * sh[i];
		}
	}
	tp_reduce(e, T, H, out);
}

/* Router: per token the chosen experts (ascending id) and their weights. */
static void route(const struct cpu_engine *e, const float *logits, uint64_t T, int32_t *ids, float *w)
{
	const struct capy_model_config *c = &e->c;
	uint64_t E = c->n_experts, k = c->n_experts_per_tok;
	float *p = e->s.logits_tmp;

	for (uint64_t t = 0; t < T; t++) {
		const float *l = logits + t * E;
		float mx = -INFINITY, sum = 0, top = 0;
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
			ids[t * k + n] = (int32_t)best;
			w[t * k + n] = p[best];
			top += p[best];
			p[best] = -1; /* taken */
		}
		if (c->norm_topk_prob)
			for (uint64_t n = 0; n < k; n++)
				w[t * k + n] /= top;
		/* Ascending expert id: the order the reference adds the experts in. */
		for (uint64_t a = 1; a < k; a++)
			for (uint64_t b = a; b > 0 && ids[t * k + b - 1] > ids[t * k + b]; b--) {
				int32_t ti = ids[t * k + b];
				float tw = w[t * k + b];
				ids[t * k + b] = ids[t * k + b - 1];
				w[t * k + b] = w[t * k + b - 1];
				ids[t * k + b - 1] = ti;
				w[t * k + b - 1] = tw;
			}
	}
}

struct expert_job {
	struct cpu_engine *e;
	const struct capy_moe_w *m;
	const float *xn;
	uint64_t n_active;
	const int32_t *active;   /* expert ids with work, ascending */
	const uint64_t *first;   /* [n_active + 1] offsets into slots */
	const int32_t *slots;    /* token slots (t * k + n) grouped by expert */
	_Atomic uint64_t next;
};

/* Each routed expert is computed whole by one thread (gate_up, SwiGLU, down over all its
 * tokens): splitting one small expert matrix over threads costs more in hand-offs than it
 * saves, while whole experts keep every thread streaming weights. Which thread takes an
 * expert does not change its result (capy_linear_rows is split-invariant). */
static void expert_worker(void *p, int ith, int nth)
{
	struct expert_job *j = p;
	struct cpu_engine *e = j->e;
	const struct capy_model_config *c = &e->c;
	uint64_t H = c->hidden_size, k = c->n_experts_per_tok, a;
	struct scratch *s = &e->s;
	float *x = s->moe_x_th[ith], *act = s->moe_act_th[ith];
	void *ws = s->lin_ws_th[ith];

	(void)nth;
	while ((a = atomic_fetch_add(&j->next, 1)) < j->n_active) {
		int32_t ex = j->active[a];
		uint64_t cnt = j->first[a + 1] - j->first[a];
		const int32_t *sl = j->slots + j->first[a];
		struct capy_linear_input *in;
		for (uint64_t r = 0; r < cnt; r++)
			memcpy(x + r * H, j->xn + (uint64_t)(sl[r] / (int32_t)k) * H, H * sizeof(float));
		capy_linear_prepare(&j->m->gate_up[ex], x, cnt, ws, &in);
		capy_expert_rows(&j->m->gate_up[ex], &j->m->down[ex], in, cnt, act, ws, x);
		for (uint64_t r = 0; r < cnt; r++)
			memcpy(s->moe_out + (uint64_t)sl[r] * H, x + r * H, H * sizeof(float));
	}
}

void moe_forward(struct cpu_engine *e, const struct capy_moe_w *m, const float *xn, uint64_t T, float *out)
{
	const struct capy_model_config *c = &e->c;
	uint64_t E = c->n_experts, k = c->n_experts_per_tok, H = c->hidden_size;
	struct scratch *s = &e->s;
	float *logits = s->big1, *shared = s->tmp, *gate = s->big2;
	struct expert_job job = { e, m, xn, 0, s->moe_active, s->moe_first, s->moe_rows, 0 };
	uint64_t n = 0;

	par_linear(e, &m->router, xn, T, logits);
	route(e, logits, T, s->moe_ids, s->moe_w);
	/* Token slots grouped by expert, experts in ascending order. */
	memset(s->moe_count, 0, E * sizeof(*s->moe_count));
	for (uint64_t i = 0; i < T * k; i++)
		s->moe_count[s->moe_ids[i]]++;
	for (uint64_t x = 0, off = 0; x < E; x++) {
		if (!s->moe_count[x])
			continue;
		s->moe_active[n] = (int32_t)x;
		s->moe_first[n++] = off;
		off += s->moe_count[x];
	}
	s->moe_first[n] = T * k;
	for (uint64_t a = 0; a < n; a++)
		s->moe_count[s->moe_active[a]] = s->moe_first[a]; /* now: the next free slot */
	for (uint64_t i = 0; i < T * k; i++)
		s->moe_rows[s->moe_count[s->moe_ids[i]]++] = (int32_t)i;
	job.n_active = n;
	/* Whole experts per thread; a step too small to share runs on this thread. */
	if (T * k * 3 * H * c->moe_intermediate_size < CPU_SMALL_WORK)
		expert_worker(&job, 0, 1);
	else
		capy_pool_run(e->pool, expert_worker, &job);

	par_linear(e, &m->shared_gate, xn, T, gate);
	if (e->tp.ranks > 1) {
		tp_combine(e, m, xn, T, out, gate);
		return;
	}
	mlp_forward(e, &m->shared, xn, T, shared, s->big3);
	for (uint64_t t = 0; t < T; t++) {
		float g = sigmoidf_(gate[t]), *o = out + t * H;
		routed_sum(e, t, -1, o);
		for (uint64_t i = 0; i < H; i++)
			o[i] = o[i] + g * shared[t * H + i];
	}
}
