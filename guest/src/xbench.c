// SPDX-License-Identifier: GPL-2.0
/*
 * Guest microbenchmarks. One RESULT line per workload:
 *
 *   RESULT {"workload": W, "value": V, "unit": U, "better": "higher"|"lower",
 *           "seconds": S, "user_pages": P}
 *
 * user_pages is the number of user frames the workload allocated (pages
 * touched), so that kernel event counts can be normalised per 1000 pages.
 *
 *   xbench WORKLOAD [SIZE_MB] [PROCS]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096UL

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

static void report(const char *w, double value, const char *unit, const char *better,
		   double secs, unsigned long pages)
{
	printf("RESULT {\"workload\": \"%s\", \"value\": %.3f, \"unit\": \"%s\", "
	       "\"better\": \"%s\", \"seconds\": %.3f, \"user_pages\": %lu}\n",
	       w, value, unit, better, secs, pages);
}

static char *map_touch(size_t len)
{
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		die("mmap");
	for (size_t off = 0; off < len; off += PAGE)
		p[off] = 1;
	return p;
}

/* mmap, touch every page, munmap; in PROCS processes at once. */
static void page_fault(size_t mb, int procs)
{
	size_t len = mb << 20;
	int rounds = 4;
	double t = now();

	for (int i = 0; i < procs; i++) {
		pid_t pid = fork();

		if (pid < 0)
			die("fork");
		if (pid == 0) {
			for (int r = 0; r < rounds; r++)
				munmap(map_touch(len), len);
			_exit(0);
		}
	}
	while (wait(NULL) > 0)
		;
	t = now() - t;
	unsigned long pages = (unsigned long)procs * rounds * (len / PAGE);
	report("page_fault", pages / t, "pages/s", "higher", t, pages);
}

static void fork_bench(size_t mb)
{
	size_t len = mb << 20;
	char *p = map_touch(len);
	int n = 40;
	double t = now();

	for (int i = 0; i < n; i++) {
		pid_t pid = fork();

		if (pid < 0)
			die("fork");
		if (pid == 0)
			_exit(0);
		waitpid(pid, NULL, 0);
	}
	t = now() - t;
	report("fork", t / n * 1e6, "us/fork", "lower", t, len / PAGE);
	munmap(p, len);
}

static void mmap_bench(size_t mb)
{
	size_t len = mb << 20;
	int n = 4;
	double tm = 0, tu = 0;

	for (int i = 0; i < n; i++) {
		double t0 = now();
		char *p = map_touch(len);
		double t1 = now();

		munmap(p, len);
		tm += t1 - t0;
		tu += now() - t1;
	}
	report("mmap", tm / n * 1e3, "ms/map+touch", "lower", tm, n * (len / PAGE));
	report("munmap", tu / n * 1e3, "ms/munmap", "lower", tu, 0);
}

static void file_bench(size_t mb)
{
	static char buf[1 << 16];
	const char *path = "/tmp/xbench.dat";
	size_t len = mb << 20;
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	double t;

	if (fd < 0)
		die(path);
	memset(buf, 0x5a, sizeof(buf));
	t = now();
	for (size_t off = 0; off < len; off += sizeof(buf))
		if (write(fd, buf, sizeof(buf)) != sizeof(buf))
			die("write");
	t = now() - t;
	report("write", mb / t, "MB/s", "higher", t, len / PAGE);
	t = now();
	for (int r = 0; r < 4; r++) {
		lseek(fd, 0, SEEK_SET);
		for (size_t off = 0; off < len; off += sizeof(buf))
			if (read(fd, buf, sizeof(buf)) != sizeof(buf))
				die("read");
	}
	t = now() - t;
	report("read", 4 * mb / t, "MB/s", "higher", t, 0);
	close(fd);
	unlink(path);
}

static void exec_bench(void)
{
	int n = 100;
	double t = now();

	for (int i = 0; i < n; i++) {
		pid_t pid = fork();

		if (pid == 0) {
			execl("/xh/bin/xbench", "xbench", "noop", (char *)NULL);
			_exit(127);
		}
		waitpid(pid, NULL, 0);
	}
	t = now() - t;
	report("exec", n / t, "execs/s", "higher", t, 0);
}

static void lseek_bench(void)
{
	int fd = open("/dev/null", O_RDONLY);
	long n = 1000000;
	double t = now();

	for (long i = 0; i < n; i++)
		lseek(fd, 0, SEEK_SET);
	t = now() - t;
	report("lseek", n / t, "calls/s", "higher", t, 0);
	close(fd);
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
	report("build_sys", tv(after.ru_stime) - tv(before.ru_stime), "s", "lower", t, 0);
	report("build_user", tv(after.ru_utime) - tv(before.ru_utime), "s", "lower", t, 0);
	report("build_elapsed", t, "s", "lower", t, 0);
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
		page_fault(mb, procs);
	else if (!strcmp(w, "fork"))
		fork_bench(mb);
	else if (!strcmp(w, "mmap"))
		mmap_bench(mb);
	else if (!strcmp(w, "file"))
		file_bench(mb);
	else if (!strcmp(w, "exec"))
		exec_bench();
	else if (!strcmp(w, "lseek"))
		lseek_bench();
	else {
		fprintf(stderr, "usage: xbench build JOBS | page_fault|fork|mmap|file|exec|lseek [MB] [PROCS]\n");
		return 2;
	}
	return 0;
}
