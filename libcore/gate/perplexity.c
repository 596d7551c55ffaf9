/* perplexity.c - capy-gate's ppl stage: capy-ppl's per-window table over the reference's text,
 * every printed digit equal, or with --paired a paired test per window (gate.h, stats.h). */
#include "gate-impl.h"
#include "../engine/engine.h"
#include "../model/assets.h"
#include "../ppl/ppl.h"
#include "../stats/stats.h"
#include "../util/buf.h"
#include "../util/file.h"

#include <math.h>
#include <time.h>

#define PPL_FILE "ppl.tsv"
#define PPL_TEXT "ppl-text.txt"
/* Windows that do not overlap (each token run once, the windows independent for the paired
 * test), short enough that a text of a few thousand bytes gives ten or more of them. */
#define PPL_CTX 64

/* One row of the table, as printed. */
struct row {
	char f[5][40]; /* begin, end, scored, nll (capy-ppl's digits), nll_sum (%.17g) */
};

static void format_row(struct row *r, const struct capy_ppl_window *w)
{
	snprintf(r->f[0], sizeof(r->f[0]), "%" PRIu64, w->begin);
	snprintf(r->f[1], sizeof(r->f[1]), "%" PRIu64, w->end);
	snprintf(r->f[2], sizeof(r->f[2]), "%" PRIu64, w->scored);
	capy_ppl_format_nll(r->f[3], sizeof(r->f[3]), capy_ppl_window_nll(w));
	snprintf(r->f[4], sizeof(r->f[4]), "%.17g", w->nll_sum);
}

static const char *const columns[5] = { "begin", "end", "scored", "nll", "nll_sum" };

struct table {
	uint64_t ctx, stride;
	char summary[256];
	struct row *rows;
	size_t n;
};

/* Parse ppl.tsv (the format table_text writes). */
static int parse_table(struct capy_gate *g, char *text, struct table *t, struct capy_err *err)
{
	size_t lineno = 0, cap = 0;
	bool header = false;
	char *save = NULL;

	memset(t, 0, sizeof(*t));
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *f[6], *s2 = NULL, *tok;
		int nf = 0;
		lineno++;
		if (*line == '#')
			continue;
		if (!strncmp(line, "summary\t", 8)) {
			snprintf(t->summary, sizeof(t->summary), "%s", line + 8);
			continue;
		}
		for (tok = strtok_r(line, "\t", &s2); tok && nf < 6; tok = strtok_r(NULL, "\t", &s2))
			f[nf++] = tok;
		if (nf == 4 && !strcmp(f[0], "ctx") && !strcmp(f[2], "stride")) {
			char *e1, *e2;
			t->ctx = strtoull(f[1], &e1, 10);
			t->stride = strtoull(f[3], &e2, 10);
			if (*e1 || *e2 || t->ctx < 2 || !t->stride || t->stride > t->ctx)
				return gate_bad_ref(g, err, PPL_FILE, "line %zu: field 'ctx'/'stride': bad values",
						    lineno);
			continue;
		}
		if (nf == 5 && !strcmp(f[0], "begin")) {
			header = true;
			continue;
		}
		if (!header || nf != 5)
			return gate_bad_ref(g, err, PPL_FILE, "line %zu: a window row needs the 5 fields %s", lineno,
					    header ? "begin, end, scored, nll, nll_sum" : "after the 'begin' header");
		if (t->n == cap) {
			struct row *p = realloc(t->rows, (cap = cap ? 2 * cap : 32) * sizeof(*p));
			if (!p)
				return capy_err_set(err, CAPY_ENOMEM, "out of memory");
			t->rows = p;
		}
		for (int i = 0; i < 5; i++) {
			if (strlen(f[i]) >= sizeof(t->rows[0].f[0]))
				return gate_bad_ref(g, err, PPL_FILE, "line %zu: field '%s' is too long", lineno,
						    columns[i]);
			snprintf(t->rows[t->n].f[i], sizeof(t->rows[0].f[0]), "%s", f[i]);
		}
		t->n++;
	}
	if (!t->ctx)
		return gate_bad_ref(g, err, PPL_FILE, "no 'ctx' line");
	if (!*t->summary)
		return gate_bad_ref(g, err, PPL_FILE, "no 'summary' line");
	if (!t->n)
		return gate_bad_ref(g, err, PPL_FILE, "no window rows");
	return 0;
}

