// SPDX-License-Identifier: GPL-2.0
/*
 * How predictable is the next frame userspace gets? Two measures, from the
 * attacker's side (frame numbers from /proc/self/pagemap, as root):
 *
 *   reuse:  a page is faulted in, its frame noted, the page unmapped, and a
 *           new page faulted in at once; counted when the new page got the
 *           frame just freed. Repeated TRIALS times.
 *   spray:  SPRAY fresh pages faulted in one after another; counted when a
 *           page's frame is the previous page's frame plus or minus one
 *           (the buddy allocator hands a refill out in physical order).
 *
 * One result line: RESULT {"predict": {...}}.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE	4096UL
#define TRIALS	1000
#define SPRAY	4096

static int pagemap = -1;

static uint64_t pfn_of(void *addr)
{
	uint64_t entry;
	off_t off = ((uintptr_t)addr / PAGE) * sizeof(entry);

	if (pread(pagemap, &entry, sizeof(entry), off) != sizeof(entry)) {
		fprintf(stderr, "predict: pagemap: %s\n", strerror(errno));
		exit(2);
	}
	if (!(entry & (1ULL << 63)) || !(entry & ((1ULL << 55) - 1))) {
		fprintf(stderr, "predict: page not present or PFN hidden\n");
		exit(2);
	}
	return entry & ((1ULL << 55) - 1);
}

static void *fresh(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED || madvise(p, len, MADV_NOHUGEPAGE)) {
		fprintf(stderr, "predict: mmap: %s\n", strerror(errno));
		exit(2);
	}
	return p;
}

int main(void)
{
	unsigned int i, same = 0, adjacent = 0;
	uint64_t freed, prev = 0;
	char *p;

	pagemap = open("/proc/self/pagemap", O_RDONLY);
	if (pagemap < 0) {
		fprintf(stderr, "predict: /proc/self/pagemap: %s\n", strerror(errno));
		return 2;
	}
	p = fresh(PAGE);
	p[0] = 1;
	freed = pfn_of(p);
	for (i = 0; i < TRIALS; i++) {
		munmap(p, PAGE);
		p = fresh(PAGE);
		p[0] = 1;
		prev = pfn_of(p);
		same += prev == freed;
		freed = prev;
	}
	munmap(p, PAGE);

	p = fresh(SPRAY * PAGE);
	for (i = 0; i < SPRAY; i++) {
		uint64_t pfn;

		p[i * PAGE] = 1;
		pfn = pfn_of(p + i * PAGE);
		if (i && (pfn == prev + 1 || pfn + 1 == prev))
			adjacent++;
		prev = pfn;
	}
	munmap(p, SPRAY * PAGE);
	printf("RESULT {\"predict\": {\"reuse_trials\": %u, \"reuse_same\": %u, "
	       "\"spray_pages\": %u, \"spray_adjacent\": %u}}\n",
	       TRIALS, same, SPRAY, adjacent);
	return 0;
}
