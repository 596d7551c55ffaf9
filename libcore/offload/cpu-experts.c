/* cpu-experts.c - the expert worker pool of the offloading engine (cpu-experts.h). */
#include "cpu-experts.h"
#include "../cpu/expert.h"
#include "../util/thread.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Rounds a barrier spins before it sleeps: the phases of a job are expert matvecs of tens of
 * microseconds, where a futex round trip (a few to tens of microseconds) would be felt. */
#define BARRIER_SPIN 2000

/* the counters that hand out a job's work: groups to prepare, gate_up slices, down slices */
enum { PH_PREP, PH_GATE_UP, PH_DOWN, PH_COUNT };

struct capy_cpu_experts {
	struct capy_expert_threads th;
	int nth;
	bool pin;
	uint32_t poll_us;
	_Atomic uint32_t spin_us;        /* capy_cpu_experts_set_spin may change it while threads run */
	pthread_t *tid;
	int started;
	/* posts and registered jobs */
	_Atomic uint32_t go, stop;
	_Atomic uint32_t armed;          /* capy_cpu_experts_arm: on or off */
	pthread_mutex_t reg_mu;
	struct capy_cpu_experts_job *jobs[CAPY_CPU_EXPERTS_MAX_JOBS];
	_Atomic uint32_t n_jobs;
	/* the job being run (written by the dispatcher, thread 0, before work is bumped) */
	_Atomic uint32_t work;
	struct capy_cpu_experts_job *cur;
	bool whole;                  /* whole experts per thread, else row slices */
	uint32_t n_groups, pieces;   /* experts with misses; row slices per expert */
	uint32_t *order;             /* [n_misses] miss slots grouped by expert, ascending */
	uint32_t *first;             /* [n_groups + 1] offsets into order */
	uint64_t H, I2, row_bytes;
	float *act, *ybuf, *xg;      /* [n][2I], [n][H], [n][H] in grouped order */
	uint8_t *ws;                 /* [n] x row_bytes: the prepared inputs, by group */
	struct capy_linear_input **in; /* [n_groups]: the group's prepared input */
	_Atomic uint32_t next[PH_COUNT];
	/* [order_cap] per group, the row-slice split: gate_up slices done, down's input ready
	 * (SwiGLU and its quantization), down slices done */
	_Atomic uint32_t *gu_done, *dn_ready, *dn_done;
	_Atomic int failed;
	/* buffers */
	void *buf;
	size_t buf_bytes, order_cap;
	/* the barrier */
	_Atomic uint32_t bar_count, bar_phase;
};

struct worker_arg {
	struct capy_cpu_experts *pool;
	int ith;
};

