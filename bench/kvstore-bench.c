/* kvstore-bench.c - the context cache's tiers against a cold prefill: how long a prompt of N
 * tokens takes to read from scratch, to resume from the device tier (pages shared, snapshot
 * restored), to demote to host RAM, to restore from host RAM, to write to disk and to restore
 * from disk (file read, zstd, checksums, copies into the engine), on one device.
 *
 *	kvstore-bench MODEL.capy [--tokens N] [--threads T] [--kv bf16|int8|f32] [--dir DIR]
 *	              [--device cpu|cuda] [--reps R]
 *
 * Each restore is checked: the logits of one more token equal the device tier's bit for bit.
 * The disk restore is timed twice: with the file in the page cache, and after
 * posix_fadvise(DONTNEED) asked the kernel to drop it (a cold read, as after a restart).
 * Prints one line per measurement on stdout (the best of R runs; the prefill runs once). */
#include "core.h"
#include "engine/engine.h"
#include "kvstore/kvstore.h"
#include "util/parse.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const struct capy_err *err)
{
	fprintf(stderr, "kvstore-bench: %s: %s\n", what, err->msg);
	exit(1);
}

static float *next_logits(struct capy_engine *e, struct capy_seq *s, int32_t tok, uint64_t V)
{
	struct capy_err err = { 0 };
	float *lg = malloc(V * sizeof(float));

	if (!lg || capy_engine_forward(e, s, &tok, 1, lg, false, &err) < 0)
		die("forward", &err);
	return lg;
}

