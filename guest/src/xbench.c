// SPDX-License-Identifier: GPL-2.0
/*
 * Guest microbenchmarks. One RESULT line per workload:
 *
 *   RESULT {"workload": W, "value": V, "unit": U, "better": "higher"|"lower",
 *           "seconds": S, "user_pages": P, "huge": H,
 *           "check": {...}, "counters": {...}}
 *
 * user_pages is the number of user pages the workload touched, so that kernel
 * event counts can be normalised per 1000 pages. huge is the huge-page policy
 * of the memory the figure is about: "4k" (MADV_NOHUGEPAGE), "thp"
 * (MADV_HUGEPAGE on a 2 MiB-aligned range) or "none" (no memory of its own,
 * or page cache). counters is the difference of /proc/vmstat's event
 * counters over the timed part only. check holds what the harness verifies
 * the policy by: the pages populated and the page faults, THP faults and
 * page-ins counted while they were populated (for fork that is the set-up,
 * outside the timed part).
 *
 *   xbench WORKLOAD [SIZE_MB] [PROCS]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096UL
#define HPAGE (2UL << 20)

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
	fprintf(stderr, "xbench: %s: %s\n", what, strerror(errno));
	exit(2);
}

/* /proc/vmstat's event counters that the reports carry. */
#define NVM 64
static const char *const vm_prefixes[] = {
	"xpfo_", "pgtprot_", "nr_tlb_", "pgfault", "pgmajfault", "pgpgin", "pgalloc_normal",
	"pgalloc_dma32", "thp_fault_alloc", "thp_fault_fallback", NULL,
};

struct vm {
	int n;
	char name[NVM][64];
	long long val[NVM];
};

static int vm_wanted(const char *name)
{
	for (int i = 0; vm_prefixes[i]; i++)
		if (!strncmp(name, vm_prefixes[i], strlen(vm_prefixes[i])))
			return 1;
	return 0;
}

static void vm_snap(struct vm *v)
{
	char name[64];
	long long val;
	FILE *f = fopen("/proc/vmstat", "r");

	if (!f)
		die("/proc/vmstat");
	v->n = 0;
	while (fscanf(f, "%63s %lld", name, &val) == 2)
		if (vm_wanted(name) && v->n < NVM) {
			snprintf(v->name[v->n], sizeof(v->name[0]), "%s", name);
			v->val[v->n++] = val;
		}
	fclose(f);
}

static long long vm_get(const struct vm *v, const char *name)
{
	for (int i = 0; i < v->n; i++)
		if (!strcmp(v->name[i], name))
			return v->val[i];
	return 0;
}

/* acc += after - before (acc starts zeroed, with after's names). */
static void vm_add(struct vm *acc, const struct vm *after, const struct vm *before)
{
	if (!acc->n) {
		acc->n = after->n;
		memcpy(acc->name, after->name, sizeof(acc->name));
		memset(acc->val, 0, sizeof(acc->val));
	}
	for (int i = 0; i < after->n; i++)
		acc->val[i] += after->val[i] - vm_get(before, after->name[i]);
}

static void vm_delta(struct vm *d, const struct vm *after, const struct vm *before)
{
	d->n = 0;
	vm_add(d, after, before);
}

struct check {
	unsigned long pages;    /* pages populated */
	struct vm *vm;          /* counters over the population */
	const char *pagein;     /* non-NULL: also report pgpgin (KiB) */
};

static void report(const char *w, double value, const char *unit, const char *better,
		   double secs, unsigned long pages, const char *huge,
		   const struct check *chk, const struct vm *counters)
{
	printf("RESULT {\"workload\": \"%s\", \"value\": %.3f, \"unit\": \"%s\", "
	       "\"better\": \"%s\", \"seconds\": %.6f, \"user_pages\": %lu, \"huge\": \"%s\"",
	       w, value, unit, better, secs, pages, huge);
	if (chk) {
		printf(", \"check\": {\"pages\": %lu, \"pgfault\": %lld, \"thp_fault_alloc\": %lld",
		       chk->pages, vm_get(chk->vm, "pgfault"), vm_get(chk->vm, "thp_fault_alloc"));
		if (chk->pagein)
			printf(", \"pgpgin_kb\": %lld", vm_get(chk->vm, "pgpgin"));
		printf("}");
	}
	if (counters) {
		printf(", \"counters\": {");
		for (int i = 0; i < counters->n; i++)
			printf("%s\"%s\": %lld", i ? ", " : "", counters->name[i], counters->val[i]);
		printf("}");
	}
	printf("}\n");
}

