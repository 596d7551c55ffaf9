/* offload.c - expert offload on the CUDA backend (issue 10; docs/offload.md): a model whose
 * routed experts do not all fit the GPU's budget keeps every expert in one page-locked host
 * copy (or, where RLIMIT_MEMLOCK is below them, in the mapped artifact: host_mapped), a pool
 * of device slots as a cache of them (offload/expert-cache.h decides which), and computes
 * each MoE layer's routed slots where their expert is:
 *
 * - decode and short items (the exact W4A4 rows): the resident experts on the GPU from their
 *   slots, the misses on the CPU's expert threads (offload/cpu-experts.h) from the host copy,
 *   inside the same step and the same captured graph: a kernel writes the misses and their
 *   rows into the page-locked hand-over area, a host node posts the CPU job (a futex wake),
 *   the side branch waits on the job's done word (cuStreamWaitValue32, no host thread
 *   spinning; or a host node that sleeps on it where stream memory operations are missing),
 *   and a gather kernel puts the results into the slots' rows before the combine. The CPU
 *   computes an expert exactly as the GPU's exact path does (bit for bit), so the output
 *   does not depend on which experts were resident, nor on the CPU's thread count;
 * - prompt rows (cu_prompt_item: items of CK_GROUPED_MIN_ROWS tokens or more that keep no
 *   states, the grouped GEMMs): every expert read from the host copy through its device
 *   mapping (zero-copy over PCIe), so their bits do not depend on residency either.
 *
 * Between steps the expert cache takes the step's routing, and its replacements are carried
 * out by copies on a stream of their own; an expert's slot enters the device slot map only at
 * the start of a step after its copy completed (an event polled, never waited on), and an
 * evicted expert leaves the map before its slot is overwritten. Which experts are resident
 * changes the speed of a step, never its result. */
#include "cuda-impl.h"
#include "../../offload/cpu-experts.h"
#include "../../offload/expert-cache.h"

#include <cuda.h>
#include <stdlib.h>
#include <string.h>

