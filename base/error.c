/* base/error.c — the error table (generated from RF_ERROR_MAP) and the thread-local detail. */
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Holds the longest detail composed (two node descriptions plus a CUDA error string). */
static _Thread_local char rf__detail[512];

const char *rf_strerror(int err)
{
	switch (err) {
	case RF_OK:
		return "success";
#define RF__XX_TEXT(name, value, text)                                                                     \
	case RF_##name:                                                                                    \
		return text;
		RF_ERROR_MAP(RF__XX_TEXT)
#undef RF__XX_TEXT
	default:
		return "unknown error";
	}
}

const char *rf_err_name(int err)
{
	switch (err) {
	case RF_OK:
		return "RF_OK";
#define RF__XX_NAME(name, value, text)                                                                     \
	case RF_##name:                                                                                    \
		return "RF_" #name;
		RF_ERROR_MAP(RF__XX_NAME)
#undef RF__XX_NAME
	default:
		return "RF_UNKNOWN";
	}
}

const char *rf_errmsg(void)
{
	return rf__detail;
}

int rf__err(int err, const char *fmt, ...)
{
	/* Format into a scratch buffer first: callers may pass rf__errmsg_peek() as an argument. */
	char tmp[sizeof rf__detail];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	memcpy(rf__detail, tmp, sizeof tmp);
	return err;
}

unsigned rf_version(void)
{
	return RF_VERSION_HEX;
}

#define RF__STR2(x) #x
#define RF__STR(x) RF__STR2(x)
const char *rf_version_string(void)
{
	return RF__STR(RF_VERSION_MAJOR) "." RF__STR(RF_VERSION_MINOR) "." RF__STR(RF_VERSION_PATCH);
}
