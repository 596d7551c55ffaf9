/* ref.c - reading and writing the files of a capy-gate reference, and model.json (gate.h). */
#include "gate-impl.h"
#include "../artifact/artifact.h"
#include "../cpu/linear.h"
#include "../util/file.h"

#include <sys/stat.h>
#include <unistd.h>

const char *capy_gate_verdict_name(enum capy_gate_verdict v)
{
	static const char *const names[] = { "PASS", "WARN", "FAIL", "RECORDED" };

	return (unsigned)v < ARRAY_SIZE(names) ? names[v] : "?";
}

char *gate_ref_path(const struct capy_gate *g, const char *name)
{
	return capy_path_join(g->ref_dir, name);
}

int gate_bad_ref(struct capy_gate *g, struct capy_err *err, const char *file, const char *fmt, ...)
{
	char msg[CAPY_ERR_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	g->bad_ref = true;
	return capy_err_set(err, CAPY_EFORMAT, "'%s/%s': %s", g->ref_dir, file, msg);
}

int gate_read_text(struct capy_gate *g, const char *file, char **out, size_t *len, struct capy_err *err)
{
	char *path = gate_ref_path(g, file);
	struct capy_err e2 = { 0 };
	int rc;

	if (!path)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	rc = capy_read_file(path, 256u << 20, out, len, &e2);
	free(path);
	if (rc < 0) {
		g->bad_ref = true;
		return capy_err_set(err, CAPY_EFORMAT, "%s (record the reference with --record)", e2.msg);
	}
	return 0;
}

int gate_read_json(struct capy_gate *g, const char *file, cJSON **out, struct capy_err *err)
{
	char *text, *path;
	size_t len;
	int rc;

	if (gate_read_text(g, file, &text, &len, err) < 0)
		return CAPY_EFORMAT;
	path = gate_ref_path(g, file);
	{
		char what[4200];
		snprintf(what, sizeof(what), "'%s'", path ? path : file);
		rc = capy_json_parse(text, len, what, out, err);
	}
	free(path);
	free(text);
	if (rc < 0)
		g->bad_ref = true;
	return rc < 0 ? CAPY_EFORMAT : 0;
}

int gate_write_file(struct capy_gate *g, const char *file, const char *data, size_t len, struct capy_err *err)
{
	struct capy_outfile of;
	char *path = gate_ref_path(g, file);
	int rc;

	if (!path)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	if (mkdir(g->ref_dir, 0755) < 0 && errno != EEXIST) {
		rc = capy_err_errno(err, errno, "cannot create '%s'", g->ref_dir);
		free(path);
		return rc;
	}
	rc = capy_outfile_open(&of, path, err);
	if (rc == 0 && (rc = capy_pwrite_full(of.fd, data, len, 0, path, err)) == 0)
		rc = capy_outfile_commit(&of, err);
	else if (rc == 0)
		capy_outfile_abort(&of);
	free(path);
	return rc;
}

int gate_write_json(struct capy_gate *g, const char *file, const cJSON *tree, struct capy_err *err)
{
	char *text = cJSON_Print(tree), *withnl;
	size_t n;
	int rc;

	if (!text)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	n = strlen(text);
	withnl = realloc(text, n + 2);
	if (!withnl) {
		free(text);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	}
	withnl[n] = '\n';
	withnl[n + 1] = 0;
	rc = gate_write_file(g, file, withnl, n + 1, err);
	free(withnl);
	return rc;
}

int gate_json_ids(struct capy_gate *g, const char *file, const cJSON *list, const char *what, int32_t **ids, size_t *n,
		  struct capy_err *err)
{
	size_t i = 0, count;
	const cJSON *it;

	*ids = NULL;
	*n = 0;
	if (!cJSON_IsArray(list))
		return gate_bad_ref(g, err, file, "field '%s': a list of token ids is needed", what);
	count = (size_t)cJSON_GetArraySize(list);
	if (!(*ids = malloc((count ? count : 1) * sizeof(int32_t))))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	cJSON_ArrayForEach(it, list) {
		int64_t v;
		if (capy_json_i64(it, &v) < 0 || v < 0 || v > INT32_MAX) {
			free(*ids);
			*ids = NULL;
			return gate_bad_ref(g, err, file, "field '%s': item %zu is not a token id", what, i);
		}
		(*ids)[i++] = (int32_t)v;
	}
	*n = count;
	return 0;
}

cJSON *gate_ids_json(const int32_t *ids, size_t n)
{
	cJSON *list = cJSON_CreateArray();

	for (size_t i = 0; list && i < n; i++)
		if (!cJSON_AddItemToArray(list, cJSON_CreateNumber(ids[i]))) {
			cJSON_Delete(list);
			return NULL;
		}
	return list;
}

void gate_excerpt(char *out, size_t cap, const char *s, size_t len, size_t max)
{
	size_t o = 0;

	for (size_t i = 0; i < len && i < max && o + 8 < cap; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '\n')
			o += (size_t)snprintf(out + o, cap - o, "\\n");
		else if (c == '"' || c == '\\')
			o += (size_t)snprintf(out + o, cap - o, "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
		else
			out[o++] = (char)c;
	}
	if (len > max && o + 4 < cap)
		o += (size_t)snprintf(out + o, cap - o, "...");
	out[CAPY_MIN(o, cap - 1)] = 0;
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s ? s + 1 : path;
}

int capy_gate_model(struct capy_gate *g, struct capy_err *err)
{
	struct capy_gate_identity id;
	const char *family, *xxh, *name = "?";
	cJSON *j;
	int rc;

	if (capy_gate_identity(g->a, &id, err) < 0)
		return err ? err->code : CAPY_ENOMEM;
	if (g->record) {
		j = cJSON_CreateObject();
		if (!j || !cJSON_AddStringToObject(j, "model", base_name(g->model_path)) ||
		    !cJSON_AddStringToObject(j, "family", id.family) ||
		    !cJSON_AddStringToObject(j, "weights_xxh3", id.weights_xxh3) ||
		    !cJSON_AddStringToObject(j, "cpu_isa", capy_isa_name(capy_isa_get())) ||
		    !cJSON_AddStringToObject(j, "recorded_by", "capy-gate " CAPY_VERSION)) {
			cJSON_Delete(j);
			return capy_err_set(err, CAPY_ENOMEM, "out of memory");
		}
		rc = gate_write_json(g, "model.json", j, err);
		cJSON_Delete(j);
		return rc;
	}
	if ((rc = gate_read_json(g, "model.json", &j, err)) < 0)
		return rc;
	if (capy_json_get_string(j, "family", true, &family, "model.json", NULL) < 0)
		rc = gate_bad_ref(g, err, "model.json", "field 'family': a string is needed");
	else if (capy_json_get_string(j, "weights_xxh3", true, &xxh, "model.json", NULL) < 0)
		rc = gate_bad_ref(g, err, "model.json", "field 'weights_xxh3': a string is needed");
	else {
		const char *isa = "";
		capy_json_get_string(j, "model", false, &name, "model.json", NULL);
		if (capy_json_get_string(j, "cpu_isa", false, &isa, "model.json", NULL) < 0 ||
		    strlen(isa) >= sizeof(g->ref_isa))
			rc = gate_bad_ref(g, err, "model.json", "field 'cpu_isa': a name of CPU kernels is needed");
		snprintf(g->ref_isa, sizeof(g->ref_isa), "%s", isa);
		if (!rc && (strcmp(family, id.family) || strcmp(xxh, id.weights_xxh3)))
			rc = gate_bad_ref(
				g, err, "model.json",
				"field '%s': the reference is of another model ('%s', %s, weights %s), not of '%s' "
				"(%s, weights %s)",
				strcmp(family, id.family) ? "family" : "weights_xxh3", name, family, xxh, g->model_path,
				id.family, id.weights_xxh3);
	}
	cJSON_Delete(j);
	return rc;
}