/*
 * Map len bytes of anonymous memory with the given huge-page policy and
 * touch every page. "thp" aligns the range to 2 MiB, so that every 2 MiB of
 * it can be one huge page; *base and *maplen are what to munmap.
 */
static char *map_touch(size_t len, int thp, char **base, size_t *maplen)
{
	size_t ml = thp ? len + HPAGE : len;
	char *m = mmap(NULL, ml, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *p;

	if (m == MAP_FAILED)
		die("mmap");
	p = thp ? (char *)(((uintptr_t)m + HPAGE - 1) & ~(HPAGE - 1)) : m;
	if (madvise(p, len, thp ? MADV_HUGEPAGE : MADV_NOHUGEPAGE))
		die("madvise");
	for (size_t off = 0; off < len; off += PAGE)
		p[off] = 1;
	*base = m;
	*maplen = ml;
	return p;
}

static void unmap(char *base, size_t maplen)
{
	if (munmap(base, maplen))
		die("munmap");
}

/* One process of a fault workload: its index, the length and the rounds. */
typedef void (*fault_child)(int i, size_t len, int rounds, int thp);

/*
 * Run PROCS processes of @child at once and wait for them; @d gets the
 * kernel's counters over the timed part. Returns the seconds it took.
 */
static double timed_procs(int procs, fault_child child, size_t len, int rounds, int thp,
			  struct vm *d)
{
	struct vm before, after;
	double t;

	vm_snap(&before);
	t = now();
	for (int i = 0; i < procs; i++) {
		pid_t pid = fork();

		if (pid < 0)
			die("fork");
		if (pid == 0) {
			child(i, len, rounds, thp);
			_exit(0);
		}
	}
	while (wait(NULL) > 0)
		;
	t = now() - t;
	vm_snap(&after);
	vm_delta(d, &after, &before);
	return t;
}

static void page_fault_child(int i, size_t len, int rounds, int thp)
{
	(void)i;
	for (int r = 0; r < rounds; r++) {
		char *base;
		size_t ml;

		map_touch(len, thp, &base, &ml);
		unmap(base, ml);
	}
}

/* Each of PROCS processes maps len, touches every page, unmaps, 4 times. */
static void page_fault(const char *name, size_t mb, int procs, int thp)
{
	size_t len = mb << 20;
	int rounds = 4;
	struct vm d;
	double t = timed_procs(procs, page_fault_child, len, rounds, thp, &d);
	unsigned long pages = (unsigned long)procs * rounds * (len / PAGE);
	struct check chk = { pages, &d, NULL };

	report(name, pages / t, "pages/s", "higher", t, pages, thp ? "thp" : "4k", &chk, &d);
}

/*
 * page_fault after one untimed pass of the same processes over the same
 * sizes: the frames the timed part faults in have mostly been userspace's
 * before, as on a system that has been running, rather than fresh from the
 * kernel as the first user faults after boot get them.
 */
static void page_fault_warm(size_t mb, int procs)
{
	struct vm d;

	timed_procs(procs, page_fault_child, mb << 20, 1, 0, &d);
	page_fault("page_fault_warm", mb, procs, 0);
}

/*
 * page_fault_warm with one second of sleep between the untimed pass and
 * the timed one: the time a system that is not always busy has between
 * its bursts of faults. page_fault_idle_gap reports the sleep, with the
 * kernel's counters over it (what the kernel did in that idle time) and
 * the pages of the untimed pass, whose frames were freed before it.
 */
static void page_fault_idle(size_t mb, int procs)
{
	struct vm before, after, d;
	double t;

	timed_procs(procs, page_fault_child, mb << 20, 1, 0, &d);
	vm_snap(&before);
	t = now();
	sleep(1);
	t = now() - t;
	vm_snap(&after);
	vm_delta(&d, &after, &before);
	report("page_fault_idle_gap", t, "s", "lower", t,
	       (unsigned long)procs * ((mb << 20) / PAGE), "none", NULL, &d);
	page_fault("page_fault_idle", mb, procs, 0);
}

static void page_fault_shared_child(int i, size_t len, int rounds, int thp)
{
	char path[64];
	int fd;

	(void)thp;
	snprintf(path, sizeof(path), "/tmp/xbench-shared.%d", i);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		die(path);
	unlink(path);
	if (ftruncate(fd, len))
		die("ftruncate");
	for (int r = 0; r < rounds; r++) {
		char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

		if (p == MAP_FAILED)
			die("mmap");
		if (madvise(p, len, MADV_NOHUGEPAGE))
			die("madvise");
		for (size_t off = 0; off < len; off += PAGE)
			p[off] = 1;
		unmap(p, len);
	}
	close(fd);
}

/*
 * will-it-scale's shared-file fault shape: each process has its own tmpfs
 * file of len bytes, maps it MAP_SHARED and write-faults every page, 4 times.
 * The first round allocates the page cache, the later ones fault on it.
 */
static void page_fault_shared(size_t mb, int procs)
{
	size_t len = mb << 20;
	int rounds = 4;
	struct vm d;
	double t = timed_procs(procs, page_fault_shared_child, len, rounds, 0, &d);
	unsigned long pages = (unsigned long)procs * rounds * (len / PAGE);
	struct check chk = { pages, &d, NULL };

	report("page_fault_shared", pages / t, "pages/s", "higher", t, pages, "4k", &chk, &d);
}

/* How a workload's memory is mapped: 4K folios, THPs, THPs mapped by PTEs. */
enum maptype { MT_4K, MT_THP, MT_THP_PTE };

/* The kB of @field ("AnonHugePages:") in a /proc file such as meminfo. */
static long proc_kb(const char *path, const char *field)
{
	FILE *f = fopen(path, "r");
	char line[256];
	long kb = -1;

	if (!f)
		die(path);
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, field, strlen(field)))
			kb = strtol(line + strlen(field), NULL, 10);
	fclose(f);
	return kb;
}