typedef CUresult (*wait_value_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

#define OFF_EVENTS 16
#define OFF_MAX_SWAPS 32 /* replacements a step: about 2 ms of PCIe for 1.7 MB experts */
#define OFF_SPIN_US 300  /* the expert threads stay awake this long after a job (a step's next layer) */
/* With whole layers resident the GPU runs several layers between two jobs: threads asleep by
 * then took 711 us for a job they do in 146 us awake (an H100 host, docs/perf.md). */
#define OFF_SPIN_US_LAYERS 3000
#define OFF_WAKE_DEFAULT OFF_WAKE_HOST /* kick is not measured yet: docs/offload.md */

/* The expert threads' spin for the cache policy followed. */
static uint32_t off_spin_us(bool whole_layers)
{
	return whole_layers ? OFF_SPIN_US_LAYERS : OFF_SPIN_US;
}

struct off_pending {
	uint32_t key, slot;
	uint64_t seq;
};

struct cu_off_layer {
	struct cuda_engine *e;
	uint32_t moe;
};

/* How the CPU learns that a layer's job was requested (CAPY_CUDA_OFFLOAD_WAKE). */
enum off_wake {
	OFF_WAKE_HOST, /* a host node posts the job, and the wait for its result follows the node */
	OFF_WAKE_KICK, /* the hand-over kernel requests it; a host node off the critical path wakes the pool */
	OFF_WAKE_ARM,  /* the hand-over kernel requests it; the pool is armed for the step (no host node) */
};

struct cu_offload {
	uint64_t E, n_moe, k, S;          /* experts per layer, MoE layers, k, slots of a step (tmax * k) */
	uint64_t slots, slot_bytes;
	uint8_t *pool;                    /* device: slots x slot_bytes */
	/* elastic attention cache (offload/plan.h): one allocation holds the held pages, then
	 * the pool; the cache's pages beyond the held ones take the pool's lowest slots */
	uint8_t *arena;                   /* NULL: not elastic */
	uint64_t lent;                    /* slots [0, lent) are the attention cache's now */
	uint32_t pages_held, pages_max;   /* the plan's held pages, and all it holds */
	uint8_t *host;                    /* the page-locked copy of every expert stack (NULL: mapped) */
	const uint8_t **stack_host;       /* [n_moe]: each stack's host address (in the copy or the mapping) */
	uint8_t **stack_dev;              /* [n_moe]: the same bytes' device address */
	uint64_t *stride;                 /* [n_moe]: each stack's record stride */
	void *registered;                 /* the artifact's mapping, registered with CUDA (mapped, no HMM) */
	enum capy_offload_host host_mode;
	int32_t *map_dev, *map_host;      /* [n_moe][E]: the expert's slot, or -1 (host: pinned mirror) */
	int32_t *slot_at;                 /* [n_moe][E] host: the slot given to the expert (ready or not) */
	int32_t *owner;                   /* [slots]: the key (moe * E + x) in the slot, or -1 */
	uint32_t *free_slots;
	uint64_t n_free;
	bool map_dirty;
	int32_t *sids, *gids;             /* device [S] */
	uint8_t *hand, *hand_dev;         /* the hand-over area (offload/plan.h) and its device address */
	struct capy_plan_hand lay;
	struct ck_offload_hand hd;        /* device addresses */
	int32_t *route;                   /* host: [n_moe][S] the step's routed ids */
	int32_t *route_dev;
	struct capy_cpu_experts_job **job; /* [n_moe], in the hand-over area */
	struct ck_offload_job *jw;        /* [n_moe]: their words' device addresses */
	uint64_t **resumed;               /* [n_moe]: device address of each job's resumed_ns */
	enum off_wake wake;
	cudaStream_t kick;                /* (kick): the wake-up nodes' branch, joined at the step's end */
	cudaEvent_t ev_kick_join;
	bool kicks;                       /* (kick): wake-up nodes enqueued since the last join */
	bool *used;                       /* [n_moe]: a layer of the model runs it (not the MTP head's) */
	uint64_t n_used;
	struct capy_cpu_experts *cpu;
	struct capy_linear *gu, *dn;      /* [n_moe][E]: the experts' host weights, in the copy */
	struct cu_off_layer *ud;          /* [n_moe] */
	struct capy_expert_cache *cache;
	struct capy_expert_swap *swaps;
	struct off_pending *pend;
	uint64_t n_pend, pend_cap;
	cudaStream_t copy, side;
	cudaEvent_t ev[OFF_EVENTS], ev_fork, ev_join;
	uint64_t seq;                     /* batches of copies issued */
	wait_value_fn wait_value;         /* NULL: a host node waits */
	bool wait_kernel;                 /* the gather kernel waits on the main stream (no side branch) */
	bool spin_follows;                /* auto policy: the threads' spin set from the policy followed */
	/* counts */
	uint64_t misses, hits, streamed, loads, evictions, steps, resident, step_exact;
	uint64_t jobs, job_bytes, job_ns, wait_ns; /* CPU jobs with misses: expert bytes read, times */
	int threads;
};

static int apply_swaps(struct cu_offload *o, uint64_t n, struct capy_err *err);

/* The stack of the expert records of artifact stack `st` at data (host or device), as the
 * kernels read it: the first expert's matrices, record stride, E. */
static void stacks_at(const struct cuda_engine *e, const struct capy_moe_w *m, const struct capy_expert_stack *st,
		      const uint8_t *data, uint64_t stride, uint64_t E, struct ck_expert_stack *gu, struct ck_expert_stack *dn)
{
	const uint8_t *rec0 = e->a->base + st->offset;

	gu->first = cu_lin_at(&m->gate_up[0], data + ((const uint8_t *)m->gate_up[0].data - rec0));
	dn->first = cu_lin_at(&m->down[0], data + ((const uint8_t *)m->down[0].data - rec0));
	gu->stride = dn->stride = stride;
	gu->E = dn->E = E;
}

/* The bytes of artifact stack i held in host RAM: every stack's but the MTP head's, which an
 * offloading engine never runs (cu_open refuses the head with offload) and the memory plan
 * does not count. */
static uint64_t host_bytes(const struct capy_artifact *a, size_t i)
{
	return capy_plan_is_mtp(a->stacks[i].name) ? 0 : a->stacks[i].count * a->stacks[i].stride;
}

/* The artifact's expert stack that holds layer h's routed experts. */
static int stack_of(const struct capy_artifact *a, const struct capy_layer_w *h, struct capy_err *err)
{
	const uint64_t off = (uint64_t)((const uint8_t *)h->moe_w.gate_up[0].data - a->base);

	for (size_t i = 0; i < a->nstacks; i++)
		if (off >= a->stacks[i].offset && off < a->stacks[i].offset + a->stacks[i].count * a->stacks[i].stride)
			return (int)i;
	return capy_err_set(err, CAPY_EFORMAT, "%s: routed experts at offset %" PRIu64 " are in no expert stack", a->path,
			    off);
}

static void CUDART_CB host_post(void *p)
{
	const struct cu_off_layer *u = p;
	struct cu_offload *o = u->e->off;
	struct capy_cpu_experts_job *j = o->job[u->moe];
	const uint32_t n = *(volatile uint32_t *)(o->hand + o->lay.n_misses);
	struct capy_err err = { 0 };

	j->n_misses = n;
	if (!n) {
		atomic_store_explicit(&j->done, 1, memory_order_release);
		return;
	}
	if (capy_cpu_experts_post(o->cpu, j, &err) < 0) {
		j->status = err.code ? err.code : CAPY_EIO;
		snprintf(j->msg, sizeof(j->msg), "%.*s", (int)sizeof(j->msg) - 1, err.msg);
		atomic_store_explicit(&j->done, 1, memory_order_release);
	}
}

static void CUDART_CB host_wait(void *p)
{
	const struct cu_off_layer *u = p;
	struct capy_err err = { 0 };

	capy_cpu_experts_wait(u->e->off->job[u->moe], &err); /* its status is read after the step */
}

/* A layer's wake-up (OFF_WAKE_KICK), reached once its hand-over kernel has run: a pool still
 * awake from the previous job (spin_us) has taken the GPU's request already; otherwise this
 * wakes it. Nothing on the GPU waits for it but the step's end, so its latency (a host node's
 * round trip, ~150-200 us on the H200 VM) costs only when the pool was asleep. */
static void CUDART_CB host_kick(void *p)
{
	const struct cu_off_layer *u = p;
	struct cu_offload *o = u->e->off;

	if (atomic_load_explicit(&o->job[u->moe]->req, memory_order_acquire))
		capy_cpu_experts_kick(o->cpu);
}

/* The routed experts' host side, page-locked: one copy of every stack the model runs (the
 * plan's host_experts), mapped for the GPU's prompt rows. */
static int host_copy(struct cuda_engine *e, struct capy_err *err)
{
	const struct capy_artifact *a = e->a;
	struct cu_offload *o = e->off;
	uint64_t total = 0;
	uint8_t *dev;
	cudaError_t r;

	for (uint64_t i = 0; i < o->n_moe; i++)
		total += host_bytes(a, i);
	if ((r = cudaHostAlloc((void **)&o->host, total ? total : 256, cudaHostAllocMapped | cudaHostAllocPortable)) !=
	    cudaSuccess)
		return capy_err_set(err, CAPY_ENOMEM, "cuda: %.1f MiB of page-locked host memory for the routed experts: %s",
				    (double)total / 1048576.0, cudaGetErrorString(r));
	if ((r = cudaHostGetDevicePointer((void **)&dev, o->host, 0)) != cudaSuccess)
		return cu_err(err, r, "mapping the routed experts' host copy");
	total = 0;
	for (uint64_t i = 0; i < o->n_moe; i++) {
		memcpy(o->host + total, a->base + a->stacks[i].offset, host_bytes(a, i));
		o->stack_host[i] = o->host + total;
		o->stack_dev[i] = dev + total;
		total += host_bytes(a, i);
	}
	o->host_mode = CAPY_OFFLOAD_HOST_PINNED;
	return 0;
}

/* The routed experts' host side where page-locking them all is not allowed (the plan's
 * pinned is false: RLIMIT_MEMLOCK below their bytes): no copy, the artifact's mapping itself.
 * The CPU reads it like any memory and the slots are filled from it (pageable copies, which
 * the driver stages: slower). The GPU's prompt rows read it where the device can address
 * pageable memory (HMM or ATS), else through the mapping registered with CUDA, read-only;
 * where neither works the engine does not open. CAPY_CUDA_OFFLOAD_PAGEABLE=0 skips the first
 * (tests reach the registered view on any machine). */
static int host_mapped(struct cuda_engine *e, struct capy_err *err)
{
	const struct capy_artifact *a = e->a;
	struct cu_offload *o = e->off;
	const char *env = getenv("CAPY_CUDA_OFFLOAD_PAGEABLE");
	int pageable = 0;
	cudaError_t r;

	if ((r = cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, e->device)) != cudaSuccess)
		return cu_err(err, r, "asking whether the GPU reads pageable memory");
	for (uint64_t i = 0; i < o->n_moe; i++)
		o->stack_host[i] = a->base + a->stacks[i].offset;
	if (pageable && !(env && !strcmp(env, "0"))) {
		for (uint64_t i = 0; i < o->n_moe; i++)
			o->stack_dev[i] = (uint8_t *)(uintptr_t)o->stack_host[i];
		o->host_mode = CAPY_OFFLOAD_HOST_PAGEABLE;
		return 0;
	}
	/* one registration from the first stack's page to the last one's end */
	uint64_t lo = UINT64_MAX, hi = 0;
	uint8_t *dev;
	for (uint64_t i = 0; i < o->n_moe; i++) {
		lo = CAPY_MIN(lo, a->stacks[i].offset);
		hi = CAPY_MAX(hi, a->stacks[i].offset + a->stacks[i].count * a->stacks[i].stride);
	}
	const uintptr_t b = (uintptr_t)(a->base + lo) & ~(uintptr_t)4095, end = (uintptr_t)(a->base + hi);
	if ((r = cudaHostRegister((void *)b, end - b,
				  cudaHostRegisterMapped | cudaHostRegisterPortable | cudaHostRegisterReadOnly)) != cudaSuccess) {
		cudaGetLastError();
		return capy_err_set(err, CAPY_EUNSUPPORTED,
				    "cuda: the routed experts (%.1f MiB) stay in the mapped artifact (RLIMIT_MEMLOCK %.1f MiB "
				    "is below them), and this GPU can neither read pageable memory (HMM) nor register the "
				    "mapping (%s): raise the limit (ulimit -l, or LimitMEMLOCK= in a unit)",
				    (double)e->plan.host_experts / 1048576.0, (double)e->plan.host.memlock / 1048576.0,
				    cudaGetErrorString(r));
	}
	o->registered = (void *)b;
	if ((r = cudaHostGetDevicePointer((void **)&dev, (void *)b, 0)) != cudaSuccess)
		return cu_err(err, r, "mapping the artifact's experts for the GPU");
	for (uint64_t i = 0; i < o->n_moe; i++)
		o->stack_dev[i] = dev + ((uintptr_t)o->stack_host[i] - b);
	o->host_mode = CAPY_OFFLOAD_HOST_REGISTERED;
	return 0;
}

