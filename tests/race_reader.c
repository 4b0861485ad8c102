/*
 * tests/race_reader.c — the file reader (io/reader.h) with threads around it, a plain program so that it
 * also runs under ThreadSanitizer: readers created on the main thread and used on workers (as a copy
 * lane uses the reader its pipeline created), two of them reading one file at once, and a third thread
 * ringing both doorbells at random moments while the workers start, poll and wait. Every copy's bytes
 * are checked; a wait must come back after each ring even with no read in flight.
 * Usage: race_reader [--iterations N] [--seed S]. Exit 0 when every check passed.
 */
#define _GNU_SOURCE
#include "io/file.h"
#include "io/reader.h"
#include "ringfetch.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define FSIZE ((size_t)(8u << 20) + 777)
#define SLOTS 6u
#define SLOT ((size_t)(320u << 10))

static unsigned char pat(uint64_t i)
{
	return (unsigned char)(i * 131 + (i >> 9) * 7);
}

static unsigned long long rnd(unsigned long long *s, unsigned long long n)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return n ? (*s >> 33) % n : 0;
}

typedef struct lane {
	rf__reader *r;
	rf_file *f;
	int bell;
	unsigned iterations;
	unsigned long long seed;
	unsigned char *slots;
	int failed;
} lane;

static atomic_int stop;

static void *lane_main(void *arg)
{
	lane *L = arg;
	uint64_t off[SLOTS];
	size_t n[SLOTS];
	unsigned char busy[SLOTS] = {0};
	unsigned started = 0, done = 0;
	while (done < L->iterations && !L->failed) {
		for (unsigned s = 0; s < SLOTS && started < L->iterations; s++) {
			if (busy[s] || rnd(&L->seed, 3) == 0)
				continue;
			n[s] = 1 + (size_t)rnd(&L->seed, SLOT - 8192);
			off[s] = rnd(&L->seed, FSIZE - n[s] + 1);
			rf__fsrc src = {L->f, off[s]};
			unsigned flags = rnd(&L->seed, 2) ? RF__READER_SHIFT_OK : 0;
			if (rf__reader_start(L->r, &src, n[s], L->slots + s * SLOT, SLOT, flags, s) != RF_OK) {
				fprintf(stderr, "start: %s\n", rf_errmsg());
				L->failed = 1;
				break;
			}
			busy[s] = 1;
			started++;
		}
		uint64_t tag;
		int rc;
		size_t shift;
		if (rf__reader_poll(L->r, &tag, &rc, &shift) == 0) {
			rf__reader_wait(L->r); /* reads in flight, or the bell */
			continue;
		}
		if (rc != RF_OK || tag >= SLOTS || !busy[tag]) {
			fprintf(stderr, "copy %llu: rc %d: %s\n", (unsigned long long)tag, rc, rf__reader_error(L->r));
			L->failed = 1;
			break;
		}
		const unsigned char *d = L->slots + tag * SLOT + shift;
		for (size_t i = 0; i < n[tag]; i++)
			if (d[i] != pat(off[tag] + i)) {
				fprintf(stderr, "copy of %zu bytes at %llu: byte %zu wrong\n", n[tag], (unsigned long long)off[tag], i);
				L->failed = 1;
				break;
			}
		busy[tag] = 0;
		done++;
	}
	/* Nothing in flight now: a wait returns only for the bell, which the ringer keeps ringing. */
	for (int k = 0; k < 5 && !L->failed; k++)
		rf__reader_wait(L->r);
	return NULL;
}

static void *ringer_main(void *arg)
{
	lane *L = arg;
	unsigned long long s = 12345;
	while (!atomic_load(&stop)) {
		struct timespec ts = {0, (long)rnd(&s, 2000000)};
		nanosleep(&ts, NULL);
		uint64_t one = 1;
		for (int i = 0; i < 2; i++)
			if (write(L[i].bell, &one, sizeof one) != (ssize_t)sizeof one)
				return NULL;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	unsigned iterations = 400;
	unsigned long long seed = 1;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--iterations"))
			iterations = (unsigned)strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--seed"))
			seed = strtoull(argv[i + 1], NULL, 10);
	}
	char path[] = "rf_race_reader_XXXXXX";
	int fd = mkstemp(path);
	unsigned char *buf = malloc(FSIZE);
	for (size_t i = 0; i < FSIZE; i++)
		buf[i] = pat(i);
	if (fd < 0 || write(fd, buf, FSIZE) != (ssize_t)FSIZE) {
		perror("race_reader: file");
		return 1;
	}
	free(buf);
	close(fd);
	lane L[2];
	int rc = 0;
	for (int i = 0; i < 2; i++) {
		L[i] = (lane){.iterations = iterations, .seed = seed * 7 + (unsigned long long)i};
		L[i].bell = eventfd(0, EFD_CLOEXEC | (i ? EFD_NONBLOCK : 0));
		L[i].slots = aligned_alloc(4096, SLOTS * SLOT);
		if (rf_file_open(path, i ? RF_FILE_BUFFERED : 0, &L[i].f) != RF_OK ||
		    rf__reader_create(SLOTS, L[i].bell, &L[i].r) != RF_OK ||
		    rf__reader_register(L[i].r, L[i].slots, SLOTS * SLOT) != RF_OK) {
			fprintf(stderr, "race_reader: set-up: %s\n", rf_errmsg());
			return 1;
		}
	}
	pthread_t t[2], ringer;
	pthread_create(&ringer, NULL, ringer_main, L);
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, lane_main, &L[i]);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	atomic_store(&stop, 1);
	pthread_join(ringer, NULL);
	char d[512];
	for (int i = 0; i < 2; i++) {
		rc |= L[i].failed;
		rf__reader_describe(L[i].r, d, sizeof d);
		printf("reader %d: %s\n", i, d);
		rf__reader_destroy(L[i].r);
		rf_file_close(L[i].f);
		close(L[i].bell);
		free(L[i].slots);
	}
	unlink(path);
	printf("%s\n", rc ? "FAILED" : "ok: every copy checked");
	return rc;
}