static long smaps_kb(const char *field)
{
	return proc_kb("/proc/self/smaps_rollup", field);
}

/*
 * map_touch() with the policy of @type. MT_THP_PTE faults THPs in and then
 * splits every PMD mapping (an mprotect() of one page and back), so that
 * the folios stay large and are mapped by PTEs; khugepaged is kept away.
 */
static char *map_typed(size_t len, enum maptype type, char **base, size_t *maplen)
{
	char *p = map_touch(len, type != MT_4K, base, maplen);

	if (type != MT_THP_PTE)
		return p;
	for (size_t off = 0; off < len; off += HPAGE)
		if (mprotect(p + off, PAGE, PROT_READ) ||
		    mprotect(p + off, PAGE, PROT_READ | PROT_WRITE))
			die("mprotect");
	if (madvise(p, len, MADV_NOHUGEPAGE))
		die("madvise");
	if (smaps_kb("AnonHugePages:") != 0) {
		fprintf(stderr, "xbench: THPs still mapped by PMDs after the split\n");
		exit(1);
	}
	return p;
}

static const char *maptype_huge(enum maptype type)
{
	return type == MT_4K ? "4k" : "thp";
}

/* fork + exit of a process with len touched; counters of the forks only. */
static void fork_bench(const char *name, size_t mb, enum maptype type)
{
	size_t len = mb << 20;
	struct vm s0, s1, s2, setup, d;
	char *base;
	size_t ml;
	int n = 40;
	double t;

	vm_snap(&s0);
	map_typed(len, type, &base, &ml);
	vm_snap(&s1);
	t = now();
	for (int i = 0; i < n; i++) {
		pid_t pid = fork();

		if (pid < 0)
			die("fork");
		if (pid == 0)
			_exit(0);
		waitpid(pid, NULL, 0);
	}
	t = now() - t;
	vm_snap(&s2);
	vm_delta(&setup, &s1, &s0);
	vm_delta(&d, &s2, &s1);
	struct check chk = { len / PAGE, &setup, NULL };

	report(name, t / n * 1e6, "us/fork", "lower", t, len / PAGE, maptype_huge(type), &chk,
	       &d);
	unmap(base, ml);
}

/* munmap of len populated bytes, n times; counters of the munmaps only. */
static void munmap_bench(const char *name, size_t mb, enum maptype type)
{
	size_t len = mb << 20;
	struct vm a, b, c, setup = { 0 }, d = { 0 };
	int n = 4;
	double t = 0;

	for (int i = 0; i < n; i++) {
		char *base;
		size_t ml;

		vm_snap(&a);
		map_typed(len, type, &base, &ml);
		vm_snap(&b);
		double t0 = now();

		unmap(base, ml);
		t += now() - t0;
		vm_snap(&c);
		vm_add(&setup, &b, &a);
		vm_add(&d, &c, &b);
	}
	struct check chk = { n * (len / PAGE), &setup, NULL };

	report(name, t / n * 1e3, "ms/munmap", "lower", t, n * (len / PAGE), maptype_huge(type),
	       &chk, &d);
}

