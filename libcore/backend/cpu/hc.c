/* hc.c - qwen4_exp hyper-connections: the hidden state is hc_count residual streams;
 * before each block a gated mixer reads them into the block input, and the block's
 * output is injected back into every stream with its own weight.
 *
 *	xn    = RMSNorm per stream (1 + w)
 *	mix   = sigmoid(up(silu(down(xn) / hc)))                 [hc * H]
 *	input = mean over streams of mix * xn                    [H]
 *	inj   = 2 sigmoid(inject(xn) / hc)                       [hc]
 *	X    += block(input) (x) inj      (stream h gets block(input) * inj[h])
 */
#include "cpu-impl.h"

void hc_mix(struct cpu_engine *e, const struct capy_hc_w *h, const float *X, uint64_t T, float *mixed,
	    float *inj, float *xn_tmp)
{
	const struct capy_model_config *c = &e->c;
	uint64_t H = c->hidden_size, hc = c->hc_count, hh = hc * H, r = c->hc_lowrank;
	float *low = e->s.big1, *mix = e->s.big2;
	const float fhc = (float)hc;

	for (uint64_t t = 0; t < T; t++)
		rmsnorm_1p(X + t * hh, h->norm, xn_tmp + t * hh, hh, H, (float)c->rms_norm_eps);
	par_linear(e, &h->down, xn_tmp, T, low);
	for (uint64_t i = 0; i < T * r; i++)
		low[i] = silu(low[i] / fhc);
	par_linear(e, &h->up, low, T, mix);
	for (uint64_t t = 0; t < T; t++) {
		const float *xn = xn_tmp + t * hh, *m = mix + t * hh;
		for (uint64_t i = 0; i < H; i++) {
			float acc = 0;
			for (uint64_t s = 0; s < hc; s++)
				acc += sigmoidf_(m[s * H + i]) * xn[s * H + i];
			mixed[t * H + i] = acc / fhc;
		}
	}
	if (inj) {
		par_linear(e, &h->inject, xn_tmp, T, inj);
		for (uint64_t i = 0; i < T * hc; i++)
			inj[i] = 2.0f * sigmoidf_(inj[i] / fhc);
	}
}
