// SPDX-License-Identifier: GPL-2.0
/*
 * How predictable is the next frame userspace gets? Two measures, from the
 * attacker's side (frame numbers from /proc/self/pagemap, as root):
 *
 *   reuse:  a page is faulted in, its frame noted, the page unmapped, and a
 *           new page faulted in at once; counted when the new page got the
 *           frame just freed. Repeated for 4K pages (the per-CPU lists),
 *           64K mTHPs (an order the per-CPU lists do not hold: the buddy
 *           allocator's free lists; enabled here for the run), every other
 *           mTHP size the kernel offers below 2M (16K-1M, each enabled
 *           alone for its run, fewer trials) and 2M THPs (MADV_HUGEPAGE).
 *           A large fault that got no large folio is counted apart
 *           (_small) and not as a trial of its size.
 *   spray:  SPRAY fresh pages faulted in one after another; counted when a
 *           page's frame is the previous page's frame plus or minus one
 *           (the buddy allocator hands a refill out in physical order).
 *
 * One result line: RESULT {"predict": {...}}.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE	4096UL
#define TRIALS	1000
#define TRIALS_THP	200
#define TRIALS_MTHP	200	/* each mTHP size but 64K */
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

#define MTHP	(64 * 1024UL)
#define THP	(2 * 1024 * 1024UL)
#define MTHP_DIR "/sys/kernel/mm/transparent_hugepage"

struct reuse {
	unsigned int trials, same, small;
};

/* A fresh mapping of @size, aligned to it, with the THP advice for @size. */
static char *fresh(size_t size, size_t *len)
{
	int advice = size == THP ? MADV_HUGEPAGE : MADV_NOHUGEPAGE;
	int mthp = size != PAGE && size != THP;
	char *p;

	*len = size == PAGE ? PAGE : 2 * size;
	p = mmap(NULL, *len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		fprintf(stderr, "predict: mmap: %s\n", strerror(errno));
		exit(2);
	}
	/* MADV_NOHUGEPAGE would turn mTHP off too; a 2*size VMA holds no THP */
	if (!mthp && madvise(p, *len, advice)) {
		fprintf(stderr, "predict: madvise: %s\n", strerror(errno));
		exit(2);
	}
	return p;
}

/* Fault in one folio of @size; its first frame, or 0 if it is not large. */
static uint64_t fault(size_t size, char **map, size_t *len)
{
	char *p = fresh(size, len);
	char *a = (char *)(((uintptr_t)p + size - 1) & ~(size - 1));
	uint64_t first;

	*map = p;
	a[0] = 1;
	first = pfn_of(a);
	if (size > PAGE && pfn_of(a + size - PAGE) != first + size / PAGE - 1)
		return 0;
	return first;
}

static struct reuse reuse(size_t size, unsigned int trials)
{
	struct reuse r = { 0 };
	uint64_t freed, pfn;
	size_t len;
	char *p;

	freed = fault(size, &p, &len);
	while (r.trials < trials && r.small < trials) {
		munmap(p, len);
		pfn = fault(size, &p, &len);
		if (!pfn || !freed) {
			r.small++;
		} else {
			r.trials++;
			r.same += pfn == freed;
		}
		freed = pfn;
	}
	munmap(p, len);
	return r;
}

/* Turn @kb mTHP on for the run; returns the policy to restore, or NULL. */
static char *mthp_on(unsigned long kb)
{
	static char was[64];
	char ctl[128], *l, *r;
	FILE *f;

	snprintf(ctl, sizeof(ctl), MTHP_DIR "/hugepages-%lukB/enabled", kb);
	f = fopen(ctl, "r+");

	if (!f)
		return NULL;
	if (!fgets(was, sizeof(was), f) || !(l = strchr(was, '[')) ||
	    !(r = strchr(l, ']'))) {
		fclose(f);
		return NULL;
	}
	*r = 0;
	memmove(was, l + 1, strlen(l + 1) + 1);
	rewind(f);
	fputs("always", f);
	fclose(f);
	return was;
}

static void mthp_restore(unsigned long kb, const char *was)
{
	char ctl[128];
	FILE *f;

	snprintf(ctl, sizeof(ctl), MTHP_DIR "/hugepages-%lukB/enabled", kb);
	f = was ? fopen(ctl, "w") : NULL;

	if (f) {
		fputs(was, f);
		fclose(f);
	}
}

/*
 * Every mTHP size the kernel offers but 64K and 2M, each enabled alone
 * for its run: one JSON member per size ("16": {...}), appended to @out.
 */
static void other_mthp(char *out, size_t room)
{
	DIR *d = opendir(MTHP_DIR);
	struct dirent *e;
	const char *sep = "";
	size_t used = 0;

	out[0] = 0;
	while (d && (e = readdir(d))) {
		unsigned long kb;
		struct reuse r;
		char *was;

		if (sscanf(e->d_name, "hugepages-%lukB", &kb) != 1 ||
		    kb == MTHP / 1024 || kb >= THP / 1024)
			continue;
		was = mthp_on(kb);
		if (!was)
			continue;
		r = reuse(kb * 1024, TRIALS_MTHP);
		mthp_restore(kb, was);
		used += snprintf(out + used, room - used,
				 "%s\"%lu\": {\"trials\": %u, \"same\": %u, \"small\": %u}",
				 sep, kb, r.trials, r.same, r.small);
		if (used >= room)
			break;
		sep = ", ";
	}
	if (d)
		closedir(d);
}

int main(void)
{
	struct reuse r4k, r64k, r2m;
	unsigned int i, adjacent = 0;
	uint64_t prev = 0;
	char *p, *was, others[2048];

	pagemap = open("/proc/self/pagemap", O_RDONLY);
	if (pagemap < 0) {
		fprintf(stderr, "predict: /proc/self/pagemap: %s\n", strerror(errno));
		return 2;
	}
	r4k = reuse(PAGE, TRIALS);
	was = mthp_on(MTHP / 1024);
	r64k = reuse(MTHP, TRIALS);
	mthp_restore(MTHP / 1024, was);
	other_mthp(others, sizeof(others));
	r2m = reuse(THP, TRIALS_THP);

	p = mmap(NULL, SPRAY * PAGE, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED || madvise(p, SPRAY * PAGE, MADV_NOHUGEPAGE)) {
		fprintf(stderr, "predict: mmap: %s\n", strerror(errno));
		return 2;
	}
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
	       "\"mthp_trials\": %u, \"mthp_same\": %u, \"mthp_small\": %u, "
	       "\"thp_trials\": %u, \"thp_same\": %u, \"thp_small\": %u, "
	       "\"spray_pages\": %u, \"spray_adjacent\": %u, \"mthp_other\": {%s}}}\n",
	       r4k.trials, r4k.same, r64k.trials, r64k.same, r64k.small,
	       r2m.trials, r2m.same, r2m.small, SPRAY, adjacent, others);
	return 0;
}
