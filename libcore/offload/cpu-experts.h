/* cpu-experts.h - the CPU side of expert offload (issue 10): a pool of pinned expert threads
 * that computes a MoE layer's routed-expert misses (the experts not resident on the GPU) with
 * the exact W4A4 kernels, started by a 32-bit word in host memory and finished by another,
 * so that a captured CUDA decode graph can hand work over and wait for it without a host
 * core spinning (docs/offload.md: the word protocol, the hand-over format, the numbers).
 *
 *	struct capy_cpu_experts *pool;
 *	capy_cpu_experts_new(&pool, &(struct capy_cpu_experts_opts){ .threads = 0 }, &err);
 *	struct capy_cpu_experts_job *job = pinned memory, zeroed;   // one per MoE layer
 *	job->gate_up = l->gate_up; job->down = l->down; job->n_experts = E;
 *	job->expert = ids; job->in = (struct capy_nvfp4_rows){ qa, sa, gs, ld }; job->out = y;
 *	each step: job->n_misses = n (and the ids and rows); then
 *		capy_cpu_experts_submit(pool, job, &err);              // post + wait, or
 *		a graph host node capy_cpu_experts_host_fn(job) ... cuStreamWaitValue32(&job->done, 1)
 *
 * A job is one MoE layer's misses of one step: miss s is routed expert expert[s] applied to
 * the activation row s, out[s] = down(SwiGLU(gate_up(row s))) ([H] floats; the routing
 * weight and the combine stay with the caller). The row is handed over already quantized
 * for that expert's gate_up (struct capy_nvfp4_rows, the GPU's format: the GPU quantizes
 * once with the expert's input_scale), or as float rows x that the pool quantizes the same
 * way. Each miss is computed as libcore/cpu/expert.h computes an expert for the CPU backend
 * (gate_up, SwiGLU, quantize with down's input_scale, down), so out is bit-identical to the
 * CPU backend's expert output, and to the GPU's (t/cuda/u-cuda-linear checks it), whatever the
 * thread count or the split.
 *
 * The split: misses grouped by expert; with at least 4 experts per thread each thread takes
 * whole experts (no synchronization inside a job); else every expert's matrices are split
 * into row slices, about 4 per thread: after the inputs are prepared (a barrier) the gate_up
 * slices, each expert's SwiGLU and down quantization (by whoever finished its last gate_up
 * slice) and the down slices flow without barriers. Rows are independent in the W4A4
 * definition, so neither the grouping nor the split changes a bit.
 *
 * Words (each a plain aligned 32-bit word inside the job): req is set to 1 to request the job
 * and the pool takes it (back to 0); done is 0 while the job is pending or running and 1 when
 * out and status are written (release order: whoever sees done == 1 sees the results).
 * capy_cpu_experts_post sets done = 0 then req = 1 and wakes the pool (FUTEX_WAKE): that is
 * what a CUDA host node calls. A writer that cannot wake (cuStreamWriteValue32 from the GPU)
 * writes done = 0 then req = 1 and relies on opts.poll_us: the pool then also looks at the
 * req words of its registered jobs every poll_us. Idle threads sleep in FUTEX_WAIT; inside a
 * job the barriers spin briefly before they sleep.
 *
 * Memory: the pool's buffers grow at a job that needs more (the first of each shape) and are
 * kept; a steady decode loop allocates nothing.
 *
 * Thread-safety: post, submit, wait and host_fn may be called from any thread, for different
 * jobs at once (they run one after another); a job must not be posted again before its done
 * is 1, nor its fields changed while it is pending. new and free from one thread.
 */
#ifndef CAPY_OFFLOAD_CPU_EXPERTS_H
#define CAPY_OFFLOAD_CPU_EXPERTS_H

#include "cpu-topology.h"
#include "../cpu/linear.h"

#include <stdatomic.h>

/* Jobs a pool knows (posted or registered), e.g. one per MoE layer. */
#define CAPY_CPU_EXPERTS_MAX_JOBS 512
/* capy_cpu_experts_arm: how long the armed dispatcher spins after an arm or a job before it
 * polls, and how often it polls then (a decode step's MoE layers hand over a job every
 * 50-300 us; a long prompt step with decode rows may leave milliseconds between them). */
#define CAPY_CPU_EXPERTS_ARM_SPIN_US 2000
#define CAPY_CPU_EXPERTS_ARM_POLL_US 100

struct capy_cpu_experts_opts {
	int threads;                          /* 0: capy_expert_threads_choose's default */
	const struct capy_cpu_topology *topo; /* NULL: read /sys and this process's affinity */
	bool no_pin;                          /* leave the threads unpinned */
	uint32_t poll_us;                     /* 0: only posts wake the pool; else also every poll_us */
	uint32_t spin_us;                     /* after a job, threads look for the next one this long
					       * before they sleep (0: sleep at once): a decode step's
					       * layers hand over a job every ~100 us, and a futex wake
					       * of every thread costs tens of microseconds */
};

struct capy_cpu_experts;

