/* u-cuda-tp.c - tensor parallelism's all-reduce on the GPU (kernels/tp.cu, issue 14): the
 * payload kernels against libcore/tp's capy_tp_reduce_row bit for bit (NaN as NaN) for 1-4
 * simulated ranks, the three payloads, rows of zeros, NaN and Inf, values near fp32's top
 * and bottom (the fp16 shift clamped, saturation), partials that cancel, short and unaligned
 * rows; then NCCL itself: as many ranks as there are GPUs (up to 2; CAPY_TP_RANKS=1 forces
 * one), one thread a rank, the id handed over through a file as separate processes would,
 * each rank's all-reduce equal to the CPU's reduction of every rank's rows, also when captured
 * in a CUDA graph and replayed. With one GPU the communicator has one rank: the plumbing runs,
 * the two-rank sum is only the simulation's (docs/tp.md says what a 2-GPU machine must run). */
#include "test.h"

#include "cuda-test.h"
#include "tp/tp.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ROWS 7

/* kernels/ cannot include libcore: the payload numbers are written twice, and must agree */
_Static_assert((int)CK_TP_FP32 == (int)CAPY_TP_FP32 && (int)CK_TP_FP16_SHIFT == (int)CAPY_TP_FP16_SHIFT &&
		       (int)CK_TP_BF16 == (int)CAPY_TP_BF16,
	       "kernels/capy-kernels.h's payloads are libcore/tp/tp.h's");

static bool same_bits(float a, float b)
{
	uint32_t x, y;

	if (isnan(a) || isnan(b))
		return isnan(a) && isnan(b);
	memcpy(&x, &a, 4);
	memcpy(&y, &b, 4);
	return x == y;
}

/* Rank r's partial sums: row-shaped cases (see the file's comment), stride ld. */
static void fill_part(float *x, int r, uint64_t n, uint64_t ld, uint64_t seed)
{
	uint64_t s = seed * 0x9e3779b97f4a7c15ull + (uint64_t)r * 7919 + 1, c = seed * 31 + 5;

	for (int row = 0; row < ROWS; row++) {
		float *xr = x + (uint64_t)row * ld;
		for (uint64_t i = 0; i < n; i++) {
			const float u = test_rand(&s), common = test_rand(&c);
			switch (row) {
			case 0: xr[i] = 0.0f; break;
			case 1: xr[i] = i % 5 == 1 ? NAN : i % 7 == 2 ? (r ? -INFINITY : INFINITY) : u; break;
			case 2: xr[i] = u * 3.0e38f; break;                     /* the shift clamped, saturation */
			case 3: xr[i] = u * 1.0e-39f; break;                    /* fp32 subnormals: the clamp above */
			case 4: xr[i] = (r & 1 ? -common : common) + u * 1e-4f; break; /* partials cancel */
			case 5: xr[i] = u * (i % 97 == 0 ? 20.0f : 1.0f); break;
			default: xr[i] = u * 1e-3f; break;
			}
		}
	}
}

static int check_rows(const float *got, uint64_t ld, float *const *parts, int ranks, int payload, uint64_t n,
		      uint64_t ldp, const char *what)
{
	float *want = malloc(n * sizeof(float));
	const float *rp[CAPY_TP_MAX_RANKS];
	int bad = 0;

	for (int row = 0; row < ROWS; row++) {
		for (int r = 0; r < ranks; r++)
			rp[r] = parts[r] + (uint64_t)row * ldp;
		capy_tp_reduce_row((enum capy_tp_payload)payload, rp, ranks, n, want);
		for (uint64_t i = 0; i < n; i++)
			if (!same_bits(got[(uint64_t)row * ld + i], want[i]) && bad++ < 3)
				fprintf(stderr, "  %s: row %d [%llu]: %a, want %a\n", what, row, (unsigned long long)i,
					got[(uint64_t)row * ld + i], want[i]);
	}
	free(want);
	return bad;
}