int main(int argc, char **argv)
{
	const char *model = NULL, *dir = "/tmp", *kvname = "bf16", *device = "cpu";
	uint64_t n = 4096, threads = 0, reps = 5;
	struct capy_err err = { 0 };
	struct capy_artifact *a;
	struct capy_engine *e;
	struct capy_seq *s, *h, *r;
	struct capy_snapshot *sn;
	struct capy_kv_ident id;
	struct capy_kv_entry *en = NULL, *back;
	char path[4096];
	uint64_t fbytes = 0;
	double t, best;

	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(argv[i], "--tokens") && v && capy_parse_u64(v, 1u << 24, &n, &err) == 0)
			i++;
		else if (!strcmp(argv[i], "--threads") && v && capy_parse_u64(v, 1024, &threads, &err) == 0)
			i++;
		else if (!strcmp(argv[i], "--reps") && v && capy_parse_u64(v, 1000, &reps, &err) == 0)
			i++;
		else if (!strcmp(argv[i], "--kv") && v)
			kvname = argv[++i];
		else if (!strcmp(argv[i], "--dir") && v)
			dir = argv[++i];
		else if (!strcmp(argv[i], "--device") && v)
			device = argv[++i];
		else if (argv[i][0] != '-' && !model)
			model = argv[i];
		else {
			fprintf(stderr, "usage: kvstore-bench MODEL.capy [--tokens N] [--threads T] [--kv bf16|int8|f32] "
					"[--dir DIR] [--device cpu|cuda] [--reps R]\n");
			return 2;
		}
	}
	if (!model || capy_kv_dtype_parse(kvname) < 0 || !reps) {
		fprintf(stderr, "kvstore-bench: a model, a KV type (bf16, int8, f32) and --reps >= 1, please\n");
		return 2;
	}
	if (capy_artifact_open(&a, model, &err) < 0 ||
	    capy_engine_new(&e, a, &(struct capy_engine_opts){ .threads = (int)threads, .device = device,
			    .kv = (enum capy_kv_dtype)capy_kv_dtype_parse(kvname) }, &err) < 0)
		die(model, &err);
	uint64_t V = capy_engine_config(e)->vocab_size;
	int32_t *p = malloc((n + 1) * sizeof(int32_t));
	for (uint64_t i = 0; i <= n; i++)
		p[i] = (int32_t)((i * 7919u + 13) % V);

	if (capy_seq_new(e, &s, &err) < 0)
		die("sequence", &err);
	t = now();
	float *lg = malloc(V * sizeof(float));
	if (capy_engine_forward(e, s, p, n, lg, false, &err) < 0)
		die("prefill", &err);
	double cold = now() - t;
	printf("prefill %" PRIu64 " tokens (cold)      %10.3f ms  (%.0f tok/s)\n", n, cold * 1e3, (double)n / cold);
	if (capy_snapshot_take(s, &sn, &err) < 0 || capy_seq_share(s, n, &h, &err) < 0 || capy_kv_ident_of(e, &id, &err) < 0)
		die("snapshot", &err);
	capy_seq_free(s);

	/* the device tier: what a prefix-cache hit costs */
	best = 1e9;
	for (uint64_t k = 0; k < reps; k++) {
		t = now();
		if (capy_seq_share(h, n, &r, &err) < 0 || capy_seq_restore(r, sn, &err) < 0)
			die("device resume", &err);
		best = CAPY_MIN(best, now() - t);
		if (k + 1 < reps)
			capy_seq_free(r);
	}
	float *ref = next_logits(e, r, p[n], V);
	capy_seq_free(r);
	printf("resume from the device tier      %10.3f ms\n", best * 1e3);

	best = 1e9;
	for (uint64_t k = 0; k < reps; k++) {
		capy_kv_entry_free(en);
		t = now();
		if (capy_kv_entry_capture(&en, &id, h, sn, &err) < 0)
			die("capture", &err);
		best = CAPY_MIN(best, now() - t);
	}
	uint64_t raw = capy_kv_entry_bytes(en);
	printf("demote to host RAM               %10.3f ms  (%" PRIu64 " bytes: %" PRIu64 " pages of %" PRIu64 ", state %" PRIu64
	       ")\n", best * 1e3, raw, capy_kv_entry_pages(en), id.page_bytes, id.state_bytes);

	best = 1e9;
	for (uint64_t k = 0; k < reps; k++) {
		t = now();
		if (capy_kv_entry_restore(en, 0, e, &r, &err) < 0)
			die("host restore", &err);
		best = CAPY_MIN(best, now() - t);
		if (k + 1 < reps)
			capy_seq_free(r);
	}
	float *got = next_logits(e, r, p[n], V);
	capy_seq_free(r);
	printf("restore from host RAM            %10.3f ms  (next logits %s)\n", best * 1e3,
	       memcmp(got, ref, V * sizeof(float)) ? "DIFFER" : "bitwise equal");
	free(got);

	snprintf(path, sizeof(path), "%s/kvstore-bench-%d%s", dir, (int)getpid(), CAPY_KV_SUFFIX);
	best = 1e9;
	for (uint64_t k = 0; k < reps; k++) {
		t = now();
		if (capy_kv_entry_write(en, path, 1, &fbytes, &err) < 0)
			die("write", &err);
		best = CAPY_MIN(best, now() - t);
	}
	printf("write to disk (zstd 1, fsync)    %10.3f ms  (%" PRIu64 " bytes, ratio %.2f)\n", best * 1e3, fbytes,
	       (double)raw / (double)fbytes);

	for (int cold_read = 0; cold_read < 2; cold_read++) {
		best = 1e9;
		for (uint64_t k = 0; k < reps; k++) {
			if (cold_read) {
				int fd = open(path, O_RDONLY);
				if (fd >= 0) {
					posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
					close(fd);
				}
			}
			t = now();
			if (capy_kv_entry_read(path, &id, 0, &back, NULL, &err) < 0 ||
			    capy_kv_entry_restore(back, 0, e, &r, &err) < 0)
				die("disk restore", &err);
			best = CAPY_MIN(best, now() - t);
			capy_kv_entry_free(back);
			if (k + 1 < reps)
				capy_seq_free(r);
		}
		got = next_logits(e, r, p[n], V);
		capy_seq_free(r);
		printf("restore from disk (%s) %10.3f ms  (next logits %s)\n", cold_read ? "dropped cache" : "page cache   ",
		       best * 1e3, memcmp(got, ref, V * sizeof(float)) ? "DIFFER" : "bitwise equal");
		free(got);
	}
	unlink(path);
	free(ref);
	free(lg);
	free(p);
	capy_kv_entry_free(en);
	capy_snapshot_free(sn);
	capy_seq_free(h);
	capy_engine_free(e);
	capy_artifact_close(a);
	return 0;
}