/* The reference file of a result. */
static int table_text(struct capy_buf *b, const struct capy_ppl_result *r, uint64_t ctx, uint64_t stride)
{
	char summary[256];
	struct row row;

	capy_ppl_format_summary(summary, sizeof(summary), r, ctx, stride);
	capy_buf_printf(b,
			"# capy-gate ppl: capy-ppl's windows over " PPL_TEXT "; nll as capy-ppl --json prints it,\n"
			"# nll_sum the window's exact NLL sum (for --paired)\n"
			"ctx\t%" PRIu64 "\tstride\t%" PRIu64 "\nsummary\t%s\nbegin\tend\tscored\tnll\tnll_sum\n",
			ctx, stride, summary);
	for (size_t i = 0; i < r->n_windows; i++) {
		format_row(&row, &r->windows[i]);
		capy_buf_printf(b, "%s\t%s\t%s\t%s\t%s\n", row.f[0], row.f[1], row.f[2], row.f[3], row.f[4]);
	}
	return b->oom ? CAPY_ENOMEM : 0;
}

/* Every printed field equal; else the first difference. */
static void compare_strict(const struct table *t, const struct capy_ppl_result *r, struct capy_gate_report *rep)
{
	char summary[256];

	capy_ppl_format_summary(summary, sizeof(summary), r, t->ctx, t->stride);
	if (r->n_windows != t->n) {
		rep->verdict = CAPY_GATE_FAIL;
		snprintf(rep->line, sizeof(rep->line), "%zu windows, reference %zu (the text's tokens changed)",
			 r->n_windows, t->n);
		return;
	}
	for (size_t i = 0; i < t->n; i++) {
		struct row row;
		format_row(&row, &r->windows[i]);
		for (int c = 0; c < 5; c++)
			if (strcmp(row.f[c], t->rows[i].f[c])) {
				rep->verdict = CAPY_GATE_FAIL;
				snprintf(rep->line, sizeof(rep->line),
					 "window %zu (tokens %s..%s): %s %s, reference %s%s", i, t->rows[i].f[0],
					 t->rows[i].f[1], columns[c], row.f[c], t->rows[i].f[c],
					 c == 4 ? " (the printed nll equal)" : "");
				return;
			}
	}
	if (strcmp(summary, t->summary)) {
		rep->verdict = CAPY_GATE_FAIL;
		snprintf(rep->line, sizeof(rep->line), "'%s', reference '%s'", summary, t->summary);
		return;
	}
	rep->verdict = CAPY_GATE_PASS;
	snprintf(rep->line, sizeof(rep->line), "%zu windows, %s: every digit equal", t->n, summary);
}

/* The paired test of the windows' mean NLL against the reference's (docs/gate.md). */
static int compare_paired(const struct table *t, const struct capy_ppl_result *r, struct capy_gate_report *rep,
			  struct capy_err *err)
{
	struct capy_paired p;
	double *d;
	bool worse, big;

