// SPDX-License-Identifier: GPL-2.0
/*
 * insnprof: a QEMU TCG plugin that counts the guest instructions executed
 * per translation-block start address, for `./xpfo profile`.
 *
 * Each block, when it is translated, gets a counter keyed by its first
 * instruction's guest virtual address, and an inline "add the block's
 * instruction count" op on that counter: nothing is called per executed
 * block. At exit the counters go to the file named by the `out=` argument,
 * one "ADDRESS COUNT" line each (hex address, decimal count), written to
 * a temporary name and renamed, so that a file by that name is complete.
 *
 * Counts are per block start: a block is counted whole each time it runs
 * (a block left early by an exception counts its remaining instructions
 * too), and it is attributed to the address it starts at. The inline adds
 * are not atomic: exact with one TCG thread (-icount runs every vCPU on
 * one), approximate with multi-threaded TCG.
 *
 * Debian ships no qemu-plugin.h: the declarations below are what this file
 * uses of QEMU 7.2's include/qemu/qemu-plugin.h, plugin API version 1
 * (QEMU_PLUGIN_VERSION 1 in QEMU 7.2).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- QEMU 7.2 plugin API, version 1 (the part used here) --- */
#define QEMU_PLUGIN_EXPORT __attribute__((visibility("default")))

typedef uint64_t qemu_plugin_id_t;

typedef struct qemu_info_t {
	const char *target_name;
	struct {
		int min;
		int cur;
	} version;
	bool system_emulation;
	union {
		struct {
			int smp_vcpus;
			int max_vcpus;
		} system;
	};
} qemu_info_t;

struct qemu_plugin_tb;

enum qemu_plugin_op {
	QEMU_PLUGIN_INLINE_ADD_U64,
};

typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id,
					       struct qemu_plugin_tb *tb);
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id,
					   qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb,
					      enum qemu_plugin_op op,
					      void *ptr, uint64_t imm);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *tb);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id,
				    qemu_plugin_udata_cb_t cb, void *userdata);

QEMU_PLUGIN_EXPORT int qemu_plugin_version = 1;
/* --- end of the API --- */

/*
 * Counters live in chunks that never move (the inline ops hold their
 * addresses); an open-addressing table of pointers finds them by address
 * and is rebuilt larger when half full.
 */
struct counter {
	uint64_t vaddr;
	uint64_t count;
};

#define CHUNK 65536

struct chunk {
	struct chunk *next;
	size_t used;
	struct counter c[CHUNK];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct chunk *chunks;
static struct counter **slots;
static size_t nslots, nused;
static char *out_path;

static size_t slot_of(uint64_t vaddr, size_t n)
{
	return (size_t)((vaddr * 0x9e3779b97f4a7c15ull) >> 17) & (n - 1);
}

static bool grow(void)
{
	size_t n = nslots ? nslots * 2 : 1 << 20;
	struct counter **s = calloc(n, sizeof(*s));

	if (!s)
		return false;
	for (size_t i = 0; i < nslots; i++) {
		size_t j;

		if (!slots[i])
			continue;
		for (j = slot_of(slots[i]->vaddr, n); s[j]; j = (j + 1) & (n - 1))
			;
		s[j] = slots[i];
	}
	free(slots);
	slots = s;
	nslots = n;
	return true;
}

static struct counter *new_counter(uint64_t vaddr)
{
	struct counter *c;

	if (!chunks || chunks->used == CHUNK) {
		struct chunk *ch = calloc(1, sizeof(*ch));

		if (!ch)
			return NULL;
		ch->next = chunks;
		chunks = ch;
	}
	c = &chunks->c[chunks->used++];
	c->vaddr = vaddr;
	return c;
}

/* The counter of @vaddr, made on first use; NULL when out of memory. */
static struct counter *lookup(uint64_t vaddr)
{
	size_t i;

	if (2 * (nused + 1) > nslots && !grow())
		return NULL;
	for (i = slot_of(vaddr, nslots); slots[i]; i = (i + 1) & (nslots - 1))
		if (slots[i]->vaddr == vaddr)
			return slots[i];
	slots[i] = new_counter(vaddr);
	if (slots[i])
		nused++;
	return slots[i];
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	struct counter *c;

	(void)id;
	pthread_mutex_lock(&lock);
	c = lookup(qemu_plugin_tb_vaddr(tb));
	pthread_mutex_unlock(&lock);
	if (c)
		qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64,
							 &c->count,
							 qemu_plugin_tb_n_insns(tb));
}

static void write_counts(qemu_plugin_id_t id, void *userdata)
{
	size_t len = strlen(out_path) + sizeof(".tmp");
	char *tmp = malloc(len);
	FILE *f;
	int err = 0;

	(void)id;
	(void)userdata;
	if (!tmp)
		return;
	snprintf(tmp, len, "%s.tmp", out_path);
	f = fopen(tmp, "w");
	if (!f) {
		fprintf(stderr, "insnprof: cannot write %s: %s\n", tmp, strerror(errno));
		free(tmp);
		return;
	}
	for (struct chunk *ch = chunks; ch; ch = ch->next)
		for (size_t i = 0; i < ch->used; i++)
			if (ch->c[i].count)
				fprintf(f, "%" PRIx64 " %" PRIu64 "\n",
					ch->c[i].vaddr, ch->c[i].count);
	if (ferror(f))
		err = EIO;
	if (fclose(f) && !err)
		err = errno;
	if (err || rename(tmp, out_path)) {
		fprintf(stderr, "insnprof: cannot write %s: %s\n", out_path,
			strerror(err ? err : errno));
		remove(tmp);
	}
	free(tmp);
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
					   int argc, char **argv)
{
	(void)info;
	for (int i = 0; i < argc; i++) {
		if (!strncmp(argv[i], "out=", 4)) {
			out_path = strdup(argv[i] + 4);
		} else {
			fprintf(stderr, "insnprof: unknown argument %s (takes out=FILE)\n",
				argv[i]);
			return -1;
		}
	}
	if (!out_path || !*out_path) {
		fprintf(stderr, "insnprof: no output file (out=FILE)\n");
		return -1;
	}
	qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
	qemu_plugin_register_atexit_cb(id, write_counts, NULL);
	return 0;
}