static void test_kernels(void)
{
	static const uint64_t ns[] = { 1, 7, 1000, 2560 };

	for (int ranks = 1; ranks <= 4; ranks++)
		for (int p = CK_TP_FP32; p <= CK_TP_BF16; p++)
			for (size_t k = 0; k < ARRAY_SIZE(ns); k++) {
				const uint64_t n = ns[k], ld = n + 3, blk = ck_tp_block_bytes(p, ROWS, n);
				float *parts[CAPY_TP_MAX_RANKS], *got = malloc(ROWS * ld * sizeof(float));
				uint8_t *gathered = dev_from(NULL, ranks * blk);
				float *dx = dev_from(NULL, ROWS * ld * sizeof(float));
				for (int r = 0; r < ranks; r++) {
					parts[r] = malloc(ROWS * ld * sizeof(float));
					fill_part(parts[r], r, n, ld, 100 + k);
					CUDA_OK(cudaMemcpy(dx, parts[r], ROWS * ld * sizeof(float), cudaMemcpyHostToDevice));
					CK_OK(ck_tp_encode(p, dx, ROWS, n, ld, gathered + r * blk, NULL));
				}
				CK_OK(ck_tp_reduce(p, gathered, ranks, ROWS, n, dx, ld, NULL));
				dev_to(got, dx, ROWS * ld * sizeof(float));
				char what[64];
				snprintf(what, sizeof(what), "%d ranks, %s, n %llu", ranks,
					 capy_tp_payload_name((enum capy_tp_payload)p), (unsigned long long)n);
				CHECK_MSG(check_rows(got, ld, parts, ranks, p, n, ld, what) == 0, "%s differs from the CPU",
					  what);
				for (int r = 0; r < ranks; r++)
					free(parts[r]);
				free(got);
				cudaFree(gathered);
				cudaFree(dx);
			}
}

/* --- NCCL: one thread a rank ----------------------------------------------------------- */

#define N_NCCL 2560

struct rank_run {
	int rank, ranks, payload;
	const char *id_path;
	float *parts[CAPY_TP_MAX_RANKS]; /* every rank's rows, host */
	int bad, bad_graph;
	char why[1100]; /* a capy_err's message fits */
};

static void *rank_main(void *arg)
{
	struct rank_run *rr = arg;
	struct capy_err err;
	uint8_t id[CK_TP_ID_BYTES];
	struct ck_tp_comm *c = NULL;
	const uint64_t n = N_NCCL, bytes = ROWS * n * sizeof(float);
	float *x = NULL, *got = malloc(bytes);
	void *ws = NULL;
	cudaStream_t st = NULL;
	cudaGraph_t g = NULL;
	cudaGraphExec_t ge = NULL;

	rr->bad = rr->bad_graph = -1;
	if (cudaSetDevice(rr->rank) != cudaSuccess || cudaStreamCreate(&st) != cudaSuccess) {
		snprintf(rr->why, sizeof(rr->why), "rank %d: no device", rr->rank);
		goto out;
	}
	if (rr->rank == 0) {
		if (ck_tp_unique_id(id, rr->why, sizeof(rr->why)) < 0 ||
		    capy_tp_id_publish(rr->id_path, id, sizeof(id), &err) < 0) {
			if (!rr->why[0])
				snprintf(rr->why, sizeof(rr->why), "%.1000s", err.msg);
			goto out;
		}
	} else if (capy_tp_id_wait(rr->id_path, id, sizeof(id), 60, &err) < 0) {
		snprintf(rr->why, sizeof(rr->why), "%.1000s", err.msg);
		goto out;
	}
	if (ck_tp_comm_open(&c, id, rr->ranks, rr->rank, rr->why, sizeof(rr->why)) < 0)
		goto out;
	x = dev_from(rr->parts[rr->rank], bytes);
	ws = dev_from(NULL, ck_tp_ws_bytes(rr->payload, ROWS, n, rr->ranks));
	if (ck_tp_allreduce(c, rr->payload, x, ROWS, n, n, ws, st, rr->why, sizeof(rr->why)) < 0 ||
	    cudaStreamSynchronize(st) != cudaSuccess)
		goto out;
	dev_to(got, x, bytes);
	rr->bad = check_rows(got, n, rr->parts, rr->ranks, rr->payload, n, n, "nccl");
	/* captured once, replayed on the rank's own rows again */
	CUDA_OK(cudaMemcpy(x, rr->parts[rr->rank], bytes, cudaMemcpyHostToDevice));
	if (cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed) != cudaSuccess)
		goto out;
	const int rc = ck_tp_allreduce(c, rr->payload, x, ROWS, n, n, ws, st, rr->why, sizeof(rr->why));
	if (cudaStreamEndCapture(st, &g) != cudaSuccess || rc < 0 || cudaGraphInstantiate(&ge, g, 0) != cudaSuccess ||
	    cudaGraphLaunch(ge, st) != cudaSuccess || cudaStreamSynchronize(st) != cudaSuccess) {
		if (!rr->why[0])
			snprintf(rr->why, sizeof(rr->why), "rank %d: the captured all-reduce failed", rr->rank);
		goto out;
	}
	dev_to(got, x, bytes);
	rr->bad_graph = check_rows(got, n, rr->parts, rr->ranks, rr->payload, n, n, "nccl, graph");
