/* runtime/config.c — configuration values from the environment, checked strictly: a deployment that
 * sets RINGFETCH_DEPTH=8x wants to hear about it, not to run at some other depth. */
#include "runtime/config.h"
#include "runtime/error.h"

#include <stdlib.h>
#include <string.h>

#define RF__DEFAULT_DEPTH 2u

int rf__parse_depth(const char *s, unsigned *out)
{
	unsigned v = 0;
	if (s == NULL || *s == '\0')
		return -1;
	for (const char *c = s; *c; c++) {
		if (*c < '0' || *c > '9')
			return -1;
		v = v * 10 + (unsigned)(*c - '0');
		if (v > RF_MAX_DEPTH)
			return -1;
	}
	if (v == 0)
		return -1;
	*out = v;
	return 0;
}

const char *rf__parse_backend(const char *s)
{
	static const char *const names[] = {"cpu", "threads", "cuda", "auto"};
	for (size_t i = 0; s != NULL && i < sizeof names / sizeof names[0]; i++)
		if (strcmp(s, names[i]) == 0)
			return names[i];
	return NULL;
}

int rf__config_depth(unsigned explicit_depth, unsigned *out)
{
	if (explicit_depth != 0) {
		*out = explicit_depth;
		return RF_OK;
	}
	const char *env = getenv("RINGFETCH_DEPTH");
	if (env == NULL) {
		*out = RF__DEFAULT_DEPTH;
		return RF_OK;
	}
	if (rf__parse_depth(env, out) != 0)
		return rf__err(RF_ECONFIG, "RINGFETCH_DEPTH=\"%.64s\" is not a depth in 1..%u", env, RF_MAX_DEPTH);
	return RF_OK;
}

int rf__config_backend(const char *explicit_backend, const char **out)
{
	if (explicit_backend != NULL) {
		*out = explicit_backend;
		return RF_OK;
	}
	const char *env = getenv("RINGFETCH_BACKEND");
	if (env == NULL) {
		*out = "auto";
		return RF_OK;
	}
	const char *name = rf__parse_backend(env);
	if (name == NULL)
		return rf__err(RF_ECONFIG, "RINGFETCH_BACKEND=\"%.64s\" is not one of cpu, threads, cuda, auto", env);
	*out = name;
	return RF_OK;
}