static void mmap_bench(size_t mb)
{
	size_t len = mb << 20;
	int n = 4;
	double tm = 0, tu = 0;
	struct vm a, b, c, dm = { 0 }, du = { 0 };

	for (int i = 0; i < n; i++) {
		char *base;
		size_t ml;

		vm_snap(&a);
		double t0 = now();
		map_touch(len, 0, &base, &ml);
		double t1 = now();
		vm_snap(&b);
		double t2 = now();
		unmap(base, ml);
		tu += now() - t2;
		vm_snap(&c);
		tm += t1 - t0;
		vm_add(&dm, &b, &a);
		vm_add(&du, &c, &b);
	}
	struct check chk = { n * (len / PAGE), &dm, NULL };

	report("mmap", tm / n * 1e3, "ms/map+touch", "lower", tm, n * (len / PAGE), "4k", &chk, &dm);
	/* per page unmapped: the unmap itself hands out almost no user page */
	report("munmap", tu / n * 1e3, "ms/munmap", "lower", tu, n * (len / PAGE), "4k", NULL,
	       &du);
}

/* write a tmpfs file (tmpfs mounted without huge=: 4K page cache), read it warm */
static void file_bench_at(size_t mb, const char *path, const char *wname,
			  const char *rname, const char *huge)
{
	static char buf[1 << 16];
	size_t len = mb << 20;
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	struct vm a, b, d;
	double t;

	if (fd < 0)
		die(path);
	memset(buf, 0x5a, sizeof(buf));
	vm_snap(&a);
	t = now();
	for (size_t off = 0; off < len; off += sizeof(buf))
		if (write(fd, buf, sizeof(buf)) != sizeof(buf))
			die("write");
	t = now() - t;
	vm_snap(&b);
	vm_delta(&d, &b, &a);
	report(wname, mb / t, "MB/s", "higher", t, len / PAGE, huge, NULL, &d);
	vm_snap(&a);
	t = now();
	for (int r = 0; r < 4; r++) {
		lseek(fd, 0, SEEK_SET);
		for (size_t off = 0; off < len; off += sizeof(buf))
			if (read(fd, buf, sizeof(buf)) != sizeof(buf))
				die("read");
	}
	t = now() - t;
	vm_snap(&b);
	vm_delta(&d, &b, &a);
	/* the pages it touched: each page-cache page copied out, 4 times */
	report(rname, 4 * mb / t, "MB/s", "higher", t, 4 * (len / PAGE), huge, NULL, &d);
	close(fd);
	unlink(path);
}

static void file_bench(size_t mb)
{
	file_bench_at(mb, "/tmp/xbench.dat", "write", "read", "none");
}

/*
 * file_bench() on a tmpfs mounted with huge=always, so that the page
 * cache is 2 MiB folios; first one read() of the whole file into a buffer
 * of which only the first page of each 2 MiB is mapped, so that the copy
 * of each folio faults after its first page, and a check of what it read.
 */
static void file_huge_bench(size_t mb)
{
	const char *dir = "/tmp/xbench-huge", *path = "/tmp/xbench-huge/f";
	size_t len = mb << 20;
	char opts[64], *m;
	ssize_t got;
	int fd;

	mkdir(dir, 0700);
	snprintf(opts, sizeof(opts), "huge=always,size=%zum", 2 * mb + 4);
	if (mount("tmpfs", dir, "tmpfs", 0, opts))
		die("mount tmpfs huge=always");
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		die(path);
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		die("mmap");
	for (size_t off = 0; off < len; off++)
		m[off] = (char)(off * 7 + off / PAGE);
	if (write(fd, m, len) != (ssize_t)len)
		die("write");
	if (proc_kb("/proc/meminfo", "ShmemHugePages:") < (long)(len >> 10)) {
		fprintf(stderr, "xbench: file_huge: the file is not in huge pages\n");
		exit(1);
	}
	munmap(m, len);
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		die("mmap");
	madvise(m, len, MADV_NOHUGEPAGE);
	/* the first page of each 2 MiB is there: the second one faults */
	for (size_t off = 0; off < len; off += HPAGE)
		m[off] = 0;
	got = pread(fd, m, len, 0);
	if (got != (ssize_t)len)
		die("pread");
	for (size_t off = 0; off < len; off++)
		if (m[off] != (char)(off * 7 + off / PAGE)) {
			fprintf(stderr, "xbench: file_huge: byte %zu read back wrong\n", off);
			exit(1);
		}
	munmap(m, len);
	close(fd);
	unlink(path);
	file_bench_at(mb, path, "write_huge", "read_huge", "tmpfs huge=always");
	if (umount(dir))
		die("umount");
}

