/* bench/machine.h — the machine a benchmark ran on, as one JSON object for its results file. */
#ifndef RFB_MACHINE_H
#define RFB_MACHINE_H

#include <stddef.h>

/* {"cpu": ..., "cores": ..., "kernel": ..., "date": ..., "ringfetch": ...<extra>} into buf: extra is
 * appended inside the object as given (e.g. ", \"starpu_ncpu\": 3"; "" for none). */
void rfb_machine_json(char *buf, size_t cap, const char *extra);

#endif
