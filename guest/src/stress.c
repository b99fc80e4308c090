// SPDX-License-Identifier: GPL-2.0
/*
 * Stress for XPFO: workers run side by side until a deadline, each checking
 * the data it wrote, so that a frame mapped wrongly or lost shows up as a
 * mismatch and not only as an oops.
 *
 *   stress SECONDS [SCRATCH_DIR]
 *
 * Workers: fork/exec storm, COW after fork, THP allocation and splitting,
 * anonymous memory pressure with compaction, tmpfs and memfd files, and
 * page-cache churn on a file larger than RAM (in SCRATCH_DIR, if given).
 * Prints one RESULT line per worker and one for the whole run; exits 0
 * only if every worker completed and verified its data.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096UL
#define HUGE (2UL << 20)

static time_t deadline;
static const char *scratch;

/* Every worker (a process of its own) completes at least one round. */
static int running(void)
{
	static int first = 1;

	if (first) {
		first = 0;
		return 1;
	}
	return time(NULL) < deadline;
}

static void die(const char *what)
{
	fprintf(stderr, "stress: %s: %s\n", what, strerror(errno));
	exit(2);
}

static void fill(uint64_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i += PAGE / 8)
		p[i] = seed ^ i;
}

static int check(const uint64_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i += PAGE / 8)
		if (p[i] != (seed ^ i)) {
			fprintf(stderr, "stress: mismatch at word %zu: %#lx != %#lx\n", i,
				(unsigned long)p[i], (unsigned long)(seed ^ i));
			return -1;
		}
	return 0;
}

static long w_forkexec(void)
{
	long n = 0;

	while (running()) {
		pid_t pid = fork();
		int st;

		if (pid < 0)
			die("fork");
		if (pid == 0) {
			execl("/bin/true", "true", (char *)NULL);
			_exit(127);
		}
		if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			return -1;
		n++;
	}
	return n;
}

static long w_cow(void)
{
	size_t len = 16 << 20;
	long n = 0;

	while (running()) {
		uint64_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		pid_t pid;
		int st;

		if (p == MAP_FAILED)
			die("mmap");
		fill(p, len / 8, 0x1111 + n);
		pid = fork();
		if (pid == 0) {
			fill(p, len / 8, 0x2222 + n);	/* copies every page */
			_exit(check(p, len / 8, 0x2222 + n) ? 1 : 0);
		}
		if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			return -1;
		if (check(p, len / 8, 0x1111 + n))
			return -1;
		munmap(p, len);
		n++;
	}
	return n;
}

static long w_thp(void)
{
	size_t len = 8 * HUGE;
	long n = 0;

	while (running()) {
		char *raw = mmap(NULL, len + HUGE, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		uint64_t *p;

		if (raw == MAP_FAILED)
			die("mmap");
		p = (uint64_t *)(((uintptr_t)raw + HUGE - 1) & ~(HUGE - 1));
		madvise(p, len, MADV_HUGEPAGE);
		fill(p, len / 8, 0x3333 + n);
		/* split: punch a page out of each huge page, change protections */
		for (size_t off = 0; off < len; off += HUGE)
			munmap((char *)p + off + 5 * PAGE, PAGE);
		mprotect((char *)p + HUGE + 64 * PAGE, 64 * PAGE, PROT_READ);
		for (size_t off = 0; off < len; off += PAGE) {
			if ((off % HUGE) == 5 * PAGE)
				continue;
			if (p[off / 8] != ((0x3333 + n) ^ (off / 8))) {
				fprintf(stderr, "stress: thp mismatch at %zu\n", off);
				return -1;
			}
		}
		munmap(raw, len + HUGE);
		n++;
	}
	return n;
}

static long w_pressure(void)
{
	struct sysinfo si;
	size_t len;
	long n = 0;

	if (sysinfo(&si))
		die("sysinfo");
	len = (size_t)si.totalram * si.mem_unit * 3 / 10;
	while (running()) {
		uint64_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		int fd;

		if (p == MAP_FAILED)
			die("mmap");
		fill(p, len / 8, 0x4444 + n);
		fd = open("/proc/sys/vm/compact_memory", O_WRONLY);
		if (fd >= 0) {
			if (write(fd, "1", 1) != 1)
				die("compact_memory");
			close(fd);
		}
		if (check(p, len / 8, 0x4444 + n))
			return -1;
		munmap(p, len);
		n++;
	}
	return n;
}

static long file_round(const char *path, size_t len, uint64_t seed, int use_mmap)
{
	static uint64_t buf[PAGE * 16 / 8];
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);

	if (fd < 0)
		die(path);
	for (size_t off = 0; off < len; off += sizeof(buf)) {
		for (size_t i = 0; i < sizeof(buf) / 8; i += PAGE / 8)
			buf[i] = seed ^ (off / 8 + i);
		if (write(fd, buf, sizeof(buf)) != sizeof(buf))
			die("write");
	}
	if (use_mmap) {
		uint64_t *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);

		if (p == MAP_FAILED)
			die("mmap file");
		if (check(p, len / 8, seed))
			return -1;
		munmap(p, len);
	} else {
		lseek(fd, 0, SEEK_SET);
		for (size_t off = 0; off < len; off += sizeof(buf)) {
			if (read(fd, buf, sizeof(buf)) != sizeof(buf))
				die("read");
			for (size_t i = 0; i < sizeof(buf) / 8; i += PAGE / 8)
				if (buf[i] != (seed ^ (off / 8 + i))) {
					fprintf(stderr, "stress: file mismatch in %s\n", path);
					return -1;
				}
		}
	}
	close(fd);
	unlink(path);
	return 0;
}