static void drop_caches(void)
{
	int fd;

	sync();
	fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
	if (fd < 0 || write(fd, "3\n", 2) != 2)
		die("drop_caches");
	close(fd);
}

/*
 * Page-cache read from disk: a file on the ext2 scratch disk (the 'disk'
 * step mounts it at /mnt/scratch) read 4 times, the page cache dropped
 * before each read, so every read allocates and fills the page cache from
 * the block device.
 */
static void disk_read(size_t mb)
{
	static char buf[1 << 16];
	const char *path = "/mnt/scratch/xbench.dat";
	size_t len = mb << 20;
	int rounds = 4;
	struct vm a, b, d = { 0 };
	double t = 0;
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);

	if (fd < 0)
		die(path);
	memset(buf, 0xa5, sizeof(buf));
	for (size_t off = 0; off < len; off += sizeof(buf))
		if (write(fd, buf, sizeof(buf)) != sizeof(buf))
			die("write");
	if (fsync(fd))
		die("fsync");
	close(fd);
	for (int r = 0; r < rounds; r++) {
		drop_caches();
		vm_snap(&a);
		double t0 = now();

		fd = open(path, O_RDONLY);
		if (fd < 0)
			die(path);
		for (size_t off = 0; off < len; off += sizeof(buf))
			if (read(fd, buf, sizeof(buf)) != sizeof(buf))
				die("read");
		close(fd);
		t += now() - t0;
		vm_snap(&b);
		vm_add(&d, &b, &a);
	}
	unlink(path);
	unsigned long pages = rounds * (len / PAGE);
	struct check chk = { pages, &d, "pgpgin" };

	report("disk_read", rounds * mb / t, "MB/s", "higher", t, pages, "none", &chk, &d);
}

static void exec_bench(void)
{
	int n = 100;
	struct vm a, b, d;
	double t;

	vm_snap(&a);
	t = now();
	for (int i = 0; i < n; i++) {
		pid_t pid = fork();

		if (pid == 0) {
			execl("/xh/bin/xbench", "xbench", "noop", (char *)NULL);
			_exit(127);
		}
		waitpid(pid, NULL, 0);
	}
	t = now() - t;
	vm_snap(&b);
	vm_delta(&d, &b, &a);
	report("exec", n / t, "execs/s", "higher", t, 0, "none", NULL, &d);
}

/*
 * will-it-scale's lseek1: one process per online CPU, each bound to its
 * CPU, each seeking its own tmpfs file back to 0; the rate is every
 * process's calls over the wall time of the whole set.
 */
static void lseek_child(int cpu, long n)
{
	char path[64];
	cpu_set_t set;
	int fd;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		_exit(2);
	snprintf(path, sizeof(path), "/tmp/xbench-lseek.%d", cpu);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		_exit(3);
	unlink(path);
	for (long i = 0; i < n; i++)
		lseek(fd, 0, SEEK_SET);
	_exit(0);
}

static void lseek_bench(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	long n = 1000000, per;
	struct vm a, b, d;
	int bad = 0;
	double t;

	if (cpus < 1)
		cpus = 1;
	per = n / cpus;
	vm_snap(&a);
	t = now();
	for (int c = 0; c < cpus; c++) {
		pid_t pid = fork();

		if (pid < 0)
			die("fork");
		if (pid == 0)
			lseek_child(c, per);
	}
	for (int c = 0; c < cpus; c++) {
		int status;

		if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
			bad = 1;
	}
	t = now() - t;
	if (bad)
		die("lseek: a child failed");
	vm_snap(&b);
	vm_delta(&d, &b, &a);
	report("lseek", per * cpus / t, "calls/s", "higher", t, 0, "none", NULL, &d);
}

/* A tmpfs file of one page of 0x5a at @path, open read-write. */
static int one_page_file(const char *path)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	char page[PAGE];

	if (fd < 0)
		die(path);
	memset(page, 0x5a, sizeof(page));
	if (write(fd, page, sizeof(page)) != sizeof(page))
		die("write");
	return fd;
}

/*
 * The cost of one temporary mapping: pread() one byte of a one-page tmpfs
 * file, n times. Each call copies from the same page-cache page, which an
 * XPFO mode reaches through one kmap_local slot (map, copy, unmap, INVLPG)
 * and xpfo=off through the direct map: the difference per call between
 * the two is what one kmap costs, on this machine.
 */