int cu_offload_open(struct cuda_engine *e, struct capy_err *err)
{
	const struct capy_artifact *a = e->a;
	const struct capy_plan *p = &e->plan;
	const struct capy_model_config *c = &e->c;
	struct cu_offload *o;
	cudaError_t r;
	int rc;

	if (p->all_resident)
		return 0;
	if (!(o = calloc(1, sizeof(*o))))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	e->off = o;
	o->E = c->n_experts;
	o->n_moe = a->nstacks;
	o->k = c->n_experts_per_tok;
	o->S = e->s.tmax * o->k;
	o->slots = p->slots;
	o->slot_bytes = p->slot_bytes;
	/* every MoE layer: NVFP4 experts (the CPU's exact kernels), its stack */
	for (uint64_t li = 0; li < c->n_layers; li++) {
		const struct capy_layer_w *h = &e->hw.layers[li];
		if (!h->moe)
			continue;
		for (uint64_t x = 0; x < o->E; x++)
			if (h->moe_w.gate_up[x].dtype != CAPY_DT_NVFP4 || h->moe_w.down[x].dtype != CAPY_DT_NVFP4)
				return capy_err_set(err, CAPY_EUNSUPPORTED,
						    "cuda: expert offload computes the experts that miss the GPU with the CPU's exact "
						    "W4A4 kernels, and layer %" PRIu64 "'s routed experts are %s: convert them with "
						    "capy-convert --quantize-experts, or give the GPU room for all of them",
						    li, capy_dtype_name(h->moe_w.gate_up[x].dtype));
		if ((rc = stack_of(a, h, err)) < 0)
			return rc;
		e->layers[li].moe.stack = rc;
	}
	/* the host copy */
	o->stack_host = calloc(o->n_moe, sizeof(*o->stack_host));
	o->stack_dev = calloc(o->n_moe, sizeof(*o->stack_dev));
	o->stride = calloc(o->n_moe, sizeof(*o->stride));
	o->map_host = NULL;
	o->slot_at = malloc(o->n_moe * o->E * sizeof(*o->slot_at));
	o->owner = malloc((o->slots + 1) * sizeof(*o->owner));
	o->free_slots = malloc((o->slots + 1) * sizeof(*o->free_slots));
	o->gu = calloc(o->n_moe * o->E, sizeof(*o->gu));
	o->dn = calloc(o->n_moe * o->E, sizeof(*o->dn));
	o->ud = calloc(o->n_moe, sizeof(*o->ud));
	o->job = calloc(o->n_moe, sizeof(*o->job));
	o->jw = calloc(o->n_moe, sizeof(*o->jw));
	o->resumed = calloc(o->n_moe, sizeof(*o->resumed));
	o->used = calloc(o->n_moe, sizeof(*o->used));
	o->swaps = calloc(o->n_moe * o->E, sizeof(*o->swaps));
	if (!o->stack_host || !o->stack_dev || !o->stride || !o->slot_at || !o->owner || !o->free_slots || !o->gu ||
	    !o->dn || !o->ud || !o->swaps || !o->job || !o->jw || !o->resumed || !o->used)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	for (uint64_t i = 0; i < o->n_moe; i++) {
		o->stride[i] = a->stacks[i].stride;
		if (a->stacks[i].count != o->E)
			return capy_err_set(err, CAPY_EFORMAT, "%s: expert stack %s holds %" PRIu64 " experts, the model %" PRIu64,
					    a->path, a->stacks[i].name, a->stacks[i].count, o->E);
	}
	if ((rc = p->pinned ? host_copy(e, err) : host_mapped(e, err)) < 0)
		return rc;
	/* the hand-over area */
	capy_plan_offload_hand(&o->lay, a, c, e->s.tmax);
	if ((r = cudaHostAlloc((void **)&o->hand, o->lay.bytes, cudaHostAllocMapped | cudaHostAllocPortable)) != cudaSuccess ||
	    (r = cudaHostGetDevicePointer((void **)&o->hand_dev, o->hand, 0)) != cudaSuccess)
		return cu_err(err, r, "allocating the experts' hand-over area");
	memset(o->hand, 0, o->lay.bytes);
	_Static_assert(sizeof(struct capy_cpu_experts_job) <= CAPY_PLAN_JOB_BYTES, "offload/plan.h: CAPY_PLAN_JOB_BYTES");
	for (uint64_t i = 0; i < o->n_moe; i++) {
		const uint64_t at = o->lay.job + i * CAPY_PLAN_JOB_BYTES;
		struct capy_cpu_experts_job *j = (struct capy_cpu_experts_job *)(o->hand + at);
		o->job[i] = j;
		o->jw[i].n_misses = (uint32_t *)(o->hand_dev + at + offsetof(struct capy_cpu_experts_job, n_misses));
		o->jw[i].req = (uint32_t *)(o->hand_dev + at + offsetof(struct capy_cpu_experts_job, req));
		o->jw[i].done = (uint32_t *)(o->hand_dev + at + offsetof(struct capy_cpu_experts_job, done));
		o->jw[i].requested = (uint64_t *)(o->hand_dev + at + offsetof(struct capy_cpu_experts_job, requested_ns));
		o->resumed[i] = (uint64_t *)(o->hand_dev + at + offsetof(struct capy_cpu_experts_job, resumed_ns));
		atomic_store(&j->done, 1);
		j->gate_up = o->gu + i * o->E;
		j->down = o->dn + i * o->E;
		j->n_experts = (uint32_t)o->E;
		j->expert = (const int32_t *)(o->hand + o->lay.expert);
		j->x = (const float *)(o->hand + o->lay.x);
		j->x_row = (const uint32_t *)(o->hand + o->lay.x_row);
		j->out = (float *)(o->hand + o->lay.out);
	}
	o->hd.n_misses = (uint32_t *)(o->hand_dev + o->lay.n_misses);
	o->hd.expert = (int32_t *)(o->hand_dev + o->lay.expert);
	o->hd.miss_slot = (uint32_t *)(o->hand_dev + o->lay.miss_slot);
	o->hd.x_row = (uint32_t *)(o->hand_dev + o->lay.x_row);
	o->hd.x = (float *)(o->hand_dev + o->lay.x);
	o->hd.out = (const float *)(o->hand_dev + o->lay.out);
	o->route = (int32_t *)(o->hand + o->lay.route);
	o->route_dev = (int32_t *)(o->hand_dev + o->lay.route);
	/* device: the slot pool, the maps, the step's slot ids (offload_dev of the plan) */
	const uint64_t map_b = CAPY_ALIGN_UP(o->n_moe * o->E * 4, CAPY_PLAN_ALIGN), ids_b = CAPY_ALIGN_UP(o->S * 4, CAPY_PLAN_ALIGN);
	uint8_t *dev;
	if ((r = cudaMalloc((void **)&dev, map_b + 2 * ids_b)) != cudaSuccess)
		return cu_err(err, r, "allocating the expert slot maps");
	o->map_dev = (int32_t *)dev;
	o->sids = (int32_t *)(dev + map_b);
	o->gids = (int32_t *)(dev + map_b + ids_b);
	e->device_bytes += map_b + 2 * ids_b;
	if (p->elastic) { /* the held pages, then the pool, which the cache's growth shares */
		if ((r = cudaMalloc((void **)&o->arena, p->pool)) != cudaSuccess)
			return capy_err_set(err, CAPY_ENOMEM,
					    "cuda: %" PRIu64 " attention-cache pages and %" PRIu64 " expert slots (%.1f MiB): %s",
					    p->pages_held, o->slots, (double)p->pool / 1048576.0, cudaGetErrorString(r));
		o->pool = o->arena + p->pages_held * p->page_bytes;
		o->pages_held = (uint32_t)p->pages_held;
		o->pages_max = (uint32_t)p->pages;
		e->pages = o->arena; /* cu_pages_reserve takes pages from here on (cu_offload_pages) */
		e->pages_cap = o->pages_held;
		e->device_bytes += p->pool;
	} else {
		if ((r = cudaMalloc((void **)&o->pool, o->slots ? o->slots * o->slot_bytes : 256)) != cudaSuccess)
			return capy_err_set(err, CAPY_ENOMEM, "cuda: %" PRIu64 " expert slots of %.3f MiB: %s", o->slots,
					    (double)o->slot_bytes / 1048576.0, cudaGetErrorString(r));
		e->device_bytes += o->slots * o->slot_bytes;
	}
	if ((r = cudaMallocHost((void **)&o->map_host, o->n_moe * o->E * 4)) != cudaSuccess)
		return cu_err(err, r, "allocating the expert slot map");
	for (uint64_t i = 0; i < o->n_moe * o->E; i++)
		o->map_host[i] = o->slot_at[i] = -1;
	for (uint64_t s = 0; s < o->slots; s++) {
		o->owner[s] = -1;
		o->free_slots[s] = (uint32_t)(o->slots - 1 - s); /* popped from the end: slot 0 first */
	}
	o->n_free = o->slots;
	if ((r = cudaMemcpy(o->map_dev, o->map_host, o->n_moe * o->E * 4, cudaMemcpyHostToDevice)) != cudaSuccess)
		return cu_err(err, r, "uploading the expert slot map");
	/* the kernels' stacks and the CPU's weights, layer by layer */
	for (uint64_t li = 0; li < c->n_layers; li++) {
		const struct capy_layer_w *h = &e->hw.layers[li];
		struct cu_moe *m = &e->layers[li].moe;
		if (!h->moe)
			continue;
		const struct capy_expert_stack *st = &a->stacks[m->stack];
		const uint8_t *rec0 = a->base + st->offset;
		stacks_at(e, &h->moe_w, st, o->stack_dev[m->stack], st->stride, o->E, &m->gate_up, &m->down);
		stacks_at(e, &h->moe_w, st, o->pool, o->slot_bytes, o->slots, &m->slot_gu, &m->slot_dn);
		o->ud[m->stack] = (struct cu_off_layer){ e, (uint32_t)m->stack };
		o->n_used += !o->used[m->stack];
		o->used[m->stack] = true;
		for (uint64_t x = 0; x < o->E; x++) {
			const struct capy_linear *g = &h->moe_w.gate_up[x], *d = &h->moe_w.down[x];
			const uint8_t *hb = o->stack_host[m->stack];
			if ((rc = capy_linear_init(&o->gu[m->stack * o->E + x], g->dtype, g->n, g->k, g->nparts, g->part_rows,
						   hb + ((const uint8_t *)g->data - rec0), err)) < 0 ||
			    (rc = capy_linear_init(&o->dn[m->stack * o->E + x], d->dtype, d->n, d->k, d->nparts, d->part_rows,
						   hb + ((const uint8_t *)d->data - rec0), err)) < 0)
				return capy_err_prefix(err, "cuda: the experts' host copy");
		}
	}
	const char *pol = getenv("CAPY_CUDA_OFFLOAD_POLICY");
	if (pol && *pol && strcmp(pol, "layers") && strcmp(pol, "experts") && strcmp(pol, "auto"))
		return capy_err_set(err, CAPY_EINVAL, "CAPY_CUDA_OFFLOAD_POLICY=%s: expected layers, experts or auto", pol);
	/* auto starts with whole layers (loaded at once) and follows the spread policy when its
	 * modelled CPU cost is lower (expert-cache.h) */
	const bool adaptive = pol && !strcmp(pol, "auto"), whole_layers = adaptive || (pol && !strcmp(pol, "layers"));
	if (o->slots && (rc = capy_expert_cache_new(&o->cache,
						    &(struct capy_expert_cache_params){ .layers = (uint32_t)o->n_moe,
											.experts = (uint32_t)o->E,
											.slots = o->slots,
											.max_swaps = OFF_MAX_SWAPS,
											.whole_layers = whole_layers,
											.adaptive = adaptive },
						    err)) < 0)
		return rc;
	{ /* How the CPU learns of a job (docs/offload.md): CAPY_CUDA_OFFLOAD_WAKE=host, a host
	   * node per layer posts it and the wait for the result follows it; =kick, the hand-over
	   * kernel requests it and a host node off the critical path wakes the pool if asleep. */
		const char *w = getenv("CAPY_CUDA_OFFLOAD_WAKE"), *sp = getenv("CAPY_CUDA_OFFLOAD_SPIN_US");
		o->wake = OFF_WAKE_DEFAULT;
		if (w && *w) {
			if (!strcmp(w, "host"))
				o->wake = OFF_WAKE_HOST;
			else if (!strcmp(w, "kick"))
				o->wake = OFF_WAKE_KICK;
			else if (!strcmp(w, "arm"))
				o->wake = OFF_WAKE_ARM;
			else
				return capy_err_set(err, CAPY_EINVAL, "CAPY_CUDA_OFFLOAD_WAKE=%s: expected host, kick or arm", w);
		}
		struct capy_cpu_experts_opts co = { .threads = e->opts.expert_threads,
						    .spin_us = sp ? (uint32_t)strtoul(sp, NULL, 10)
								  : off_spin_us(whole_layers) };
		if ((rc = capy_cpu_experts_new(&o->cpu, &co, err)) < 0)
			return capy_err_prefix(err, "cuda: the CPU's expert threads");
		o->spin_follows = adaptive && o->cache && !sp;
	}
	for (uint64_t i = 0; i < o->n_moe; i++)
		if ((rc = capy_cpu_experts_register(o->cpu, o->job[i], err)) < 0)
			return capy_err_prefix(err, "cuda");
	o->threads = capy_cpu_experts_threads(o->cpu)->n;
	if ((r = cudaStreamCreateWithFlags(&o->copy, cudaStreamNonBlocking)) != cudaSuccess ||
	    (r = cudaStreamCreateWithFlags(&o->side, cudaStreamNonBlocking)) != cudaSuccess ||
	    (r = cudaStreamCreateWithFlags(&o->kick, cudaStreamNonBlocking)) != cudaSuccess ||
	    (r = cudaEventCreateWithFlags(&o->ev_kick_join, cudaEventDisableTiming)) != cudaSuccess ||
	    (r = cudaEventCreateWithFlags(&o->ev_fork, cudaEventDisableTiming)) != cudaSuccess ||
	    (r = cudaEventCreateWithFlags(&o->ev_join, cudaEventDisableTiming)) != cudaSuccess)
		return cu_err(err, r, "creating the offload streams");
	for (int i = 0; i < OFF_EVENTS; i++)
		if ((r = cudaEventCreateWithFlags(&o->ev[i], cudaEventDisableTiming)) != cudaSuccess)
			return cu_err(err, r, "creating the offload events");
	if (o->cache) { /* whole layers first: their copies start now, before the first step */
		const uint64_t n = capy_expert_cache_start(o->cache, o->swaps, o->n_moe * o->E);
		if (n && (rc = apply_swaps(o, n, err)) < 0)
			return rc;
	}
	{ /* the wait on the done word: a stream memory operation, unless missing or turned off
	   * (=host: a host node), or (=kernel) the gather kernel's own wait on the main stream,
	   * for a wake-up where the GPU writes the words itself */
		const char *w = getenv("CAPY_CUDA_OFFLOAD_WAIT");
		void *fn = NULL;
		enum cudaDriverEntryPointQueryResult q;
		if (w && *w && strcmp(w, "host") && strcmp(w, "stream") && strcmp(w, "kernel"))
			return capy_err_set(err, CAPY_EINVAL, "CAPY_CUDA_OFFLOAD_WAIT=%s: expected stream, host or kernel", w);
		o->wait_kernel = w && !strcmp(w, "kernel");
		if (o->wait_kernel && o->wake == OFF_WAKE_HOST)
			return capy_err_set(err, CAPY_EINVAL, "CAPY_CUDA_OFFLOAD_WAIT=kernel needs CAPY_CUDA_OFFLOAD_WAKE=arm or kick "
							      "(the GPU writes the job's words)");
		if (!(w && !strcmp(w, "host")) &&
		    cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault, &q) == cudaSuccess &&
		    q == cudaDriverEntryPointSuccess)
			o->wait_value = (wait_value_fn)fn;
		cudaGetLastError();
	}
	return 0;
}