static long w_tmpfs(void)
{
	long n = 0;

	while (running()) {
		int fd = memfd_create("stress", 0);
		uint64_t *p;

		if (file_round("/tmp/stress.dat", 8 << 20, 0x5555 + n, n & 1))
			return -1;
		if (fd < 0 || ftruncate(fd, 4 << 20))
			die("memfd");
		p = mmap(NULL, 4 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED)
			die("mmap memfd");
		fill(p, (4 << 20) / 8, 0x6666 + n);
		if (check(p, (4 << 20) / 8, 0x6666 + n))
			return -1;
		munmap(p, 4 << 20);
		close(fd);
		n++;
	}
	return n;
}

static long w_pagecache(void)
{
	struct sysinfo si;
	char path[256];
	size_t len;
	long n = 0;

	if (!scratch)
		return 0;
	if (sysinfo(&si))
		die("sysinfo");
	/* More than RAM can keep: the first pages are evicted by the end. */
	len = ((size_t)si.totalram * si.mem_unit * 5 / 4) & ~(PAGE * 16 - 1);
	snprintf(path, sizeof(path), "%s/stress.dat", scratch);
	while (running()) {
		if (file_round(path, len, 0x7777 + n, n & 1))
			return -1;
		n++;
	}
	return n;
}

static const struct worker {
	const char *name;
	long (*fn)(void);
} workers[] = {
	{ "forkexec", w_forkexec },
	{ "cow", w_cow },
	{ "thp", w_thp },
	{ "pressure", w_pressure },
	{ "tmpfs", w_tmpfs },
	{ "pagecache", w_pagecache },
};
#define NR_WORKERS (sizeof(workers) / sizeof(workers[0]))

int main(int argc, char **argv)
{
	int pipes[NR_WORKERS][2], failed = 0;
	pid_t pids[NR_WORKERS];
	long seconds;

	if (argc < 2 || (seconds = strtol(argv[1], NULL, 10)) <= 0) {
		fprintf(stderr, "usage: stress SECONDS [SCRATCH_DIR]\n");
		return 2;
	}
	scratch = argc > 2 ? argv[2] : NULL;
	deadline = time(NULL) + seconds;
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (size_t i = 0; i < NR_WORKERS; i++) {
		if (pipe(pipes[i]))
			die("pipe");
		pids[i] = fork();
		if (pids[i] == 0) {
			long n = workers[i].fn();

			if (write(pipes[i][1], &n, sizeof(n)) != sizeof(n))
				_exit(3);
			_exit(n < 0 ? 1 : 0);
		}
		close(pipes[i][1]);
	}
	for (size_t i = 0; i < NR_WORKERS; i++) {
		long n = -1;
		int st = 0;

		if (read(pipes[i][0], &n, sizeof(n)) != sizeof(n))
			n = -1;
		waitpid(pids[i], &st, 0);
		if (n < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			failed++;
		printf("RESULT {\"worker\": \"%s\", \"iterations\": %ld, \"status\": \"%s\"%s}\n",
		       workers[i].name, n, n < 0 || !WIFEXITED(st) || WEXITSTATUS(st) ? "fail" : "pass",
		       WIFSIGNALED(st) ? ", \"killed\": true" : "");
	}
	printf("RESULT {\"worker\": \"all\", \"seconds\": %ld, \"failed\": %d, \"status\": \"%s\"}\n",
	       seconds, failed, failed ? "fail" : "pass");
	return failed ? 1 : 0;
}
