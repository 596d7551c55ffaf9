/* timing.c - capy-gate's timing stage: the speeds the other stages measured, reported against
 * the reference's; WARN when slower by more than the tolerance, never FAIL (gate.h). */
#include "gate-impl.h"

#define TIMING_FILE "timing.json"

struct metric {
	const char *key, *unit;
	bool rate; /* tok/s (higher is better), else seconds (lower is better) */
	size_t offset;
};

static const struct metric metrics[] = {
	{ "prefill_tok_s", "tok/s", true, offsetof(struct capy_gate_timing, prefill_tok_s) },
	{ "decode_tok_s", "tok/s", true, offsetof(struct capy_gate_timing, decode_tok_s) },
	{ "ppl_tok_s", "tok/s", true, offsetof(struct capy_gate_timing, ppl_tok_s) },
	{ "greedy_s", "s", false, offsetof(struct capy_gate_timing, greedy_s) },
};

static double value(const struct capy_gate_timing *t, const struct metric *m)
{
	return *(const double *)((const char *)t + m->offset);
}

int capy_gate_timing(struct capy_gate *g, struct capy_gate_report *r, struct capy_err *err)
{
	size_t n = 0, slow = 0, measured = 0;
	cJSON *ref;
	int rc = 0;

	if (g->record) {
		if (!(ref = cJSON_CreateObject()))
			return capy_err_set(err, CAPY_ENOMEM, "out of memory");
		for (size_t i = 0; i < ARRAY_SIZE(metrics); i++) {
			double v = value(&g->timing, &metrics[i]);
			if (v > 0 && !cJSON_AddNumberToObject(ref, metrics[i].key, v))
				rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
			if (v > 0)
				n += (size_t)snprintf(r->line + n, sizeof(r->line) - n, "%s%s %.4g %s", n ? ", " : "",
						      metrics[i].key, v, metrics[i].unit);
		}
		if (!n)
			snprintf(r->line, sizeof(r->line), "nothing measured (no golden, ppl or greedy stage ran)");
		if (!rc)
			rc = gate_write_json(g, TIMING_FILE, ref, err);
		cJSON_Delete(ref);
		r->verdict = CAPY_GATE_RECORDED;
		return rc;
	}
	if (gate_read_json(g, TIMING_FILE, &ref, err) < 0)
		return CAPY_EFORMAT;
	for (size_t i = 0; i < ARRAY_SIZE(metrics); i++) {
		double v = value(&g->timing, &metrics[i]), was = 0;
		bool slower;
		if (capy_json_get_double(ref, metrics[i].key, false, &was, TIMING_FILE, NULL) < 0 || !(was >= 0)) {
			cJSON_Delete(ref);
			return gate_bad_ref(g, err, TIMING_FILE, "field '%s': a non-negative number is needed",
					    metrics[i].key);
		}
		if (!(v > 0) || !(was > 0))
			continue;
		measured++;
		/* slower by more than the tolerance: the time per token (or in all) grew by more */
		slower = metrics[i].rate ? was / v > 1 + g->timing_tolerance : v / was > 1 + g->timing_tolerance;
		slow += slower;
		n += (size_t)snprintf(r->line + n, sizeof(r->line) - n, "%s%s %.4g %s (reference %.4g, %.2fx%s)",
				      n ? ", " : "", metrics[i].key, v, metrics[i].unit, was,
				      metrics[i].rate ? v / was : was / v, slower ? ", slower" : "");
	}
	cJSON_Delete(ref);
	if (!measured)
		snprintf(r->line, sizeof(r->line), "nothing to compare (no stage measured what the reference holds)");
	r->verdict = slow || !measured ? CAPY_GATE_WARN : CAPY_GATE_PASS;
	if (slow && n < sizeof(r->line))
		snprintf(r->line + n, sizeof(r->line) - n, "; %zu slower by more than %.0f %%", slow,
			 100 * g->timing_tolerance);
	return 0;
}