void cu_offload_close(struct cuda_engine *e)
{
	struct cu_offload *o = e->off;

	if (!o)
		return;
	if (o->copy)
		cudaStreamSynchronize(o->copy);
	if (o->cpu) {
		for (uint64_t i = 0; i < o->n_moe && o->job; i++)
			if (o->job[i])
				capy_cpu_experts_forget(o->cpu, o->job[i]);
		capy_cpu_experts_free(o->cpu);
	}
	capy_expert_cache_free(o->cache);
	for (int i = 0; i < OFF_EVENTS; i++)
		if (o->ev[i])
			cudaEventDestroy(o->ev[i]);
	if (o->ev_fork)
		cudaEventDestroy(o->ev_fork);
	if (o->ev_join)
		cudaEventDestroy(o->ev_join);
	if (o->copy)
		cudaStreamDestroy(o->copy);
	if (o->side)
		cudaStreamDestroy(o->side);
	if (o->kick)
		cudaStreamDestroy(o->kick);
	if (o->ev_kick_join)
		cudaEventDestroy(o->ev_kick_join);
	if (o->arena) { /* the pages are in it too */
		cudaFree(o->arena);
		e->pages = NULL;
		e->pages_cap = 0;
	} else {
		cudaFree(o->pool);
	}
	cudaFree(o->map_dev);
	cudaFreeHost(o->map_host);
	cudaFreeHost(o->hand);
	cudaFreeHost(o->host);
	if (o->registered)
		cudaHostUnregister(o->registered);
	free(o->stack_host);
	free(o->stack_dev);
	free(o->stride);
	free(o->slot_at);
	free(o->owner);
	free(o->free_slots);
	free(o->gu);
	free(o->dn);
	free(o->ud);
	free(o->swaps);
	free(o->pend);
	free(o->job);
	free(o->jw);
	free(o->resumed);
	free(o->used);
	free(o);
	e->off = NULL;
}

