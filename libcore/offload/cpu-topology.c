/* cpu-topology.c - the host's CPUs from sysfs and the default expert threads (cpu-topology.h). */
#include "cpu-topology.h"
#include "../util/parse.h"

#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int capy_cpu_list_parse(const char *s, bool *set, int max)
{
	const char *p = s;

	memset(set, 0, (size_t)max * sizeof(*set));
	while (*p && *p != '\n') {
		char *end;
		long a = strtol(p, &end, 10), b = a;
		if (end == p || a < 0)
			return -1;
		p = end;
		if (*p == '-') {
			b = strtol(p + 1, &end, 10);
			if (end == p + 1 || b < a)
				return -1;
			p = end;
		}
		if (b >= max)
			return -1;
		for (long c = a; c <= b; c++)
			set[c] = true;
		if (*p == ',')
			p++;
		else if (*p && *p != '\n')
			return -1;
	}
	return 0;
}

/* The first line of root/rel into buf; false when the file cannot be read. */
static bool read_line(const char *root, const char *rel, char *buf, size_t size)
{
	char path[4096];
	FILE *f;
	bool ok;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	if (!(f = fopen(path, "r")))
		return false;
	ok = fgets(buf, (int)size, f) != NULL;
	fclose(f);
	return ok;
}

/* The lowest CPU of a CPU list file under root, -1 when it is absent; -2 when malformed. */
static int list_first(const char *root, const char *rel, bool *tmp)
{
	char line[8192];

	if (!read_line(root, rel, line, sizeof(line)))
		return -1;
	if (capy_cpu_list_parse(line, tmp, CAPY_TOPO_MAX_CPUS) < 0)
		return -2;
	for (int c = 0; c < CAPY_TOPO_MAX_CPUS; c++)
		if (tmp[c])
			return c;
	return -2;
}

/* The lowest CPU sharing cpu's L3 cache: -1 without cache information, -2 malformed. */
static int l3_first(const char *root, int cpu, bool *tmp)
{
	char rel[256], line[64];

	for (int i = 0; i < 16; i++) {
		snprintf(rel, sizeof(rel), "devices/system/cpu/cpu%d/cache/index%d/level", cpu, i);
		if (!read_line(root, rel, line, sizeof(line)))
			continue;
		if (strtol(line, NULL, 10) != 3)
			continue;
		snprintf(rel, sizeof(rel), "devices/system/cpu/cpu%d/cache/index%d/shared_cpu_list", cpu, i);
		return list_first(root, rel, tmp);
	}
	return -1;
}

/* The node of the cpuN/nodeM entry, 0 without one. */
static int node_of(const char *root, int cpu)
{
	char path[4096];
	struct dirent *d;
	DIR *dir;
	int node = 0;

	snprintf(path, sizeof(path), "%s/devices/system/cpu/cpu%d", root, cpu);
	if (!(dir = opendir(path)))
		return 0;
	while ((d = readdir(dir)))
		if (!strncmp(d->d_name, "node", 4) && d->d_name[4] >= '0' && d->d_name[4] <= '9') {
			node = (int)strtol(d->d_name + 4, NULL, 10);
			break;
		}
	closedir(dir);
	return node;
}

/* Renumber keys (the lowest CPU of a group) as 0, 1, ... in ascending order; the count. */
static int renumber(struct capy_cpu_topology *t, int *key, size_t stride_off)
{
	int n = 0;

	for (int c = 0; c < CAPY_TOPO_MAX_CPUS; c++) {
		bool used = false;
		for (int i = 0; i < t->n_cpus; i++)
			if (key[i] == c) {
				used = true;
				*(int *)((char *)&t->cpus[i] + stride_off) = n;
			}
		n += used;
	}
	return n;
}

int capy_cpu_topology_read(struct capy_cpu_topology *t, const char *root, const char *affinity,
			   struct capy_err *err)
{
	bool online[CAPY_TOPO_MAX_CPUS], allowed[CAPY_TOPO_MAX_CPUS], tmp[CAPY_TOPO_MAX_CPUS];
	int core_key[CAPY_TOPO_MAX_CPUS], l3_key[CAPY_TOPO_MAX_CPUS];
	char line[8192], rel[256];
	bool nodes[CAPY_TOPO_MAX_CPUS] = { false };