static void pread1_bench(void)
{
	const char *path = "/tmp/xbench-pread1.dat";
	int fd = one_page_file(path);
	long n = 200000;
	struct vm a, b, d;
	char c;
	double t;

	vm_snap(&a);
	t = now();
	for (long i = 0; i < n; i++)
		if (pread(fd, &c, 1, 0) != 1)
			die("pread");
	t = now() - t;
	vm_snap(&b);
	vm_delta(&d, &b, &a);
	report("pread1", n / t, "calls/s", "higher", t, n, "none", NULL, &d);
	close(fd);
	unlink(path);
}

/*
 * The write side of pread1: one-byte pwrite()s into one page of a tmpfs
 * file. Each is a copy_page_from_iter_atomic() through a kmap_atomic()
 * slot in XPFO modes: with pgtprot, the slot's map and unmap are the page
 * tables this call writes.
 */
static void pwrite1_bench(void)
{
	const char *path = "/tmp/xbench-pwrite1.dat";
	int fd = one_page_file(path);
	static char page[PAGE];
	long n = 100000;
	struct vm a, b, d;
	double t;

	vm_snap(&a);
	t = now();
	for (long i = 0; i < n; i++) {
		char c = (char)i;

		if (pwrite(fd, &c, 1, i % PAGE) != 1)
			die("pwrite");
	}
	t = now() - t;
	vm_snap(&b);
	vm_delta(&d, &b, &a);
	if (pread(fd, page, sizeof(page), 0) != sizeof(page))
		die("pread");
	/* the last pass over the page wrote byte i at offset i % PAGE */
	for (long i = n - PAGE; i < n; i++)
		if (page[i % PAGE] != (char)i) {
			fprintf(stderr, "xbench: pwrite1: byte %ld of the page is not what was written\n",
				i % PAGE);
			exit(1);
		}
	report("pwrite1", n / t, "calls/s", "higher", t, n, "none", NULL, &d);
	close(fd);
	unlink(path);
}

/*
 * Filesystem metadata on the ext2 scratch disk: n empty-ish files created
 * in one directory, then, with the caches dropped, looked up (stat) and
 * unlinked, 3 rounds. The directory blocks, inode tables and bitmaps live
 * in the block device's page cache, which XPFO takes out of the direct map:
 * buffer heads reach it through a lasting vmap alias per folio (patch 31),
 * made when the folio gets buffers. Operations per second, 3 per file.
 */
static void meta_bench(size_t kfiles)
{
	const char *dir = "/mnt/scratch/xmeta";
	long n = (long)kfiles * 1000;
	int rounds = 3;
	struct vm a, b, d = { 0 };
	char path[64];
	struct stat st;
	double t = 0, t0;

	if (mkdir(dir, 0700) && errno != EEXIST)
		die(dir);
	for (int r = 0; r < rounds; r++) {
		drop_caches();
		vm_snap(&a);
		t0 = now();
		for (long i = 0; i < n; i++) {
			int fd;

			snprintf(path, sizeof(path), "%s/f%07ld", dir, i);
			fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
			if (fd < 0 || write(fd, path, 16) != 16 || close(fd))
				die(path);
		}
		t += now() - t0;
		vm_snap(&b);
		vm_add(&d, &b, &a);
		drop_caches();
		vm_snap(&a);
		t0 = now();
		for (long i = 0; i < n; i++) {
			snprintf(path, sizeof(path), "%s/f%07ld", dir, i);
			if (stat(path, &st))
				die(path);
		}
		for (long i = 0; i < n; i++) {
			snprintf(path, sizeof(path), "%s/f%07ld", dir, i);
			if (unlink(path))
				die(path);
		}
		t += now() - t0;
		vm_snap(&b);
		vm_add(&d, &b, &a);
	}
	rmdir(dir);
	report("meta", 3.0 * rounds * n / t, "ops/s", "higher", t, 0, "none", NULL, &d);
}

static long hugepages_get(void)
{
	FILE *f = fopen("/proc/sys/vm/nr_hugepages", "r");
	long n = -1;

	if (!f || fscanf(f, "%ld", &n) != 1)
		die("/proc/sys/vm/nr_hugepages");
	fclose(f);
	return n;
}

static void hugepages_set(long n)
{
	FILE *f = fopen("/proc/sys/vm/nr_hugepages", "w");

	if (!f || fprintf(f, "%ld\n", n) < 0 || fclose(f))
		die("/proc/sys/vm/nr_hugepages");
}

/*
 * Copy on write of 2 MiB hugetlb pages: MB of them (reserved here, given
 * back after) written by the parent, then a forked child writes one byte
 * of each, so that each write copies a whole page (hugetlb_wp(),
 * copy_user_large_folio()), and checks the copy.
 */
