/* runtime/config.h — resolving configured values: explicit API value, else environment, else default. */
#ifndef RF_RUNTIME_CONFIG_H
#define RF_RUNTIME_CONFIG_H

#include <stddef.h>

/* Parse a depth: decimal digits only, 1 .. RF_MAX_DEPTH. Returns 0 on success, -1 if malformed. */
int rf__parse_depth(const char *s, unsigned *out);
/* Parse a backend name: one of cpu, threads, cuda, auto. Returns the static canonical name or NULL. */
const char *rf__parse_backend(const char *s);

/* depth: explicit (non-zero) wins; else RINGFETCH_DEPTH; else 2. RF_ECONFIG names the variable. */
int rf__config_depth(unsigned explicit_depth, unsigned *out);
/* backend: explicit (non-NULL) wins; else RINGFETCH_BACKEND; else "auto". */
int rf__config_backend(const char *explicit_backend, const char **out);

#endif