/* --- inside a step ------------------------------------------------------------------------- */

/* OFF_WAKE_KICK: layer moe's wake-up node on the kick branch, forked from the step's stream
 * at ev_fork (the caller records it after the hand-over kernel) and joined at the step's end
 * (cu_offload_layers_end). Other wake-ups: nothing. */
static cudaError_t kick_after_fork(struct cu_offload *o, uint64_t moe)
{
	cudaError_t r;

	if (o->wake != OFF_WAKE_KICK)
		return cudaSuccess;
	if ((r = cudaStreamWaitEvent(o->kick, o->ev_fork, 0)) != cudaSuccess ||
	    (r = cudaLaunchHostFunc(o->kick, host_kick, &o->ud[moe])) != cudaSuccess)
		return r;
	o->kicks = true;
	return cudaSuccess;
}

int cu_offload_experts(struct cuda_engine *e, const struct cu_layer *l, const float *xn, struct capy_err *err)
{
	struct cu_offload *o = e->off;
	const struct cu_moe *m = &l->moe;
	const struct ck_step *st = &e->step;
	struct cu_scratch *sc = &e->s;
	const uint64_t T = st->T, k = o->k, H = e->c.hidden_size, moe = (uint64_t)m->stack;
	const bool exact = st->n_grouped < T;
	cudaError_t r;

	TRY(ck_offload_handoff(sc->moe_ids, st->n_grouped ? st->grouped : NULL, xn, T, k, H, o->map_dev + moe * o->E,
			       o->sids, o->gids, o->route_dev + moe * o->S, o->hd,
			       o->wake != OFF_WAKE_HOST ? o->jw[moe] : (struct ck_offload_job){ .requested = o->jw[moe].requested },
			       exact, e->stream),
	    "expert hand-over");
	if (exact && o->wait_kernel) { /* the resident experts, then the gather waits for the CPU's */
		if ((o->wake == OFF_WAKE_KICK && (r = cudaEventRecord(o->ev_fork, e->stream)) != cudaSuccess) ||
		    (r = kick_after_fork(o, moe)) != cudaSuccess)
			return cu_err(err, r, "waking the CPU's experts");
		TRY(ck_moe_experts(&m->slot_gu, &m->slot_dn, xn, T, k, o->sids, NULL, 0, sc->moe_out, sc->moe_ws, e->stream),
		    "experts (resident)");
		TRY(ck_offload_gather(o->hd, T * k, H, sc->moe_out, o->jw[moe].done, o->resumed[moe], e->stream),
		    "gathering the CPU's experts");
	} else if (exact) { /* the misses: posted to the CPU, waited for, gathered, beside the GPU's experts */
		if ((r = cudaEventRecord(o->ev_fork, e->stream)) != cudaSuccess ||
		    (r = cudaStreamWaitEvent(o->side, o->ev_fork, 0)) != cudaSuccess ||
		    (o->wake == OFF_WAKE_HOST && (r = cudaLaunchHostFunc(o->side, host_post, &o->ud[moe])) != cudaSuccess) ||
		    (r = kick_after_fork(o, moe)) != cudaSuccess)
			return cu_err(err, r, "handing experts to the CPU");
		if (o->wait_value) {
			CUresult cr = o->wait_value((CUstream)o->side, (CUdeviceptr)(uintptr_t)o->jw[moe].done, 1,
						    CU_STREAM_WAIT_VALUE_EQ);
			if (cr != CUDA_SUCCESS)
				return capy_err_set(err, CAPY_EIO, "cuda: waiting for the CPU's experts: driver error %d", (int)cr);
		} else if ((r = cudaLaunchHostFunc(o->side, host_wait, &o->ud[moe])) != cudaSuccess) {
			return cu_err(err, r, "waiting for the CPU's experts");
		}
		TRY(ck_offload_gather(o->hd, T * k, H, sc->moe_out, NULL, o->resumed[moe], o->side), "gathering the CPU's experts");
		if ((r = cudaEventRecord(o->ev_join, o->side)) != cudaSuccess)
			return cu_err(err, r, "joining the CPU's experts");
		TRY(ck_moe_experts(&m->slot_gu, &m->slot_dn, xn, T, k, o->sids, NULL, 0, sc->moe_out, sc->moe_ws, e->stream),
		    "experts (resident)");
	}
	if (st->n_grouped)
		TRY(ck_moe_experts(&m->gate_up, &m->down, xn, T, k, o->gids, st->grouped, st->n_grouped, sc->moe_out, sc->moe_ws,
				   e->stream),
		    "experts (from host memory)");
	if (exact && !o->wait_kernel && (r = cudaStreamWaitEvent(e->stream, o->ev_join, 0)) != cudaSuccess)
		return cu_err(err, r, "joining the CPU's experts");
	return 0;
}

