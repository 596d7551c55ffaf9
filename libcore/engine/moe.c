/* moe.c - the SwiGLU MLP and the sparse MoE block: softmax router over all experts,
 * top-k (renormalized when the config says so), routed experts summed in ascending
 * expert order (the reference's order), plus the sigmoid-gated shared expert. */
#include "engine-impl.h"

#include <math.h>

void mlp_forward(struct capy_engine *e, const struct mlp_w *m, const float *xn, uint64_t T, float *out,
		 float *act)
{
	uint64_t inter = m->gate_up.n / 2;

	par_linear(e, &m->gate_up, xn, T, act);
	for (uint64_t t = 0; t < T; t++) {
		float *row = act + t * 2 * inter;
		/* in place: row[i] = silu(gate_i) * up_i, compacted to the first inter values */
		for (uint64_t i = 0; i < inter; i++)
			row[i] = silu(row[i]) * row[inter + i];
		if (t)
			memmove(act + t * inter, row, inter * sizeof(float));
	}
	par_linear(e, &m->down, act, T, out);
}

/* Router: per token the chosen experts (ascending id) and their weights. */
static void route(const struct capy_engine *e, const float *logits, uint64_t T, int32_t *ids, float *w)
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

void moe_forward(struct capy_engine *e, const struct moe_w *m, const float *xn, uint64_t T, float *out)
{
	const struct capy_model_config *c = &e->c;
	uint64_t E = c->n_experts, k = c->n_experts_per_tok, H = c->hidden_size;
	uint64_t I = c->moe_intermediate_size;
	struct scratch *s = &e->s;
	float *logits = s->big1, *shared = s->tmp, *gate = s->big2;

	par_linear(e, &m->router, xn, T, logits);
	route(e, logits, T, s->moe_ids, s->moe_w);

	/* Each expert once, over all the token slots routed to it. */
	for (uint64_t x = 0; x < E; x++) {
		uint64_t cnt = 0;
		for (uint64_t i = 0; i < T * k; i++)
			if ((uint64_t)s->moe_ids[i] == x)
				s->moe_rows[cnt++] = (int32_t)i;
		if (!cnt)
			continue;
		for (uint64_t r = 0; r < cnt; r++)
			memcpy(s->moe_x + r * H, xn + (s->moe_rows[r] / k) * H, H * sizeof(float));
		par_linear(e, &m->gate_up[x], s->moe_x, cnt, s->moe_act);
		for (uint64_t r = 0; r < cnt; r++) {
			float *row = s->moe_act + r * 2 * I;
			for (uint64_t i = 0; i < I; i++)
				row[i] = silu(row[i]) * row[I + i];
			if (r)
				memmove(s->moe_act + r * I, row, I * sizeof(float));
		}
		par_linear(e, &m->down[x], s->moe_act, cnt, s->moe_x);
		for (uint64_t r = 0; r < cnt; r++)
			memcpy(s->moe_out + (uint64_t)s->moe_rows[r] * H, s->moe_x + r * H, H * sizeof(float));
	}

	mlp_forward(e, &m->shared, xn, T, shared, s->big3);
	par_linear(e, &m->shared_gate, xn, T, gate);
	for (uint64_t t = 0; t < T; t++) {
		float g = sigmoidf_(gate[t]), *o = out + t * H;
		memset(o, 0, H * sizeof(float));
		for (uint64_t n = 0; n < k; n++) {
			const float *d = s->moe_out + (t * k + n) * H;
			float wt = s->moe_w[t * k + n];
			for (uint64_t i = 0; i < H; i++)
				o[i] += d[i] * wt;
		}
		for (uint64_t i = 0; i < H; i++)
			o[i] = o[i] + g * shared[t * H + i];
	}
}
