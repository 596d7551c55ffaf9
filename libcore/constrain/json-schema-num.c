/* json-schema-num.c - integers and numbers within minimum/maximum/exclusive* bounds, written
 * digit by digit: a range of naturals of one length is a few alternatives of a digit class
 * followed by the same problem one digit shorter (so the grammar is exact and unambiguous).
 * Numbers with bounds are written without an exponent; their bounds must be integral. */
#include "json-schema-impl.h"

#include <math.h>

#define MAX_MAGNITUDE 9999999999999999LL /* 16 digits: what json-integer writes */

/* --- reading the bounds ------------------------------------------------------------------------ */

static int bound_number(struct js_ctx *c, const cJSON *s, const char *key, const char *ptr, const cJSON **out)
{
	char at[JS_PTR_MAX];
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);

	*out = NULL;
	if (!v)
		return 0;
	js_ptr_push(at, sizeof(at), ptr, key);
	if (cJSON_IsBool(v) && (!strcmp(key, "exclusiveMinimum") || !strcmp(key, "exclusiveMaximum"))) {
		*out = v; /* draft 4: a flag on minimum/maximum */
		return 0;
	}
	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
		return js_fail(c, CAPY_EFORMAT, at, "\"%s\" must be a number", key);
	*out = v;
	return 0;
}

static int64_t clamp_magnitude(double v)
{
	return v > (double)MAX_MAGNITUDE ? MAX_MAGNITUDE + 1 : v < -(double)MAX_MAGNITUDE ? -MAX_MAGNITUDE - 1 : (int64_t)v;
}

/* One bound: the value (rounded inward for integers) and whether it is exclusive. 1: none. */
static int one_bound(struct js_ctx *c, const cJSON *incl, const cJSON *excl, bool lower, bool integer, const char *ptr,
		     int64_t *val, bool *is_excl)
{
	const cJSON *v = incl;
	bool x = false;

	if (excl && cJSON_IsNumber(excl)) {
		/* both given: the stricter one */
		if (!incl || (lower ? excl->valuedouble >= incl->valuedouble : excl->valuedouble <= incl->valuedouble)) {
			v = excl;
			x = true;
		}
	} else if (excl && cJSON_IsTrue(excl)) {
		x = true;
	}
	if (!v)
		return 1;
	double d = v->valuedouble;
	if (integer) {
		d = lower ? (x ? floor(d) + 1 : ceil(d)) : (x ? ceil(d) - 1 : floor(d));
		x = false;
	} else if (floor(d) != d) {
		char at[JS_PTR_MAX];
		js_ptr_push(at, sizeof(at), ptr, v->string);
		if (c->opts->strict)
			return js_fail(c, CAPY_EUNSUPPORTED, at, "a bound of a number that is not an integer is not supported");
		return 1; /* relaxed: the bound is dropped */
	}
	*val = clamp_magnitude(d);
	*is_excl = x;
	return 0;
}

int js_bounds_read(struct js_ctx *c, const cJSON *s, bool integer, const char *ptr, struct js_bounds *b)
{
	const cJSON *min, *max, *xmin, *xmax;
	int r;

	memset(b, 0, sizeof(*b));
	if (bound_number(c, s, "minimum", ptr, &min) || bound_number(c, s, "maximum", ptr, &max) ||
	    bound_number(c, s, "exclusiveMinimum", ptr, &xmin) || bound_number(c, s, "exclusiveMaximum", ptr, &xmax))
		return c->rc;
	if ((r = one_bound(c, min, xmin, true, integer, ptr, &b->lo, &b->lo_excl)) < 0)
		return r;
	b->has_lo = r == 0;
	if ((r = one_bound(c, max, xmax, false, integer, ptr, &b->hi, &b->hi_excl)) < 0)
		return r;
	b->has_hi = r == 0;
	return b->has_lo || b->has_hi ? 0 : 1;
}

/* --- ranges of naturals ------------------------------------------------------------------------ */

static void digit_class(struct capy_buf *b, char lo, char hi)
{
	if (lo == hi)
		capy_buf_printf(b, " \"%c\"", lo);
	else
		capy_buf_printf(b, " [%c-%c]", lo, hi);
}