/* --- between steps ------------------------------------------------------------------------- */

/* Loads whose copy has finished enter the slot map (in the order they were issued); the map
 * goes up before the step when it changed. Never waits for a copy. */
static int drain_loads(struct cu_offload *o, struct capy_err *err)
{
	uint64_t done = 0;
	cudaError_t r;

	while (done < o->n_pend) {
		const struct off_pending *pd = &o->pend[done];
		r = cudaEventQuery(o->ev[pd->seq % OFF_EVENTS]);
		if (r == cudaErrorNotReady)
			break;
		if (r != cudaSuccess)
			return cu_err(err, r, "copying an expert into its slot");
		if (o->owner[pd->slot] == (int32_t)pd->key) {
			o->map_host[pd->key] = (int32_t)pd->slot;
			o->resident++;
			o->map_dirty = true;
		}
		done++;
	}
	if (done) {
		memmove(o->pend, o->pend + done, (o->n_pend - done) * sizeof(*o->pend));
		o->n_pend -= done;
	}
	return 0;
}

int cu_offload_before_step(struct cuda_engine *e, struct capy_err *err)
{
	struct cu_offload *o = e->off;
	cudaError_t r;
	int rc;

	if ((rc = drain_loads(o, err)) < 0)
		return rc;
	/* armed until the step is over (cu_offload_after_step; a step that fails before leaves it
	 * armed, polling, until the next one ends) */
	if (o->wake == OFF_WAKE_ARM)
		capy_cpu_experts_arm(o->cpu, true);
	if (o->map_dirty) {
		if ((r = cudaMemcpyAsync(o->map_dev, o->map_host, o->n_moe * o->E * 4, cudaMemcpyHostToDevice, e->stream)) !=
		    cudaSuccess)
			return cu_err(err, r, "uploading the expert slot map");
		o->map_dirty = false;
	}
	return 0;
}