static void hugetlb_cow(size_t mb)
{
	size_t len = (mb << 20) & ~(HPAGE - 1), n = len / HPAGE;
	long before = hugepages_get();
	struct vm a, b, d;
	int status;
	char *p;
	double t;
	pid_t pid;

	if (!n) {
		fprintf(stderr, "xbench: hugetlb_cow needs at least 2 MB\n");
		exit(2);
	}
	hugepages_set(before + 2 * (long)n);
	if (hugepages_get() < before + 2 * (long)n) {
		hugepages_set(before);
		fprintf(stderr, "xbench: could not reserve %zu hugetlb pages\n", 2 * n);
		exit(1);
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	if (p == MAP_FAILED)
		die("mmap(MAP_HUGETLB)");
	memset(p, 0x5a, len);
	vm_snap(&a);
	t = now();
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		size_t bad = 0;

		for (size_t i = 0; i < n; i++) {
			p[i * HPAGE] = 1;
			bad += p[i * HPAGE + HPAGE - 1] != 0x5a;
		}
		_exit(bad ? 1 : 0);
	}
	if (waitpid(pid, &status, 0) != pid)
		die("waitpid");
	t = now() - t;
	vm_snap(&b);
	vm_delta(&d, &b, &a);
	if (munmap(p, len))
		die("munmap");
	hugepages_set(before);
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "xbench: a hugetlb copy on write lost the parent's bytes\n");
		exit(1);
	}
	report("hugetlb_cow", t / n * 1e6, "us/copy", "lower", t, n * (HPAGE / PAGE),
	       "hugetlb 2 MiB", NULL, &d);
}

static double tv(struct timeval t)
{
	return t.tv_sec + t.tv_usec / 1e6;
}