struct capy_cpu_experts_job {
	/* the layer: its routed experts' host weights (the mapped artifact or a pinned copy) */
	const struct capy_linear *gate_up;    /* [n_experts], [2I, H] each */
	const struct capy_linear *down;       /* [n_experts], [H, I] each */
	uint32_t n_experts;
	/* this step's misses, read when the job starts */
	uint32_t n_misses;
	const int32_t *expert;                /* [n_misses] routed expert of each miss */
	struct capy_nvfp4_rows in;            /* the gate_up input, row s for miss s (ld >= n_misses) */
	const float *x;                       /* or, with in.qa NULL: float rows [n_misses][H] */
	const uint32_t *x_row;                /* with x: miss s reads row x_row[s] of x (NULL: row s), so
					       * a token's row is handed over once for all its misses */
	float *out;                           /* [n_misses][H] */
	struct capy_cpu_experts *pool;        /* for capy_cpu_experts_host_fn */
	/* the words */
	_Atomic uint32_t req, done;
	int32_t status;                       /* 0, or the CAPY_E* code of a bad job (when done) */
	char msg[240];                        /* its message */
	/* for reports, written by the pool before done: when it took the job and when it had
	 * finished it (CLOCK_MONOTONIC, ns), and the distinct experts the job read */
	uint64_t taken_ns, finished_ns;
	uint32_t experts_read;
	/* for reports, written by the requester on its own clock (a GPU's globaltimer, ns): when
	 * it requested the job and when it went on with the results */
	uint64_t requested_ns, resumed_ns;
};

/* Start the pool: opts->threads threads (capy_expert_threads_choose), pinned to the cores
 * chosen unless no_pin. CAPY_EINVAL on a bad option, CAPY_EIO/ENOMEM when threads cannot
 * start. */
int capy_cpu_experts_new(struct capy_cpu_experts **out, const struct capy_cpu_experts_opts *o,
			 struct capy_err *err);
/* Stop and join the threads; jobs still requested are finished with CAPY_ECANCELED. */
void capy_cpu_experts_free(struct capy_cpu_experts *pool);

/* The threads and the CPUs they were given. */
const struct capy_expert_threads *capy_cpu_experts_threads(const struct capy_cpu_experts *pool);

/* Make job known to the pool without posting it (for the poll_us path, where the GPU writes
 * req itself); posting registers it too. It stays known until capy_cpu_experts_forget or
 * capy_cpu_experts_free, and its memory must stay valid that long. CAPY_EBUSY beyond CAPY_CPU_EXPERTS_MAX_JOBS. */
int capy_cpu_experts_register(struct capy_cpu_experts *pool, struct capy_cpu_experts_job *job,
			      struct capy_err *err);
/* The pool forgets job (call it when done is 1, before the job's memory goes away): a known
 * job is read by the pool whenever it looks for requests. */
void capy_cpu_experts_forget(struct capy_cpu_experts *pool, struct capy_cpu_experts_job *job);
/* Request job: done = 0, req = 1, wake the pool. Does not wait. */
int capy_cpu_experts_post(struct capy_cpu_experts *pool, struct capy_cpu_experts_job *job,
			  struct capy_err *err);
/* Sleep until job's done is 1; its status (0, or the code with the job's message in err).
 * A waiter on another thread than the poster must know the post happened (done was reset
 * to 0), or it may see the previous request's 1. */
int capy_cpu_experts_wait(struct capy_cpu_experts_job *job, struct capy_err *err);
/* Wake the pool to look at its registered jobs' req words (a job whose req another writer
 * set, e.g. the GPU through mapped memory, with done already 0). */
void capy_cpu_experts_kick(struct capy_cpu_experts *pool);
/* Arm (on) or disarm the pool for a writer that cannot wake it, e.g. a CUDA step whose graph
 * raises req words through mapped memory with no host node: while armed, the dispatcher looks
 * at the registered jobs' req words without sleeping for CAPY_CPU_EXPERTS_ARM_SPIN_US after
 * the arm and after each job, and then every CAPY_CPU_EXPERTS_ARM_POLL_US (a futex wait with
 * a timeout) until it is disarmed; disarmed, it sleeps until a post or a kick as before. So
 * a step that hands over a job every few hundred microseconds has its requests taken within
 * a microsecond or two, one thread of the pool (the dispatcher) is busy only while a step is
 * in flight, and an idle engine burns nothing. Arming costs the caller one futex wake. */
void capy_cpu_experts_arm(struct capy_cpu_experts *pool, bool on);
/* The threads' spin after a job (the opts' spin_us) from their next job on: the expert cache's
 * auto policy changes how far apart a step's jobs are when it switches. */
void capy_cpu_experts_set_spin(struct capy_cpu_experts *pool, uint32_t us);
/* post, then wait. */
int capy_cpu_experts_submit(struct capy_cpu_experts *pool, struct capy_cpu_experts_job *job,
			    struct capy_err *err);
/* The CUDA host-node function (cudaHostFn_t): posts the job (void *) to job->pool. A post
 * that fails (a pool that knows too many jobs) finishes the job at once with its status. */
void capy_cpu_experts_host_fn(void *job);

#endif
