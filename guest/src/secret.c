// SPDX-License-Identifier: GPL-2.0
/*
 * CPA round trips of direct-map entries, driven from userspace: memfd_secret()
 * takes each page it hands out out of the direct map
 * (set_direct_map_invalid_noflush()) and puts it back when the page is freed
 * (set_direct_map_default_noflush()). Run it, then read the audit: a
 * present direct-map entry whose global bit is off the kernel's policy
 * shows up there as global_stray.
 *
 *   secret [PAGES [ROUNDS]]   default 256 pages, 4 rounds
 *
 * One result line: RESULT {"secret": {"pages": N, "rounds": R, "status": S}}
 * with status "pass" (every round mapped, wrote and freed its pages),
 * "unsupported" (no memfd_secret: ENOSYS, or secretmem disabled) or "fail".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef __NR_memfd_secret
#define __NR_memfd_secret 447
#endif

#define PAGE	4096UL

static void result(unsigned long pages, unsigned long rounds, const char *status)
{
	printf("RESULT {\"secret\": {\"pages\": %lu, \"rounds\": %lu, \"status\": \"%s\"}}\n",
	       pages, rounds, status);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	unsigned long pages = argc > 1 ? strtoul(argv[1], NULL, 0) : 256;
	unsigned long rounds = argc > 2 ? strtoul(argv[2], NULL, 0) : 4;
	unsigned long r, i;

	if (!pages || !rounds) {
		fprintf(stderr, "secret: PAGES and ROUNDS must be positive\n");
		result(pages, rounds, "fail");
		return 2;
	}
	for (r = 0; r < rounds; r++) {
		int fd = syscall(__NR_memfd_secret, 0);
		unsigned char *p;

		if (fd < 0 && (errno == ENOSYS || errno == ENOMEM || errno == EINVAL)) {
			fprintf(stderr, "secret: memfd_secret: %s\n", strerror(errno));
			result(pages, rounds, "unsupported");
			return 0;
		}
		if (fd < 0 || ftruncate(fd, pages * PAGE)) {
			fprintf(stderr, "secret: memfd_secret/ftruncate: %s\n", strerror(errno));
			result(pages, rounds, "fail");
			return 1;
		}
		p = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED) {
			fprintf(stderr, "secret: mmap: %s\n", strerror(errno));
			result(pages, rounds, "fail");
			return 1;
		}
		/* each first touch allocates a page and unmaps its alias */
		for (i = 0; i < pages; i++)
			p[i * PAGE] = (unsigned char)(i + r + 1);
		for (i = 0; i < pages; i++) {
			if (p[i * PAGE] != (unsigned char)(i + r + 1)) {
				fprintf(stderr, "secret: page %lu lost its byte\n", i);
				result(pages, rounds, "fail");
				return 1;
			}
		}
		/* the last reference: the pages go back to the direct map */
		munmap(p, pages * PAGE);
		close(fd);
	}
	result(pages, rounds, "pass");
	return 0;
}