	memset(t, 0, sizeof(*t));
	if (!root)
		root = "/sys";
	if (!read_line(root, "devices/system/cpu/online", line, sizeof(line)))
		return capy_err_set(err, CAPY_EIO, "cpu topology: cannot read %s/devices/system/cpu/online", root);
	if (capy_cpu_list_parse(line, online, CAPY_TOPO_MAX_CPUS) < 0)
		return capy_err_set(err, CAPY_EFORMAT, "cpu topology: %s/devices/system/cpu/online: bad CPU list '%.64s'",
				    root, line);
	if (affinity) {
		if (capy_cpu_list_parse(affinity, allowed, CAPY_TOPO_MAX_CPUS) < 0)
			return capy_err_set(err, CAPY_EINVAL, "cpu topology: bad affinity CPU list '%.64s'", affinity);
	} else {
		cpu_set_t set;
		if (sched_getaffinity(0, sizeof(set), &set) < 0)
			return capy_err_errno(err, errno, "cpu topology: sched_getaffinity");
		for (int c = 0; c < CAPY_TOPO_MAX_CPUS; c++)
			allowed[c] = c < CPU_SETSIZE && CPU_ISSET(c, &set);
	}
	t->l3_known = true;
	for (int c = 0; c < CAPY_TOPO_MAX_CPUS; c++) {
		int i = t->n_cpus, k;
		if (!online[c] || !allowed[c])
			continue;
		t->cpus[i].cpu = c;
		snprintf(rel, sizeof(rel), "devices/system/cpu/cpu%d/topology/thread_siblings_list", c);
		if ((k = list_first(root, rel, tmp)) == -1) {
			snprintf(rel, sizeof(rel), "devices/system/cpu/cpu%d/topology/core_cpus_list", c);
			k = list_first(root, rel, tmp);
		}
		if (k == -2)
			return capy_err_set(err, CAPY_EFORMAT, "cpu topology: %s/%s: bad CPU list", root, rel);
		core_key[i] = k < 0 ? c : k;
		if ((k = l3_first(root, c, tmp)) == -2)
			return capy_err_set(err, CAPY_EFORMAT, "cpu topology: %s/devices/system/cpu/cpu%d/cache: bad "
					    "shared_cpu_list", root, c);
		if (k < 0)
			t->l3_known = false;
		l3_key[i] = k < 0 ? 0 : k;
		t->cpus[i].node = node_of(root, c);
		if (t->cpus[i].node >= 0 && t->cpus[i].node < CAPY_TOPO_MAX_CPUS)
			nodes[t->cpus[i].node] = true;
		t->n_cpus++;
	}
	if (!t->n_cpus)
		return capy_err_set(err, CAPY_EINVAL, "cpu topology: no online CPU in the affinity mask");
	if (!t->l3_known) /* partial cache information: one domain rather than a wrong split */
		for (int i = 0; i < t->n_cpus; i++)
			l3_key[i] = 0;
	t->n_cores = renumber(t, core_key, offsetof(struct capy_cpu_info, core));
	t->n_l3 = renumber(t, l3_key, offsetof(struct capy_cpu_info, l3));
	for (int n = 0; n < CAPY_TOPO_MAX_CPUS; n++)
		t->n_nodes += nodes[n];
	return 0;
}

/* The order threads are given out in: round-robin over the L3 domains, each domain's cores
 * in order, first each core's first CPU, then its second SMT sibling, and so on. order[]
 * gets indices into t->cpus; returns n_cpus. */