static int pend_push(struct cu_offload *o, uint32_t key, uint32_t slot, struct capy_err *err)
{
	if (o->n_pend == o->pend_cap) {
		uint64_t cap = o->pend_cap ? 2 * o->pend_cap : 256;
		struct off_pending *p = realloc(o->pend, cap * sizeof(*p));
		if (!p)
			return capy_err_set(err, CAPY_ENOMEM, "out of memory");
		o->pend = p;
		o->pend_cap = cap;
	}
	o->pend[o->n_pend++] = (struct off_pending){ key, slot, o->seq };
	return 0;
}

/* The expert in slot s leaves it: out of the slot map (if its copy had landed) and the
 * owner tables. The caller reuses or frees the slot. */
static void unmap_slot(struct cu_offload *o, uint64_t s)
{
	const int32_t key = o->owner[s];

	if (o->map_host[key] >= 0) {
		o->map_host[key] = -1;
		o->resident--;
		o->map_dirty = true;
	}
	o->slot_at[key] = -1;
	o->owner[s] = -1;
	o->evictions++;
}

/* The cache's replacements: each evicted expert leaves the slot map, each loaded one is copied
 * into its slot on the copy stream (entering the map when the copy has landed, drain_loads). */
static int apply_swaps(struct cu_offload *o, uint64_t n, struct capy_err *err)
{
	cudaError_t r;

	/* A batch's event is reused OFF_EVENTS batches later: a batch still pending then is
	 * waited for (a copy backlog that long is a budget of copies far exceeded). */
	if (o->n_pend && o->pend[0].seq + OFF_EVENTS <= o->seq + 1) {
		if ((r = cudaEventSynchronize(o->ev[o->pend[0].seq % OFF_EVENTS])) != cudaSuccess)
			return cu_err(err, r, "copying experts into their slots");
	}
	for (uint64_t i = 0; i < n; i++) {
		const struct capy_expert_swap *sw = &o->swaps[i];
		uint32_t slot;
		int rc;
		if (sw->evict >= 0) {
			const uint64_t ke = sw->layer_evict * o->E + (uint64_t)sw->evict;
			if (o->slot_at[ke] < 0)
				CAPY_BUG("cuda: evicting expert %d of MoE layer %u, which holds no slot", sw->evict, sw->layer_evict);
			slot = (uint32_t)o->slot_at[ke];
			unmap_slot(o, slot);
		} else {
			if (!o->n_free)
				CAPY_BUG("cuda: the expert cache loads into a free slot, and none is free");
			slot = o->free_slots[--o->n_free];
		}
		const uint64_t kl = sw->layer * o->E + (uint64_t)sw->load;
		o->slot_at[kl] = (int32_t)slot;
		o->owner[slot] = (int32_t)kl;
		r = cudaMemcpyAsync(o->pool + slot * o->slot_bytes,
				    o->stack_host[sw->layer] + (uint64_t)sw->load * o->stride[sw->layer],
				    o->stride[sw->layer], cudaMemcpyHostToDevice, o->copy);
		if (r != cudaSuccess)
			return cu_err(err, r, "copying an expert into its slot");
		if ((rc = pend_push(o, (uint32_t)kl, slot, err)) < 0)
			return rc;
		o->loads++;
	}
	if ((r = cudaEventRecord(o->ev[o->seq % OFF_EVENTS], o->copy)) != cudaSuccess)
		return cu_err(err, r, "copying experts into their slots");
	o->seq++;
	return 0;
}

/* The step is over (its stream synchronized): its CPU job's status, its counts, the expert
 * cache's view of its routing, and the replacements it decides, their copies issued. */
int cu_offload_after_step(struct cuda_engine *e, struct capy_err *err)
{
	struct cu_offload *o = e->off;
	const struct ck_step *st = &e->step;
	const uint64_t T = st->T, exact = (T - st->n_grouped) * o->k;

	if (o->wake == OFF_WAKE_ARM)
		capy_cpu_experts_arm(o->cpu, false);
	for (uint64_t i = 0; i < o->n_moe; i++) {
		struct capy_cpu_experts_job *j = o->job[i];
		if (j->status) {
			int code = j->status;
			j->status = 0;
			return capy_err_set(err, code, "cuda: the CPU's experts: %s", j->msg);
		}
		if (!exact || !o->used[i])
			continue;
		o->misses += j->n_misses;
		if (j->n_misses) { /* the hand-off's times (docs/offload.md) */
			o->jobs++;
			o->job_bytes += j->experts_read * o->stride[i];
			o->job_ns += j->finished_ns - j->taken_ns;
			o->wait_ns += j->resumed_ns - j->requested_ns;
		}
	}
	o->steps++;
	o->step_exact += exact * o->n_used;
	o->streamed += st->n_grouped * o->k;
	if (!o->cache)
		return 0;
	for (uint64_t i = 0; i < o->n_moe; i++) /* the MTP head's stack (not run here) is never routed */
		if (o->used[i])
			capy_expert_cache_route(o->cache, (uint32_t)i, o->route + i * o->S, T * o->k);
	const uint64_t n = capy_expert_cache_step(o->cache, o->swaps, o->n_moe * o->E);
	if (o->spin_follows) { /* auto: the threads' spin follows the policy (an atomic store a step) */
		struct capy_expert_cache_stats cs;
		capy_expert_cache_stats(o->cache, &cs);
		capy_cpu_experts_set_spin(o->cpu, off_spin_us(cs.whole_layers));
	}
	if (!n)
		return 0;
	return apply_swaps(o, n, err);
}

/* The step's layers are enqueued: its wake-up nodes join the stream (a captured graph must
 * end where it began). */
int cu_offload_layers_end(struct cuda_engine *e, struct capy_err *err)
{
	struct cu_offload *o = e->off;
	cudaError_t r;

	if (!o || !o->kicks)
		return 0;
	o->kicks = false;
	if ((r = cudaEventRecord(o->ev_kick_join, o->kick)) != cudaSuccess ||
	    (r = cudaStreamWaitEvent(e->stream, o->ev_kick_join, 0)) != cudaSuccess)
		return cu_err(err, r, "joining the experts' wake-ups");
	return 0;
}