	if (r->n_windows != t->n) {
		rep->verdict = CAPY_GATE_FAIL;
		snprintf(rep->line, sizeof(rep->line), "paired: %zu windows, reference %zu (the text's tokens changed)",
			 r->n_windows, t->n);
		return 0;
	}
	if (!(d = malloc(t->n * sizeof(double))))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	for (size_t i = 0; i < t->n; i++) {
		struct row row;
		double ref_sum = strtod(t->rows[i].f[4], NULL), scored = strtod(t->rows[i].f[2], NULL);
		format_row(&row, &r->windows[i]);
		if (strcmp(row.f[0], t->rows[i].f[0]) || strcmp(row.f[1], t->rows[i].f[1]) ||
		    strcmp(row.f[2], t->rows[i].f[2])) {
			rep->verdict = CAPY_GATE_FAIL;
			snprintf(rep->line, sizeof(rep->line), "paired: window %zu is tokens %s..%s, reference %s..%s",
				 i, row.f[0], row.f[1], t->rows[i].f[0], t->rows[i].f[1]);
			free(d);
			return 0;
		}
		d[i] = capy_ppl_window_nll(&r->windows[i]) - (scored > 0 ? ref_sum / scored : 0);
	}
	capy_stats_paired(d, t->n, &p);
	free(d);
	/* worse: higher NLL, significantly; or a change of 0.5 % or more either way */
	worse = p.mean > 0 && p.p < 0.05;
	big = fabs(p.change) >= 0.005;
	rep->verdict = worse || big ? CAPY_GATE_FAIL : CAPY_GATE_PASS;
	snprintf(rep->line, sizeof(rep->line),
		 "paired over %zu windows: mean NLL change %+.3g (se %.3g, t %.3g, p %.3g), ppl change %+.3g %% "
		 "(95 %%: %+.3g .. %+.3g %%), sign test %" PRIu64 " worse %" PRIu64 " better %" PRIu64
		 " equal p %.3g%s%s",
		 p.n, p.mean, p.se, p.t, p.p, 100 * p.change, 100 * p.change_lo, 100 * p.change_hi, p.worse, p.better,
		 p.ties, p.sign_p, worse ? "; worse at p < 0.05" : "", big ? "; |change| >= 0.5 %" : "");
	return 0;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int capy_gate_ppl(struct capy_gate *g, struct capy_gate_report *r, struct capy_err *err)
{
	struct capy_tokens ids = { 0 };
	struct capy_ppl_result res = { 0 };
	struct table t = { 0 };
	struct capy_buf b = { 0 };
	char *text = NULL, *tsv = NULL;
	size_t len, tsv_len;
	uint64_t run = 0;
	double t0;
	int rc;

	if (g->record) {
		struct capy_err e2 = { 0 };
		if (!g->ppl_text)
			return capy_err_set(err, CAPY_EINVAL, "recording the ppl stage needs --ppl-text");
		if (capy_read_file(g->ppl_text, 64u << 20, &text, &len, &e2) < 0)
			return capy_err_set(err, e2.code, "%s", e2.msg);
		t.ctx = t.stride = PPL_CTX;
	} else {
		if ((rc = gate_read_text(g, PPL_TEXT, &text, &len, err)) < 0 ||
		    (rc = gate_read_text(g, PPL_FILE, &tsv, &tsv_len, err)) < 0 ||
		    (rc = parse_table(g, tsv, &t, err)) < 0)
			goto done;
	}
	if (!g->as->tok) {
		rc = capy_err_set(err, CAPY_EUNSUPPORTED, "'%s' has no tokenizer", g->model_path);
		goto done;
	}
	if ((rc = capy_tokenizer_encode(g->as->tok, text, len, 0, &ids, err)) < 0) {
		capy_err_prefix(err, "'%s'", g->record ? g->ppl_text : PPL_TEXT);
		goto done;
	}
	t0 = now();
	if ((rc = capy_ppl_run(g->e, ids.ids, ids.n, &(struct capy_ppl_opts){ .ctx = t.ctx, .stride = t.stride }, &res,
			       err)) < 0)
		goto done;
	for (size_t i = 0; i < res.n_windows; i++)
		run += res.windows[i].end - res.windows[i].begin;
	g->timing.ppl_tok_s = (double)run / CAPY_MAX(now() - t0, 1e-9);
	if (g->record) {
		char summary[256];
		if ((rc = table_text(&b, &res, t.ctx, t.stride)) < 0) {
			capy_err_set(err, rc, "out of memory");
			goto done;
		}
		if ((rc = gate_write_file(g, PPL_TEXT, text, len, err)) < 0 ||
		    (rc = gate_write_file(g, PPL_FILE, b.data, b.len, err)) < 0)
			goto done;
		capy_ppl_format_summary(summary, sizeof(summary), &res, t.ctx, t.stride);
		r->verdict = CAPY_GATE_RECORDED;
		snprintf(r->line, sizeof(r->line), "%zu windows, %s", res.n_windows, summary);
	} else if (g->paired) {
		rc = compare_paired(&t, &res, r, err);
	} else {
		compare_strict(&t, &res, r);
	}
done:
	capy_buf_release(&b);
	capy_ppl_result_release(&res);
	capy_tokens_release(&ids);
	free(t.rows);
	free(tsv);
	free(text);
	return rc;
}
