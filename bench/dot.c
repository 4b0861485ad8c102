/* bench/dot.c — print the job graph of a ring as Graphviz DOT, and its lowered program.
 *
 * usage: ringfetch-dot NBLOCKS DEPTH [COPY_QUEUES] [--program]
 *   ringfetch-dot 5 3 | dot -Tsvg > ring.svg
 */
#include "options.h"

#include <ringfetch.h>

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	unsigned long long n, depth, kq = 1;
	int program = argc > 1 && !strcmp(argv[argc - 1], "--program");
	int nargs = argc - program;
	if (nargs < 3 || nargs > 4 || rfb_parse_count(argv[1], 0, SIZE_MAX, &n) != 0 ||
	    rfb_parse_count(argv[2], 0, UINT_MAX, &depth) != 0 ||
	    (nargs == 4 && rfb_parse_count(argv[3], 0, UINT_MAX, &kq) != 0)) {
		fprintf(stderr, "usage: %s NBLOCKS DEPTH [COPY_QUEUES] [--program]\n", argv[0]);
		return 2;
	}
	rf_graph *g;
	int rc = rf_graph_ring((size_t)n, (unsigned)depth, (unsigned)kq, &g);
	if (rc != RF_OK) {
		fprintf(stderr, "%s: %s: %s\n", argv[0], rf_strerror(rc), rf_errmsg());
		return 2;
	}
	if (program) {
		rf_program *p;
		if ((rc = rf_graph_lower(g, &p)) == RF_OK) {
			rc = rf_program_print(p, stdout);
			rf_program_destroy(p);
		}
	} else {
		size_t len;
		rf_graph_dot(g, NULL, 0, &len);
		char *buf = malloc(len);
		if (buf == NULL || (rc = rf_graph_dot(g, buf, len, &len)) != RF_OK)
			rc = buf ? rc : RF_ENOMEM;
		else
			fputs(buf, stdout);
		free(buf);
	}
	rf_graph_destroy(g);
	if (rc != RF_OK)
		fprintf(stderr, "%s: %s: %s\n", argv[0], rf_strerror(rc), rf_errmsg());
	return rc == RF_OK ? 0 : 1;
}