bool cu_offload_stats(const struct capy_engine *core, struct capy_offload_stats *s)
{
	const struct cuda_engine *e = core->be;
	const struct cu_offload *o = e->off;

	if (!o)
		return false;
	const uint64_t misses = o->misses;
	s->experts = o->n_used * o->E;
	s->slots = o->slots - o->lent;
	s->slots_lent = o->lent;
	s->resident = o->resident;
	s->steps = o->steps;
	s->misses = misses;
	s->hits = o->step_exact > misses ? o->step_exact - misses : 0;
	s->streamed = o->streamed;
	s->loads = o->loads;
	s->evictions = o->evictions;
	s->cpu_threads = o->threads;
	s->jobs = o->jobs;
	s->job_bytes = o->job_bytes;
	s->job_seconds = (double)o->job_ns * 1e-9;
	s->wait_seconds = (double)o->wait_ns * 1e-9;
	s->host = o->host_mode;
	if (o->cache) {
		struct capy_expert_cache_stats cs;
		capy_expert_cache_stats(o->cache, &cs);
		s->policy_switches = cs.switches;
		s->whole_layers = cs.whole_layers;
	}
	return true;
}

/* --- the elastic attention cache ------------------------------------------------------------ */

bool cu_offload_elastic(const struct cuda_engine *e)
{
	return e->off && e->off->arena;
}

uint32_t cu_offload_pages_max(const struct cuda_engine *e)
{
	return cu_offload_elastic(e) ? e->off->pages_max : 0;
}

/* Slots the cache's first n pages reach into, and the pages that many lent slots hold (all
 * of them once every slot is lent: the pool is as large as the pages beyond the held ones). */
static uint64_t lent_for(const struct cuda_engine *e, uint32_t n)
{
	const struct cu_offload *o = e->off;

	if (n <= o->pages_held || !o->slots)
		return 0;
	return CAPY_MIN(o->slots, ((n - o->pages_held) * e->page_bytes + o->slot_bytes - 1) / o->slot_bytes);
}

static uint32_t pages_for(const struct cuda_engine *e, uint64_t lent)
{
	const struct cu_offload *o = e->off;

	if (lent >= o->slots)
		return o->pages_max;
	return (uint32_t)CAPY_MIN(o->pages_max, o->pages_held + lent * o->slot_bytes / e->page_bytes);
}

/* An expert leaves slot s (the expert cache gave it up), which goes on the free list. */
static void evict_slot(struct cu_offload *o, uint64_t s)
{
	unmap_slot(o, s);
	o->free_slots[o->n_free++] = (uint32_t)s;
}

/* Lend slots [lent, to) to the attention cache: the expert cache shrinks to the slots left
 * (its coldest experts go), and the experts it keeps that sit in the lent slots move to free
 * ones, by copies on the step stream ahead of the step that writes pages there. Loads still
 * in flight finish first: none may land in a lent slot. */
static int lend_slots(struct cuda_engine *e, uint64_t to, struct capy_err *err)
{
	struct cu_offload *o = e->off;
	cudaError_t r;
	int rc;

	if ((r = cudaStreamSynchronize(o->copy)) != cudaSuccess)
		return cu_err(err, r, "copying experts into their slots");
	if ((rc = drain_loads(o, err)) < 0)
		return rc;
	if (o->n_pend)
		CAPY_BUG("cuda: %" PRIu64 " expert loads pending after their stream finished", o->n_pend);
	if (o->cache)
		capy_expert_cache_resize(o->cache, o->slots - to);
	for (uint64_t s = 0; s < o->slots; s++) {
		const int32_t key = o->owner[s];
		if (key >= 0 && !capy_expert_cache_resident(o->cache, (uint32_t)((uint64_t)key / o->E),
							    (uint32_t)((uint64_t)key % o->E)))
			evict_slot(o, s);
	}
	uint64_t n = 0;
	for (uint64_t i = 0; i < o->n_free; i++) /* the free list keeps the slots not lent */
		if (o->free_slots[i] >= to)
			o->free_slots[n++] = o->free_slots[i];
	o->n_free = n;
	for (uint64_t s = o->lent; s < to; s++) {
		const int32_t key = o->owner[s];
		if (key < 0)
			continue;
		if (!o->n_free)
			CAPY_BUG("cuda: no free slot for an expert the cache keeps (%" PRIu64 " slots lent)", to);
		const uint32_t t = o->free_slots[--o->n_free];
		if ((r = cudaMemcpyAsync(o->pool + t * o->slot_bytes, o->pool + s * o->slot_bytes, o->slot_bytes,
					 cudaMemcpyDeviceToDevice, e->stream)) != cudaSuccess)
			return cu_err(err, r, "moving an expert out of a slot the attention cache takes");
		o->owner[t] = key;
		o->owner[s] = -1;
		o->slot_at[key] = (int32_t)t;
		if (o->map_host[key] == (int32_t)s) {
			o->map_host[key] = (int32_t)t;
			o->map_dirty = true;
		}
	}
	o->lent = to;
	return 0;
}

/* Slots [to, lent) come back to the expert cache, free. */
static void return_slots(struct cuda_engine *e, uint64_t to)
{
	struct cu_offload *o = e->off;

	for (uint64_t s = to; s < o->lent; s++)
		o->free_slots[o->n_free++] = (uint32_t)s;
	o->lent = to;
	if (o->cache)
		capy_expert_cache_resize(o->cache, o->slots - to);
}

int cu_offload_pages(struct cuda_engine *e, uint32_t n, struct capy_err *err)
{
	struct cu_offload *o = e->off;
	int rc;

	if (n <= e->pages_cap)
		return 0;
	if (n > o->pages_max)
		return capy_err_set(err, CAPY_ENOMEM,
				    "cuda: %" PRIu32 " attention-cache pages, and the memory plan holds %" PRIu32
				    " (--max-context x --max-concurrency)",
				    n, o->pages_max);
	const uint64_t to = lent_for(e, n);
	if (to > o->lent && (rc = lend_slots(e, to, err)) < 0)
		return rc;
	e->pages_cap = pages_for(e, o->lent);
	return 0;
}

uint32_t cu_offload_pages_release(struct cuda_engine *e, uint32_t n)
{
	struct cu_offload *o = e->off;
	const uint64_t to = lent_for(e, n);

	if (to < o->lent) {
		return_slots(e, to);
		e->pages_cap = pages_for(e, o->lent);
	}
	return e->pages_cap;
}