static void futex_wait(_Atomic uint32_t *w, uint32_t val, const struct timespec *ts)
{
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, val, ts, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *w)
{
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static void barrier(struct capy_cpu_experts *p)
{
	uint32_t ph = atomic_load(&p->bar_phase);

	if (atomic_fetch_add(&p->bar_count, 1) + 1 == (uint32_t)p->nth) {
		atomic_store(&p->bar_count, 0);
		atomic_store(&p->bar_phase, ph + 1);
		futex_wake(&p->bar_phase);
		return;
	}
	for (int i = 0; i < BARRIER_SPIN && atomic_load(&p->bar_phase) == ph; i++)
		cpu_relax();
	while (atomic_load(&p->bar_phase) == ph)
		futex_wait(&p->bar_phase, ph, NULL);
}

/* A job's message: as much of msg as fits. */
static void set_msg(struct capy_cpu_experts_job *j, const char *msg)
{
	size_t n = strnlen(msg, sizeof(j->msg) - 1);

	memcpy(j->msg, msg, n);
	j->msg[n] = 0;
}

/* The first failure of a job keeps its message. */
static void fail(struct capy_cpu_experts *p, const struct capy_err *e)
{
	int none = 0;

	if (atomic_compare_exchange_strong(&p->failed, &none, 1)) {
		p->cur->status = e->code;
		set_msg(p->cur, e->msg);
	}
}

/* --- the work of one group (one expert's misses) ------------------------------------------ */

static uint32_t group_rows(const struct capy_cpu_experts *p, uint32_t a)
{
	return p->first[a + 1] - p->first[a];
}

static int32_t group_expert(const struct capy_cpu_experts *p, uint32_t a)
{
	return p->cur->expert[p->order[p->first[a]]];
}

static void *group_ws(const struct capy_cpu_experts *p, uint32_t a)
{
	return p->ws + (uint64_t)p->first[a] * p->row_bytes;
}

/* The group's gate_up input, prepared in its workspace. */
static void prep_gate_up(struct capy_cpu_experts *p, uint32_t a)
{
	const struct capy_cpu_experts_job *j = p->cur;
	const struct capy_linear *gu = &j->gate_up[group_expert(p, a)];
	const uint32_t m = group_rows(p, a), *rows = p->order + p->first[a];
	struct capy_err e = { 0 };

	if (j->in.qa) {
		if (capy_linear_prepare_quantized(gu, &j->in, rows, m, group_ws(p, a), &p->in[a], &e) < 0)
			fail(p, &e);
		return;
	}
	float *x = p->xg + (uint64_t)p->first[a] * p->H;
	for (uint32_t r = 0; r < m; r++)
		memcpy(x + r * p->H, j->x + (uint64_t)(j->x_row ? j->x_row[rows[r]] : rows[r]) * p->H, p->H * sizeof(float));
	capy_linear_prepare(gu, x, m, group_ws(p, a), &p->in[a]);
}

static void scatter(struct capy_cpu_experts *p, uint32_t a)
{
	const float *y = p->ybuf + (uint64_t)p->first[a] * p->H;

	for (uint32_t r = 0; r < group_rows(p, a); r++)
		memcpy(p->cur->out + (uint64_t)p->order[p->first[a] + r] * p->H, y + r * p->H, p->H * sizeof(float));
}

static void whole_expert(struct capy_cpu_experts *p, uint32_t a)
{
	const int32_t ex = group_expert(p, a);
	const uint64_t off = p->first[a];

	prep_gate_up(p, a);
	if (atomic_load(&p->failed))
		return;
	capy_expert_rows(&p->cur->gate_up[ex], &p->cur->down[ex], p->in[a], group_rows(p, a), p->act + off * p->I2,
			 group_ws(p, a), p->ybuf + off * p->H);
	scatter(p, a);
}

/* Slice `piece` of tile t's matrix (gate_up, or down), rows [r0, r1). */
static void tile(struct capy_cpu_experts *p, uint32_t t, bool down)
{
	const uint32_t a = t / p->pieces;
	const int32_t ex = group_expert(p, a);
	const struct capy_linear *w = down ? &p->cur->down[ex] : &p->cur->gate_up[ex];
	const uint64_t off = p->first[a];
	uint64_t r0, r1;

	capy_slice(w->n, (int)(t % p->pieces), (int)p->pieces, &r0, &r1);
	capy_linear_rows(w, p->in[a], down ? p->ybuf + off * p->H : p->act + off * p->I2, r0, r1);
}

static void prep_down(struct capy_cpu_experts *p, uint32_t a)
{
	const uint64_t off = p->first[a];
	float *act = p->act + off * p->I2;

	capy_swiglu_rows(act, group_rows(p, a), p->I2 / 2);
	capy_linear_prepare(&p->cur->down[group_expert(p, a)], act, group_rows(p, a), group_ws(p, a), &p->in[a]);
}

static void tile_gate_up(struct capy_cpu_experts *p, uint32_t t)
{
	tile(p, t, false);
}

static void tile_down(struct capy_cpu_experts *p, uint32_t t)
{
	tile(p, t, true);
}

/* After the gate_up inputs are prepared, the split flows without barriers: whoever finishes
 * a group's last gate_up slice prepares its down input; down slices are handed out after
 * every gate_up slice, in group order, so a thread that takes one waits only for a group whose
 * gate_up another thread is finishing; whoever finishes a group's last down slice scatters it. */
static void split_flow(struct capy_cpu_experts *p)
{
	const uint32_t nt = p->n_groups * p->pieces;
	uint32_t i;

	while ((i = atomic_fetch_add(&p->next[PH_GATE_UP], 1)) < nt) {
		const uint32_t a = i / p->pieces;
		tile_gate_up(p, i);
		if (atomic_fetch_add(&p->gu_done[a], 1) + 1 == p->pieces) {
			prep_down(p, a);
			atomic_store_explicit(&p->dn_ready[a], 1, memory_order_release);
		}
	}
	while ((i = atomic_fetch_add(&p->next[PH_DOWN], 1)) < nt) {
		const uint32_t a = i / p->pieces;
		while (!atomic_load_explicit(&p->dn_ready[a], memory_order_acquire))
			cpu_relax();
		tile_down(p, i);
		if (atomic_fetch_add(&p->dn_done[a], 1) + 1 == p->pieces)
			scatter(p, a);
	}
}

/* Thread ith's share of the current job; every thread ends at the final barrier. */
static void run_share(struct capy_cpu_experts *p)
{
	const uint32_t ng = p->n_groups;
	uint32_t i;

	if (p->whole) {
		while ((i = atomic_fetch_add(&p->next[PH_PREP], 1)) < ng)
			whole_expert(p, i);
	} else {
		while ((i = atomic_fetch_add(&p->next[PH_PREP], 1)) < ng)
			prep_gate_up(p, i);
		barrier(p);
		if (!atomic_load(&p->failed))
			split_flow(p);
	}
	barrier(p);
}

/* --- the dispatcher: checking a job and laying out its buffers ---------------------------- */

static int check_job(const struct capy_cpu_experts_job *j, struct capy_err *err)
{
	if (!j->gate_up || !j->down || !j->expert || !j->out || (!j->in.qa && !j->x))
		return capy_err_set(err, CAPY_EINVAL, "cpu experts: a job of %u misses without weights, expert ids, "
				    "input rows or output", j->n_misses);
	if (j->in.qa && (!j->in.sa || !j->in.gs || j->in.ld < j->n_misses))
		return capy_err_set(err, CAPY_EINVAL, "cpu experts: quantized input of %u misses with %s", j->n_misses,
				    j->in.ld < j->n_misses ? "a row stride below the misses" : "no block or global scales");
	for (uint32_t s = 0; s < j->n_misses; s++) {
		int32_t e = j->expert[s];
		if (e < 0 || (uint32_t)e >= j->n_experts)
			return capy_err_set(err, CAPY_EINVAL, "cpu experts: miss %u names expert %d, the layer has %u",
					    s, e, j->n_experts);
		const struct capy_linear *gu = &j->gate_up[e], *dn = &j->down[e], *g0 = &j->gate_up[j->expert[0]];
		if (gu->n != 2 * dn->k || gu->k != dn->n || gu->n != g0->n || gu->k != g0->k || gu->n % 2)
			return capy_err_set(err, CAPY_EINVAL, "cpu experts: expert %d: gate_up [%" PRIu64 ", %" PRIu64
					    "] and down [%" PRIu64 ", %" PRIu64 "] do not make one SwiGLU expert of the "
					    "layer's shape", e, gu->n, gu->k, dn->n, dn->k);
		if (j->in.qa && gu->dtype != CAPY_DT_NVFP4)
			return capy_err_set(err, CAPY_EINVAL, "cpu experts: expert %d: quantized input for a %s gate_up",
					    e, capy_dtype_name(gu->dtype));
	}
	return 0;
}

static int cmp_slot(const void *a, const void *b, void *ctx)
{
	const int32_t *ex = ctx;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	if (ex[x] != ex[y])
		return ex[x] < ex[y] ? -1 : 1;
	return x < y ? -1 : x > y;
}

/* Group the misses, size the buffers (growing them if needed) and choose the split. */
static int lay_out(struct capy_cpu_experts *p, struct capy_cpu_experts_job *j, struct capy_err *err)
{
	const uint64_t n = j->n_misses, H = j->gate_up[j->expert[0]].k, I2 = j->gate_up[j->expert[0]].n;
	uint64_t row = 0, need;
	uint8_t *b;

	if (n > p->order_cap) {
		uint32_t *o = realloc(p->order, n * sizeof(*o)), *f;
		if (o)
			p->order = o;
		f = o ? realloc(p->first, (n + 1) * sizeof(*f)) : NULL;
		if (f)
			p->first = f;
		struct capy_linear_input **in = f ? realloc(p->in, n * sizeof(*in)) : NULL;
		if (in)
			p->in = in;
		_Atomic uint32_t *flow = in ? calloc(3 * n, sizeof(*flow)) : NULL;
		if (!flow)
			return capy_err_set(err, CAPY_ENOMEM, "cpu experts: no memory for %" PRIu64 " misses", n);
		free((void *)p->gu_done);
		p->gu_done = flow;
		p->dn_ready = flow + n;
		p->dn_done = flow + 2 * n;
		p->order_cap = n;
	}
	for (uint32_t s = 0; s < n; s++)
		p->order[s] = s;
	qsort_r(p->order, n, sizeof(*p->order), cmp_slot, (void *)j->expert);
	p->n_groups = 0;
	for (uint32_t s = 0; s < n; s++) {
		int32_t e = j->expert[p->order[s]];
		if (!s || e != j->expert[p->order[s - 1]]) {
			p->first[p->n_groups++] = s;
			size_t a = capy_linear_input_bytes(&j->gate_up[e], 1), d = capy_linear_input_bytes(&j->down[e], 1);
			row = CAPY_MAX(row, CAPY_MAX(a, d) + 64);
		}
	}
	p->first[p->n_groups] = (uint32_t)n;
	p->H = H;
	p->I2 = I2;
	p->row_bytes = CAPY_ALIGN_UP(row, 64);
	need = 64 + n * (CAPY_ALIGN_UP(I2 * sizeof(float), 64) + 2 * CAPY_ALIGN_UP(H * sizeof(float), 64)) +
	       n * p->row_bytes;
	if (need > p->buf_bytes) {
		void *nb = aligned_alloc(64, CAPY_ALIGN_UP(need, 64));
		if (!nb)
			return capy_err_set(err, CAPY_ENOMEM, "cpu experts: no memory for the buffers of %" PRIu64
					    " misses (%" PRIu64 " bytes)", n, need);
		free(p->buf);
		p->buf = nb;
		p->buf_bytes = CAPY_ALIGN_UP(need, 64);
	}
	b = p->buf;
	p->act = (float *)b;
	b += n * CAPY_ALIGN_UP(I2 * sizeof(float), 64);
	p->ybuf = (float *)b;
	b += n * CAPY_ALIGN_UP(H * sizeof(float), 64);
	p->xg = (float *)b;
	b += n * CAPY_ALIGN_UP(H * sizeof(float), 64);
	p->ws = b;
	/* Whole experts only where the last of them leaves the threads at most a quarter idle;
	 * else about 4 tiles per thread, taken from a counter, so that the threads finish
	 * together (a barrier costs little next to an expert's 1-2 MB). */
	p->whole = p->nth == 1 || p->n_groups >= 4 * (uint32_t)p->nth;
	p->pieces = p->whole ? 1 : (4 * (uint32_t)p->nth + p->n_groups - 1) / p->n_groups;
	return 0;
}

static void finish(struct capy_cpu_experts_job *j, int status, const char *msg)
{
	if (status) {
		j->status = status;
		set_msg(j, msg);
	}
	atomic_store_explicit(&j->done, 1, memory_order_release);
	futex_wake(&j->done);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void run_job(struct capy_cpu_experts *p, struct capy_cpu_experts_job *j)
{
	struct capy_err err = { 0 };

	j->taken_ns = now_ns();
	j->finished_ns = j->taken_ns;
	j->experts_read = 0;
	j->status = 0;
	j->msg[0] = 0;
	if (!j->n_misses) {
		finish(j, 0, NULL);
		return;
	}
	if (check_job(j, &err) < 0 || lay_out(p, j, &err) < 0) {
		finish(j, err.code, err.msg);
		return;
	}
	p->cur = j;
	atomic_store(&p->failed, 0);
	for (int ph = 0; ph < PH_COUNT; ph++)
		atomic_store(&p->next[ph], 0);
	for (uint32_t a = 0; a < p->n_groups; a++) {
		atomic_store_explicit(&p->gu_done[a], 0, memory_order_relaxed);
		atomic_store_explicit(&p->dn_ready[a], 0, memory_order_relaxed);
		atomic_store_explicit(&p->dn_done[a], 0, memory_order_relaxed);
	}
	if (p->nth > 1) {
		atomic_fetch_add(&p->work, 1);
		futex_wake(&p->work);
	}
	run_share(p);
	p->cur = NULL;
	j->experts_read = p->n_groups;
	j->finished_ns = now_ns();
	finish(j, 0, NULL);
}

/* A requested job among the known ones (req taken back to 0), or NULL. */
static struct capy_cpu_experts_job *take(struct capy_cpu_experts *p)
{
	struct capy_cpu_experts_job *j = NULL;
	uint32_t n;

	pthread_mutex_lock(&p->reg_mu);
	n = atomic_load(&p->n_jobs);
	for (uint32_t i = 0; i < n && !j; i++)
		if (atomic_load_explicit(&p->jobs[i]->req, memory_order_acquire) && atomic_exchange(&p->jobs[i]->req, 0))
			j = p->jobs[i];
	pthread_mutex_unlock(&p->reg_mu);
	return j;
}

static void pin(const struct capy_cpu_experts *p, int ith)
{
	cpu_set_t set;

	if (!p->pin)
		return;
	CPU_ZERO(&set);
	CPU_SET(p->th.cpu[ith], &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set); /* best effort */
}

static uint64_t now_us(void)
{
	return now_ns() / 1000u;
}

/* Spin up to us microseconds for done() to become true (checked every few pauses); its last
 * value. */
static bool spin_until(const struct capy_cpu_experts *p, uint32_t us, bool (*done)(struct capy_cpu_experts *, void *),
		       void *ctx)
{
	if (!us)
		return false;
	const uint64_t end = now_us() + us;
	for (uint32_t i = 0;; i++) {
		if (done((struct capy_cpu_experts *)p, ctx))
			return true;
		if ((i & 63) == 63 && now_us() >= end)
			return false;
		cpu_relax();
	}
}

static bool spin_for(const struct capy_cpu_experts *p, bool (*done)(struct capy_cpu_experts *, void *), void *ctx)
{
	return spin_until(p, atomic_load_explicit(&p->spin_us, memory_order_relaxed), done, ctx);
}

static bool any_request(struct capy_cpu_experts *p, void *ctx)
{
	uint32_t n;
	bool any = false;

	(void)ctx;
	if (atomic_load(&p->stop))
		return true;
	pthread_mutex_lock(&p->reg_mu);
	n = atomic_load(&p->n_jobs);
	for (uint32_t i = 0; i < n && !any; i++)
		any = atomic_load_explicit(&p->jobs[i]->req, memory_order_relaxed) != 0;
	pthread_mutex_unlock(&p->reg_mu);
	return any;
}

static bool request_or_disarmed(struct capy_cpu_experts *p, void *ctx)
{
	return !atomic_load(&p->armed) || any_request(p, ctx);
}

static bool work_moved(struct capy_cpu_experts *p, void *seen)
{
	return atomic_load(&p->work) != *(const uint32_t *)seen || atomic_load(&p->stop);
}

static void *dispatcher(void *arg)
{
	struct capy_cpu_experts *p = arg;
	struct capy_cpu_experts_job *j;
	const struct timespec poll = { p->poll_us / 1000000, (long)(p->poll_us % 1000000) * 1000 };
	const struct timespec arm_poll = { 0, CAPY_CPU_EXPERTS_ARM_POLL_US * 1000 };
	uint32_t go_seen = 0;
	bool spun = false; /* armed: the spin since the last arm, wake-up or job is over, poll */

	pin(p, 0);
	for (;;) {
		uint32_t g = atomic_load(&p->go);
		if ((j = take(p))) {
			if (atomic_load(&p->stop))
				finish(j, CAPY_ECANCELED, "cpu experts: the pool was stopped");
			else
				run_job(p, j);
			spun = false;
			continue;
		}
		if (atomic_load(&p->stop))
			break;
		if (atomic_load(&p->armed)) {
			if (g != go_seen) { /* an arm (or a kick) since: spin again */
				go_seen = g;
				spun = false;
			}
			if (!spun) {
				spun = true;
				if (spin_until(p, CAPY_CPU_EXPERTS_ARM_SPIN_US, request_or_disarmed, NULL))
					continue;
			}
			futex_wait(&p->go, g, &arm_poll);
			continue;
		}
		if (spin_for(p, any_request, NULL))
			continue;
		futex_wait(&p->go, g, p->poll_us ? &poll : NULL);
	}
	atomic_fetch_add(&p->work, 1);
	futex_wake(&p->work);
	return NULL;
}

static void *worker(void *arg)
{
	struct worker_arg *w = arg;
	struct capy_cpu_experts *p = w->pool;
	uint32_t seen = 0, g;

	pin(p, w->ith);
	for (;;) {
		if (atomic_load(&p->work) == seen)
			spin_for(p, work_moved, &seen);
		while ((g = atomic_load(&p->work)) == seen && !atomic_load(&p->stop))
			futex_wait(&p->work, seen, NULL);
		if (atomic_load(&p->stop) && g == seen)
			break;
		seen = g;
		if (atomic_load(&p->stop) && !p->cur)
			break;
		run_share(p);
	}
	free(w);
	return NULL;
}

/* --- the public functions ----------------------------------------------------------------- */

int capy_cpu_experts_new(struct capy_cpu_experts **out, const struct capy_cpu_experts_opts *o,
			 struct capy_err *err)
{
	struct capy_cpu_topology *sys = NULL; /* 16 KiB: not on the stack */
	const struct capy_cpu_topology *t = o->topo;
	struct capy_cpu_experts *p;
	int rc;

	*out = NULL;
	if (o->threads < 0 || o->threads > CAPY_EXPERT_THREADS_MAX)
		return capy_err_set(err, CAPY_EINVAL, "cpu experts: %d threads, expected 0..%d", o->threads,
				    CAPY_EXPERT_THREADS_MAX);
	if (!t) {
		if (!(sys = malloc(sizeof(*sys))))
			return capy_err_set(err, CAPY_ENOMEM, "cpu experts: no memory for the topology");
		if ((rc = capy_cpu_topology_read(sys, NULL, NULL, err)) < 0) {
			free(sys);
			return rc;
		}
		t = sys;
	}
	if (!(p = calloc(1, sizeof(*p))) || !(p->tid = calloc(CAPY_EXPERT_THREADS_MAX, sizeof(*p->tid)))) {
		free(p);
		free(sys);
		return capy_err_set(err, CAPY_ENOMEM, "cpu experts: no memory for the pool");
	}
	capy_expert_threads_choose(&p->th, t, o->threads);
	free(sys);
	p->nth = p->th.n;
	p->pin = !o->no_pin;
	p->poll_us = o->poll_us;
	atomic_init(&p->spin_us, o->spin_us);
	pthread_mutex_init(&p->reg_mu, NULL);
	for (int i = 0; i < p->nth; i++) {
		struct worker_arg *w = NULL;
		if (i && !(w = malloc(sizeof(*w)))) {
			rc = ENOMEM;
		} else {
			if (w)
				*w = (struct worker_arg){ p, i };
			rc = pthread_create(&p->tid[i], NULL, i ? worker : dispatcher, i ? (void *)w : (void *)p);
			if (rc)
				free(w);
		}
		if (rc) {
			capy_cpu_experts_free(p);
			return capy_err_errno(err, rc, "cpu experts: starting thread %d of %d", i, p->th.n);
		}
		p->started++;
	}
	*out = p;
	return 0;
}

void capy_cpu_experts_free(struct capy_cpu_experts *p)
{
	if (!p)
		return;
	atomic_store(&p->stop, 1);
	atomic_fetch_add(&p->go, 1);
	futex_wake(&p->go);
	if (p->started) {
		pthread_join(p->tid[0], NULL);
		/* workers that started before a failed start see stop at once */
		atomic_fetch_add(&p->work, 1);
		futex_wake(&p->work);
		for (int i = 1; i < p->started; i++)
			pthread_join(p->tid[i], NULL);
	}
	pthread_mutex_destroy(&p->reg_mu);
	free(p->tid);
	free(p->buf);
	free(p->order);
	free(p->first);
	free(p->in);
	free((void *)p->gu_done);
	free(p);
}

const struct capy_expert_threads *capy_cpu_experts_threads(const struct capy_cpu_experts *p)
{
	return &p->th;
}

int capy_cpu_experts_register(struct capy_cpu_experts *p, struct capy_cpu_experts_job *job, struct capy_err *err)
{
	uint32_t n;
	int rc = 0;

	pthread_mutex_lock(&p->reg_mu);
	n = atomic_load(&p->n_jobs);
	for (uint32_t i = 0; i < n; i++)
		if (p->jobs[i] == job)
			goto out;
	if (n == CAPY_CPU_EXPERTS_MAX_JOBS) {
		rc = capy_err_set(err, CAPY_EBUSY, "cpu experts: more than %d jobs", CAPY_CPU_EXPERTS_MAX_JOBS);
		goto out;
	}
	p->jobs[n] = job;
	atomic_store(&p->n_jobs, n + 1);
out:
	pthread_mutex_unlock(&p->reg_mu);
	return rc;
}

void capy_cpu_experts_forget(struct capy_cpu_experts *p, struct capy_cpu_experts_job *job)
{
	uint32_t n;

	pthread_mutex_lock(&p->reg_mu);
	n = atomic_load(&p->n_jobs);
	for (uint32_t i = 0; i < n; i++)
		if (p->jobs[i] == job) {
			p->jobs[i] = p->jobs[n - 1];
			atomic_store(&p->n_jobs, n - 1);
			break;
		}
	pthread_mutex_unlock(&p->reg_mu);
}

int capy_cpu_experts_post(struct capy_cpu_experts *p, struct capy_cpu_experts_job *job, struct capy_err *err)
{
	int rc;

	if ((rc = capy_cpu_experts_register(p, job, err)) < 0)
		return rc;
	atomic_store(&job->done, 0);
	atomic_store_explicit(&job->req, 1, memory_order_release);
	atomic_fetch_add(&p->go, 1);
	futex_wake(&p->go);
	return 0;
}

void capy_cpu_experts_kick(struct capy_cpu_experts *p)
{
	atomic_fetch_add(&p->go, 1);
	futex_wake(&p->go);
}

void capy_cpu_experts_set_spin(struct capy_cpu_experts *p, uint32_t us)
{
	atomic_store_explicit(&p->spin_us, us, memory_order_relaxed);
}

void capy_cpu_experts_arm(struct capy_cpu_experts *p, bool on)
{
	if (!on) {
		atomic_store(&p->armed, 0);
		return;
	}
	atomic_store(&p->armed, 1);
	capy_cpu_experts_kick(p);
}

int capy_cpu_experts_wait(struct capy_cpu_experts_job *job, struct capy_err *err)
{
	while (!atomic_load_explicit(&job->done, memory_order_acquire))
		futex_wait(&job->done, 0, NULL);
	if (job->status)
		return capy_err_set(err, job->status, "%s", job->msg);
	return 0;
}

int capy_cpu_experts_submit(struct capy_cpu_experts *p, struct capy_cpu_experts_job *job, struct capy_err *err)
{
	int rc = capy_cpu_experts_post(p, job, err);

	return rc < 0 ? rc : capy_cpu_experts_wait(job, err);
}

void capy_cpu_experts_host_fn(void *arg)
{
	struct capy_cpu_experts_job *job = arg;
	struct capy_err err = { 0 };

	if (capy_cpu_experts_post(job->pool, job, &err) < 0)
		finish(job, err.code, err.msg);
}