static int thread_order(const struct capy_cpu_topology *t, int *order)
{
	int rank[CAPY_TOPO_MAX_CPUS], level[CAPY_TOPO_MAX_CPUS], core_rank[CAPY_TOPO_MAX_CPUS];
	int seen_l3[CAPY_TOPO_MAX_CPUS], seen_core[CAPY_TOPO_MAX_CPUS];
	int n = 0, max_rank = 0, max_level = 0;

	memset(seen_l3, 0, sizeof(seen_l3));
	memset(seen_core, 0, sizeof(seen_core));
	memset(core_rank, -1, sizeof(core_rank));
	/* rank: the core's place in its domain; level: the CPU's place in its core */
	for (int i = 0; i < t->n_cpus; i++) {
		const struct capy_cpu_info *c = &t->cpus[i];
		if (core_rank[c->core] < 0)
			core_rank[c->core] = seen_l3[c->l3]++;
		rank[i] = core_rank[c->core];
		level[i] = seen_core[c->core]++;
		max_rank = CAPY_MAX(max_rank, rank[i]);
		max_level = CAPY_MAX(max_level, level[i]);
	}
	for (int lv = 0; lv <= max_level; lv++)
		for (int r = 0; r <= max_rank; r++)
			for (int d = 0; d < t->n_l3; d++)
				for (int i = 0; i < t->n_cpus; i++)
					if (t->cpus[i].l3 == d && rank[i] == r && level[i] == lv)
						order[n++] = i;
	return n;
}

void capy_expert_threads_choose(struct capy_expert_threads *x, const struct capy_cpu_topology *t, int n)
{
	int order[CAPY_TOPO_MAX_CPUS], total = thread_order(t, order), pos[CAPY_EXPERT_THREADS_MAX];

	memset(x, 0, sizeof(*x));
	x->host_cpu = -1;
	if (n <= 0) {
		n = t->n_cores > 4 ? t->n_cores - 1 : t->n_cores;
		if (t->n_cores > 4)
			x->host_cpu = t->cpus[order[n]].cpu; /* the core of order[n]: the first one left */
	} else if (n < t->n_cores) {
		x->host_cpu = t->cpus[order[t->n_cores - 1]].cpu;
	}
	n = CAPY_MIN(n, CAPY_EXPERT_THREADS_MAX);
	for (int j = 0; j < n; j++)
		pos[j] = j;
	/* grouped by L3 domain, in the order given out within one (a stable insertion sort) */
	for (int a = 1; a < n; a++)
		for (int b = a; b > 0; b--) {
			const struct capy_cpu_info *p = &t->cpus[order[pos[b - 1] % total]];
			const struct capy_cpu_info *q = &t->cpus[order[pos[b] % total]];
			if (p->l3 <= q->l3)
				break;
			int tmp = pos[b];
			pos[b] = pos[b - 1];
			pos[b - 1] = tmp;
		}
	x->n = n;
	for (int j = 0; j < n; j++) {
		const struct capy_cpu_info *c = &t->cpus[order[pos[j] % total]];
		x->cpu[j] = c->cpu;
		x->l3[j] = c->l3;
	}
}

int capy_expert_threads_parse(const char *s, int *n, struct capy_err *err)
{
	int64_t v;

	if (!strcmp(s, "auto")) {
		*n = 0;
		return 0;
	}
	if (capy_parse_i64(s, 0, CAPY_EXPERT_THREADS_MAX, &v, err) < 0)
		return capy_err_set(err, CAPY_EINVAL, "--expert-cpu-threads: '%.32s' is not 'auto' or a count "
				    "0..%d", s, CAPY_EXPERT_THREADS_MAX);
	*n = (int)v;
	return 0;
}

void capy_expert_threads_format(const struct capy_expert_threads *x, const struct capy_cpu_topology *t,
				char *buf, size_t size)
{
	size_t off = 0;

	off += (size_t)snprintf(buf, size, "%d expert thread%s on cpus ", x->n, x->n == 1 ? "" : "s");
	for (int j = 0; j < x->n && off < size; j++)
		off += (size_t)snprintf(buf + off, size - off, "%s%d", j ? "," : "", x->cpu[j]);
	if (off < size)
		snprintf(buf + off, size - off, " (%d L3 domain%s%s, %d cpus, %d cores)", t->n_l3,
			 t->n_l3 == 1 ? "" : "s", t->l3_known ? "" : " assumed", t->n_cpus, t->n_cores);
}
