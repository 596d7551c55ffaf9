/* cpu-topology.h - the host's CPUs as the expert workers of an offloading engine see them
 * (issue 10): the online CPUs this process may run on, which of them share a physical core
 * (SMT siblings), which share an L3 cache (a CCD on Zen, a socket on most Intel parts), and
 * the NUMA node of each; and from that the default set of expert threads.
 *
 *	struct capy_cpu_topology t;
 *	struct capy_expert_threads x;
 *	if (capy_cpu_topology_read(&t, NULL, NULL, &err) < 0)  // "/sys", sched_getaffinity
 *		return err.code;
 *	capy_expert_threads_choose(&x, &t, opts_threads);      // 0: the default
 *
 * Read from sysfs under root (tests pass a fake tree, t/fixtures/sysfs/): devices/system/
 * cpu/online, and per CPU topology/thread_siblings_list (or core_cpus_list), the
 * shared_cpu_list of the cache/indexN whose level is 3, and the cpuN/nodeM link. A CPU without the
 * sibling list is a core of its own; without cache information every CPU is in one L3 domain
 * (l3_known false); without a node link node 0. Cores and domains are numbered by their
 * lowest CPU, in that order.
 *
 * The default expert threads: one per physical core in the affinity mask, pinned to the
 * core's first allowed CPU, leaving one core (the last) to the engine's host thread when
 * there are more than 4; ordered by L3 domain so that a domain's threads are neighbours.
 * An explicit count takes cores round-robin over the L3 domains (each domain has its own
 * path to memory on Zen), then the SMT siblings, then wraps around.
 *
 * Thread-safety: capy_cpu_topology_read reads files; the rest are pure.
 */
#ifndef CAPY_OFFLOAD_CPU_TOPOLOGY_H
#define CAPY_OFFLOAD_CPU_TOPOLOGY_H

#include "../util/err.h"

#include <stdbool.h>

#define CAPY_TOPO_MAX_CPUS 1024

struct capy_cpu_info {
	int cpu;  /* the kernel's CPU number */
	int core; /* index of its physical core (0 .. n_cores - 1) */
	int l3;   /* index of its L3 domain (0 .. n_l3 - 1) */
	int node; /* NUMA node */
};

struct capy_cpu_topology {
	int n_cpus;                /* online CPUs in the affinity mask */
	struct capy_cpu_info cpus[CAPY_TOPO_MAX_CPUS]; /* ascending CPU number */
	int n_cores, n_l3, n_nodes;
	bool l3_known;             /* the tree had L3 cache information */
};

/* Read the topology from sysfs under root (NULL: "/sys") for the CPUs in affinity (a CPU
 * list such as "0-3,8"; NULL: this process's sched_getaffinity mask). Fails with CAPY_EIO
 * when the online list cannot be read, CAPY_EFORMAT naming the file on a malformed list,
 * CAPY_EINVAL when no online CPU is in the mask or a CPU number is >= CAPY_TOPO_MAX_CPUS. */
int capy_cpu_topology_read(struct capy_cpu_topology *t, const char *root, const char *affinity,
			   struct capy_err *err);

/* Parse a kernel CPU list ("0-3,8,10-11", a trailing newline allowed) into set[cpu] = true
 * for cpu < max; -1 when malformed or a CPU is >= max. */
int capy_cpu_list_parse(const char *s, bool *set, int max);

#define CAPY_EXPERT_THREADS_MAX 256

struct capy_expert_threads {
	int n;                              /* threads */
	int cpu[CAPY_EXPERT_THREADS_MAX];   /* the CPU each is pinned to */
	int l3[CAPY_EXPERT_THREADS_MAX];    /* its L3 domain */
	int host_cpu;                       /* the core left to the engine's host thread, or -1 */
};

/* The expert threads for n threads (0: the default above; at most CAPY_EXPERT_THREADS_MAX). */
void capy_expert_threads_choose(struct capy_expert_threads *x, const struct capy_cpu_topology *t, int n);

/* --expert-cpu-threads: "auto" or "0" (the default) or a count 1..CAPY_EXPERT_THREADS_MAX;
 * CAPY_EINVAL naming the flag otherwise. */
int capy_expert_threads_parse(const char *s, int *n, struct capy_err *err);

/* One line: "8 expert threads on cpus 0,2,4,... (2 L3 domains, 16 cpus, 8 cores)". */
void capy_expert_threads_format(const struct capy_expert_threads *x, const struct capy_cpu_topology *t,
				char *buf, size_t size);

#endif