/* The naturals of n digits from x to y (digit strings, x <= y). */
static void same_length(struct capy_buf *b, const char *x, const char *y, size_t n)
{
	char nines[20], zeros[20];

	if (!n)
		return;
	if (x[0] == y[0]) {
		digit_class(b, x[0], x[0]);
		same_length(b, x + 1, y + 1, n - 1);
		return;
	}
	memset(nines, '9', n - 1);
	memset(zeros, '0', n - 1);
	bool from_zeros = !memcmp(x + 1, zeros, n - 1), to_nines = !memcmp(y + 1, nines, n - 1);
	char first = x[0], last = y[0];
	const char *sep = "";
	capy_buf_puts(b, " (");
	if (!from_zeros) { /* x[0] then x's tail up to 9...9 */
		digit_class(b, first, first);
		same_length(b, x + 1, nines, n - 1);
		first++;
		sep = " |";
	}
	if (!to_nines)
		last--;
	if (first <= last) { /* whole decades in between */
		capy_buf_puts(b, sep);
		digit_class(b, first, last);
		if (n > 2)
			capy_buf_printf(b, " [0-9]{%zu}", n - 1);
		else if (n == 2)
			capy_buf_puts(b, " [0-9]");
		sep = " |";
	}
	if (!to_nines) { /* y[0] then 0...0 up to y's tail */
		capy_buf_puts(b, sep);
		digit_class(b, y[0], y[0]);
		same_length(b, zeros, y + 1, n - 1);
	}
	capy_buf_puts(b, " )");
}

/* Alternatives (each starting with " |" unless first) of the naturals from a to b. */
static void natural_range(struct capy_buf *out, int64_t a, int64_t b, bool *first)
{
	int64_t p = 1;

	for (int len = 1; len <= 16 && a <= b; len++, p *= 10) {
		int64_t top = p * 10 - 1;
		if (a > top)
			continue;
		char x[24], y[24];
		int n = snprintf(x, sizeof(x), "%" PRId64, a);
		snprintf(y, sizeof(y), "%" PRId64, b < top ? b : top);
		capy_buf_puts(out, *first ? "" : " |");
		*first = false;
		same_length(out, x, y, (size_t)n);
		a = top + 1;
	}
}

/* --- numbers ------------------------------------------------------------------------------------- */

/* The magnitudes m with lo < m (lo_x) or lo <= m, and m < hi (hi_x) or m <= hi, as
 * alternatives: an integer part and, for numbers, a fraction. */
static void magnitudes(struct js_ctx *c, struct capy_buf *out, int64_t lo, bool lo_x, int64_t hi, bool hi_x,
		       bool integer, bool *first)
{
	if (integer) {
		natural_range(out, lo + lo_x, hi - hi_x, first);
		return;
	}
	if (lo_x && lo < hi) { /* lo itself with a fraction that is not zero */
		bool one = true;
		capy_buf_puts(out, *first ? "" : " |");
		*first = false;
		natural_range(out, lo, lo, &one);
		capy_buf_printf(out, " %s", js_prim(c, P_FRAC_NONZERO));
	}
	if (lo + lo_x <= hi - 1) { /* any fraction */
		bool one = true;
		struct capy_buf part = { 0 };
		natural_range(&part, lo + lo_x, hi - 1, &one);
		capy_buf_printf(out, "%s (%s ) %s?", *first ? "" : " |", part.data, js_prim(c, P_FRAC));
		capy_buf_release(&part);
		*first = false;
	}
	if (!hi_x && (lo < hi || !lo_x)) /* hi itself, no fraction */
		natural_range(out, hi, hi, first);
}

const char *js_number_rule(struct js_ctx *c, const struct js_bounds *b, bool integer, const char *ptr)
{
	struct capy_buf body = { 0 }, neg = { 0 };
	bool first = true, neg_first = true;
	int64_t lo = b->has_lo ? b->lo : -MAX_MAGNITUDE, hi = b->has_hi ? b->hi : MAX_MAGNITUDE;
	bool lo_x = b->has_lo && b->lo_excl, hi_x = b->has_hi && b->hi_excl;

	if (hi >= 0 && !(hi == 0 && hi_x) && lo <= MAX_MAGNITUDE) {
		bool from_x = lo >= 0 && lo_x;
		magnitudes(c, &body, lo > 0 ? lo : 0, from_x, hi < MAX_MAGNITUDE ? hi : MAX_MAGNITUDE, hi_x, integer,
			   &first);
	}
	if (lo < 0 && hi >= -MAX_MAGNITUDE) { /* -m with m > 0, -hi <= m <= -lo */
		int64_t mlo = hi < 0 ? -hi : 0;
		bool mlo_x = hi < 0 ? hi_x : true;
		magnitudes(c, &neg, mlo, mlo_x, -lo < MAX_MAGNITUDE ? -lo : MAX_MAGNITUDE, lo_x, integer, &neg_first);
		if (!neg_first) {
			capy_buf_printf(&body, "%s \"-\" (%s )", first ? "" : " |", neg.data);
			first = false;
		}
	}
	capy_buf_release(&neg);
	if (first) {
		capy_buf_release(&body);
		js_fail(c, CAPY_EFORMAT, ptr, "no %s lies within minimum/maximum", integer ? "integer" : "number");
		return NULL;
	}
	const char *name = js_rule(c, integer ? "integer" : "number", &body);
	capy_buf_release(&body);
	return name;
}