out:
	if (ge)
		cudaGraphExecDestroy(ge);
	if (g)
		cudaGraphDestroy(g);
	ck_tp_comm_close(c);
	cudaFree(x);
	cudaFree(ws);
	if (st)
		cudaStreamDestroy(st);
	free(got);
	return NULL;
}

static void test_nccl(void)
{
	char why[256], dir[128], path[160];
	uint8_t probe[CK_TP_ID_BYTES];
	int devices = 0;
	const char *env = getenv("CAPY_TP_RANKS");

	if (ck_tp_unique_id(probe, why, sizeof(why)) < 0) {
		printf("# NCCL not loaded (%s): the communicator cases did not run\n", why);
		return;
	}
	CUDA_OK(cudaGetDeviceCount(&devices));
	const int ranks = env ? (int)strtol(env, NULL, 10) : devices >= 2 ? 2 : 1;
	CHECK(ranks >= 1 && ranks <= devices);
	printf("# NCCL: %d rank%s on %d GPU%s\n", ranks, ranks > 1 ? "s" : "", devices, devices > 1 ? "s" : "");
	snprintf(dir, sizeof(dir), "/tmp/capy-cuda-tp-%d", (int)getpid());
	CHECK(mkdir(dir, 0700) == 0);
	for (int p = CK_TP_FP32; p <= CK_TP_BF16; p++) {
		struct rank_run rr[CAPY_TP_MAX_RANKS];
		pthread_t th[CAPY_TP_MAX_RANKS];
		float *parts[CAPY_TP_MAX_RANKS];
		snprintf(path, sizeof(path), "%s/id-%d", dir, p);
		for (int r = 0; r < ranks; r++) {
			parts[r] = malloc(ROWS * N_NCCL * sizeof(float));
			fill_part(parts[r], r, N_NCCL, N_NCCL, 7);
		}
		for (int r = 0; r < ranks; r++) {
			rr[r] = (struct rank_run){ .rank = r, .ranks = ranks, .payload = p, .id_path = path };
			memcpy(rr[r].parts, parts, sizeof(parts));
			CHECK(pthread_create(&th[r], NULL, rank_main, &rr[r]) == 0);
		}
		for (int r = 0; r < ranks; r++) {
			pthread_join(th[r], NULL);
			CHECK_MSG(rr[r].bad == 0 && rr[r].bad_graph == 0, "%s, rank %d of %d: %d / %d rows' elements differ%s%s",
				  capy_tp_payload_name((enum capy_tp_payload)p), r, ranks, rr[r].bad, rr[r].bad_graph,
				  rr[r].why[0] ? ": " : "", rr[r].why);
		}
		for (int r = 0; r < ranks; r++)
			free(parts[r]);
		unlink(path);
	}
	rmdir(dir);
}

int main(void)
{
	RUN(test_kernels);
	RUN(test_nccl);
	return test_summary();
}