/* Run a shell command in the build image's chroot; 0 on success. */
static int chroot_sh(const char *cmd)
{
	int st;
	pid_t pid = fork();

	if (pid < 0)
		die("fork");
	if (pid == 0) {
		setenv("PATH", "/usr/bin:/bin", 1);
		execl("/bin/chroot", "chroot", "/mnt/tc", "/bin/sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	if (waitpid(pid, &st, 0) < 0)
		die("waitpid");
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/*
 * make -jN in the build image; system, user and elapsed time of the whole
 * build, children included (make reaps gcc, gcc reaps cc1 and as).
 */
static void build_bench(int jobs)
{
	struct rusage before, after;
	char cmd[128];
	double t;

	if (chroot_sh("cd /k/obj && make -s -f bench.mk clean")) {
		fprintf(stderr, "xbench: make clean failed in the build image\n");
		exit(1);
	}
	getrusage(RUSAGE_CHILDREN, &before);
	snprintf(cmd, sizeof(cmd), "cd /k/obj && make -s -j%d -f bench.mk", jobs);
	t = now();
	if (chroot_sh(cmd)) {
		fprintf(stderr, "xbench: the build failed\n");
		exit(1);
	}
	t = now() - t;
	getrusage(RUSAGE_CHILDREN, &after);
	report("build_sys", tv(after.ru_stime) - tv(before.ru_stime), "s", "lower", t, 0,
	       "none", NULL, NULL);
	report("build_user", tv(after.ru_utime) - tv(before.ru_utime), "s", "lower", t, 0,
	       "none", NULL, NULL);
	report("build_elapsed", t, "s", "lower", t, 0, "none", NULL, NULL);
}

/*
 * What one TLB-flush IPI costs the CPU that sends it. The main thread, on
 * CPU 0, writes a page and takes its write permission away and gives it
 * back, n times: each mprotect() that changes the PTE flushes the TLBs of
 * the process's CPUs. "ipi" runs the loop while another thread of the
 * process spins in user mode on CPU 1, so that every flush interrupts
 * CPU 1 and waits for it; "ipi_none" runs it with no other thread (a CPU
 * that is idle is not interrupted). The difference of their times,
 * over the flushes CPU 1 took (nr_tlb_remote_flush_received), is what one
 * IPI costs the sender. The check asks that CPU 1 took at least one. With
 * one CPU there is no other CPU: "ipi" runs as "ipi_none" and asks none.
 */
static volatile int ipi_stop;

static void *ipi_spinner(void *arg)
{
	cpu_set_t set;

	(void)arg;
	CPU_ZERO(&set);
	CPU_SET(1, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		die("sched_setaffinity");
	while (!ipi_stop)
		;
	return NULL;
}

static void ipi_loop(const char *w, long n, int remote)
{
	char *p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct vm a, b, d;
	pthread_t spinner;
	double t;

	if (p == MAP_FAILED)
		die("mmap");
	if (remote) {
		ipi_stop = 0;
		if (pthread_create(&spinner, NULL, ipi_spinner, NULL))
			die("pthread_create");
		/* the spinner on its CPU before the timed part */
		usleep(100000);
	}
	vm_snap(&a);
	t = now();
	for (long i = 0; i < n; i++) {
		p[0] = (char)i;
		if (mprotect(p, PAGE, PROT_READ) ||
		    mprotect(p, PAGE, PROT_READ | PROT_WRITE))
			die("mprotect");
	}
	t = now() - t;
	vm_snap(&b);
	if (remote) {
		ipi_stop = 1;
		pthread_join(spinner, NULL);
	}
	munmap(p, PAGE);
	vm_delta(&d, &b, &a);
	printf("RESULT {\"workload\": \"%s\", \"value\": %.3f, \"unit\": \"calls/s\", "
	       "\"better\": \"higher\", \"seconds\": %.6f, \"user_pages\": 0, "
	       "\"huge\": \"none\", \"check\": {\"calls\": %ld, "
	       "\"remote_flushes_min\": %ld}, \"counters\": {",
	       w, n / t, t, n, remote ? 1L : 0L);
	for (int i = 0; i < d.n; i++)
		printf("%s\"%s\": %lld", i ? ", " : "", d.name[i], d.val[i]);
	printf("}}\n");
}

static void ipi_bench(long thousands)
{
	long n = thousands * 1000;
	int remote = sysconf(_SC_NPROCESSORS_ONLN) > 1;
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(0, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		die("sched_setaffinity");
	ipi_loop("ipi_none", n, 0);
	ipi_loop("ipi", n, remote);
}

int main(int argc, char **argv)
{
	const char *w = argc > 1 ? argv[1] : "";
	size_t mb = argc > 2 ? strtoul(argv[2], NULL, 10) : 32;
	int procs = argc > 3 ? atoi(argv[3]) : 1;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(w, "noop"))
		return 0;
	if (!mb || procs < 1) {
		fprintf(stderr, "xbench: bad size or process count\n");
		return 2;
	}
	if (!strcmp(w, "build")) {
		build_bench(argc > 2 ? atoi(argv[2]) : 1);
		return 0;
	}
	if (!strcmp(w, "page_fault"))
		page_fault(w, mb, procs, 0);
	else if (!strcmp(w, "page_fault_thp"))
		page_fault(w, mb, procs, 1);
	else if (!strcmp(w, "page_fault_warm"))
		page_fault_warm(mb, procs);
	else if (!strcmp(w, "page_fault_idle"))
		page_fault_idle(mb, procs);
	else if (!strcmp(w, "page_fault_shared"))
		page_fault_shared(mb, procs);
	else if (!strcmp(w, "fork"))
		fork_bench(w, mb, MT_4K);
	else if (!strcmp(w, "fork_thp"))
		fork_bench(w, mb, MT_THP);
	else if (!strcmp(w, "fork_pte_thp"))
		fork_bench(w, mb, MT_THP_PTE);
	else if (!strcmp(w, "munmap_pte"))
		munmap_bench(w, mb, MT_4K);
	else if (!strcmp(w, "munmap_pte_thp"))
		munmap_bench(w, mb, MT_THP_PTE);
	else if (!strcmp(w, "disk_read"))
		disk_read(mb);
	else if (!strcmp(w, "mmap"))
		mmap_bench(mb);
	else if (!strcmp(w, "file"))
		file_bench(mb);
	else if (!strcmp(w, "file_huge"))
		file_huge_bench(mb);
	else if (!strcmp(w, "exec"))
		exec_bench();
	else if (!strcmp(w, "lseek"))
		lseek_bench();
	else if (!strcmp(w, "pread1"))
		pread1_bench();
	else if (!strcmp(w, "pwrite1"))
		pwrite1_bench();
	else if (!strcmp(w, "meta"))
		meta_bench(mb);
	else if (!strcmp(w, "ipi"))
		ipi_bench(mb);
	else if (!strcmp(w, "hugetlb_cow"))
		hugetlb_cow(mb);
	else {
		fprintf(stderr, "usage: xbench build JOBS | page_fault|page_fault_thp|page_fault_warm|page_fault_idle|\n"
			"page_fault_shared|fork|fork_thp|"
			"fork_pte_thp|munmap_pte|munmap_pte_thp|mmap|file|disk_read|exec|lseek|pread1|pwrite1|\n"
			"hugetlb_cow|file_huge [MB] [PROCS] | meta|ipi [THOUSANDS]\n");
		return 2;
	}
	return 0;
}
