// SPDX-License-Identifier: GPL-2.0
/*
 * Which of the frames userspace maps XPFO owns, by kind. Maps one of each
 * kind the audit tells apart and holds them while it reads
 * /sys/kernel/debug/xpfo/audit (CONFIG_XPFO_DEBUG), whose walk counts the
 * frames of every mapped folio in the system, this program's and every
 * other process's:
 *
 *   anon   256 written pages, a 4M range with MADV_HUGEPAGE (THP where it
 *          can), and private copies of a file's pages (COW);
 *   shmem  a 64-page memfd, written;
 *   file   a 64-page file on FILE's file system (the scratch disk), mapped
 *          shared and read;
 *   other  an AF_PACKET receive ring and an io_uring's rings, where the
 *          kernel has them: kernel pages inserted into the process (the
 *          vDSO is one in every process).
 *
 *   coverage [FILE]
 *
 * One result line: RESULT {"coverage": {...}} with the audit's umapped_*
 * counts and what was set up ("packet", "io_uring", "file": 1 or 0), or
 * {"coverage": null} where the kernel has no audit.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef __NR_io_uring_setup
#define __NR_io_uring_setup 425
#endif

#define PAGE		4096UL
#define ANON_PAGES	256
#define THP_BYTES	(4UL << 20)
#define SHMEM_PAGES	64
#define FILE_PAGES	64
#define AUDIT		"/sys/kernel/debug/xpfo/audit"

static void *map_or_die(void *p, const char *what)
{
	if (p == MAP_FAILED) {
		fprintf(stderr, "coverage: %s: %s\n", what, strerror(errno));
		printf("RESULT {\"coverage\": null, \"error\": \"%s\"}\n", what);
		exit(1);
	}
	return p;
}

static void touch(unsigned char *p, unsigned long len, int write)
{
	unsigned long i;
	volatile unsigned char sink;

	for (i = 0; i < len; i += PAGE) {
		if (write)
			p[i] = (unsigned char)(i / PAGE + 1);
		else
			sink = p[i];
	}
	(void)sink;
}

/* a page cache of FILE_PAGES pages, mapped shared and read; 0 on failure */
static int map_file(const char *path)
{
	static unsigned char buf[PAGE];
	unsigned char *p;
	int fd, i;

	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0) {
		fprintf(stderr, "coverage: %s: %s\n", path, strerror(errno));
		return 0;
	}
	memset(buf, 0x5a, sizeof(buf));
	for (i = 0; i < FILE_PAGES; i++)
		if (write(fd, buf, sizeof(buf)) != sizeof(buf)) {
			fprintf(stderr, "coverage: write %s: %s\n", path, strerror(errno));
			close(fd);
			return 0;
		}
	fsync(fd);
	p = map_or_die(mmap(NULL, FILE_PAGES * PAGE, PROT_READ, MAP_SHARED, fd, 0),
		       "mmap file");
	touch(p, FILE_PAGES * PAGE, 0);
	/* private copies of its first pages: anonymous frames made by COW */
	p = map_or_die(mmap(NULL, 8 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0),
		       "mmap file private");
	touch(p, 8 * PAGE, 1);
	close(fd);
	return 1;
}

/* an AF_PACKET receive ring of 4 blocks of 4 pages; 0 where refused */
static int map_packet_ring(void)
{
	struct tpacket_req req = {
		.tp_block_size = 4 * PAGE, .tp_block_nr = 4,
		.tp_frame_size = 2048, .tp_frame_nr = 4 * 4 * PAGE / 2048,
	};
	void *p;
	int fd;

	fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
	if (fd < 0 || setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof(req))) {
		fprintf(stderr, "coverage: packet ring: %s\n", strerror(errno));
		return 0;
	}
	p = mmap(NULL, req.tp_block_size * req.tp_block_nr, PROT_READ | PROT_WRITE,
		 MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		fprintf(stderr, "coverage: mmap packet ring: %s\n", strerror(errno));
		return 0;
	}
	touch(p, req.tp_block_size * req.tp_block_nr, 0);
	return 1;
}

/* the offsets io_uring_setup() reports; only the sizes matter here */
struct uring_params {
	unsigned int sq_entries, cq_entries, flags, sq_thread_cpu, sq_thread_idle;
	unsigned int features, wq_fd, resv[3];
	unsigned int sq_off[10];
	unsigned int cq_off[10];
};

/* an io_uring's SQ ring and SQE array; 0 where the kernel has none */
static int map_io_uring(void)
{
	struct uring_params prm;
	void *p;
	int fd;

	memset(&prm, 0, sizeof(prm));
	fd = syscall(__NR_io_uring_setup, 8, &prm);
	if (fd < 0) {
		fprintf(stderr, "coverage: io_uring_setup: %s\n", strerror(errno));
		return 0;
	}
	p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (p == MAP_FAILED) {
		fprintf(stderr, "coverage: mmap io_uring: %s\n", strerror(errno));
		return 0;
	}
	p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
		 0x10000000);
	return p != MAP_FAILED;
}

int main(int argc, char **argv)
{
	int file = 0, packet, uring, shm;
	unsigned char *p;
	char line[128];
	FILE *f;

	p = map_or_die(mmap(NULL, ANON_PAGES * PAGE, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), "mmap anon");
	touch(p, ANON_PAGES * PAGE, 1);
	/* a 2M-aligned range inside 4M, for a THP where the kernel gives one */
	p = map_or_die(mmap(NULL, 2 * THP_BYTES, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), "mmap thp");
	p = (unsigned char *)(((unsigned long)p + THP_BYTES - 1) & ~(THP_BYTES - 1));
	madvise(p, THP_BYTES, MADV_HUGEPAGE);
	touch(p, THP_BYTES, 1);

	shm = memfd_create("coverage", 0);
	if (shm < 0 || ftruncate(shm, SHMEM_PAGES * PAGE)) {
		fprintf(stderr, "coverage: memfd: %s\n", strerror(errno));
		printf("RESULT {\"coverage\": null, \"error\": \"memfd\"}\n");
		return 1;
	}
	p = map_or_die(mmap(NULL, SHMEM_PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED,
			    shm, 0), "mmap memfd");
	touch(p, SHMEM_PAGES * PAGE, 1);

	if (argc > 1)
		file = map_file(argv[1]);
	packet = map_packet_ring();
	uring = map_io_uring();

	f = fopen(AUDIT, "r");
	if (!f) {
		fprintf(stderr, "coverage: %s: %s\n", AUDIT, strerror(errno));
		printf("RESULT {\"coverage\": null}\n");
		return 0;
	}
	printf("RESULT {\"coverage\": {\"file\": %d, \"packet\": %d, \"io_uring\": %d",
	       file, packet, uring);
	while (fgets(line, sizeof(line), f)) {
		char key[64];
		unsigned long n;

		if (sscanf(line, "%63s %lu", key, &n) == 2 && !strncmp(key, "umapped_", 8)) {
			printf(", \"%s\": %lu", key, n);
		}
	}
	printf("}}\n");
	fclose(f);
	if (argc > 1)
		unlink(argv[1]);
	return 0;
}
