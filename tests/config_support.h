/* tests/config_support.h — the depth and backend a pipeline takes from the configuration, resolved as
 * rf_pipeline_create resolves them (runtime/pipeline.c): the explicit value (non-zero, non-NULL) wins,
 * else RINGFETCH_DEPTH / RINGFETCH_BACKEND (file, environment), else 2 / "auto". Depth 0 in *out means
 * auto. RF_ECONFIG names the malformed variable. White-box (static library). */
#ifndef RF_TESTS_CONFIG_SUPPORT_H
#define RF_TESTS_CONFIG_SUPPORT_H

#include "ringfetch.h"
#include "runtime/config.h"

static inline int cfg_depth(unsigned explicit_depth, unsigned *out)
{
	if (explicit_depth != 0) {
		*out = explicit_depth;
		return RF_OK;
	}
	rf__config c;
	int rc = rf__config_load(&c, 1, 0, 0, 0);
	if (rc == RF_OK)
		*out = c.depth_auto ? 0 : c.depth ? c.depth : 2;
	return rc;
}

static inline int cfg_backend(const char *explicit_backend, const char **out)
{
	rf__config c;
	const char *from;
	int rc = explicit_backend != NULL ? RF_OK : rf__config_load(&c, 0, 1, 0, 0);
	if (rc == RF_OK)
		*out = explicit_backend != NULL ? explicit_backend : rf__config_backend(&c, NULL, &from);
	return rc;
}

#endif
