/* base/error.c — the error table (generated from RF_ERROR_MAP) and the thread-local detail. */
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Holds the longest detail composed (two node descriptions plus a CUDA error string). */
static _Thread_local char rf__detail[512];

/* A code's sentence, or with `name` its name: one switch generated from RF_ERROR_MAP. */
static const char *rf__error_word(int err, int name)
{
	switch (err) {
	case RF_OK:
		return name ? "RF_OK" : "success";
#define RF__XX_WORD(code, value, text)                                                                     \
	case RF_##code:                                                                                    \
		return name ? "RF_" #code : text;
		RF_ERROR_MAP(RF__XX_WORD)
#undef RF__XX_WORD
	default:
		return name ? "RF_UNKNOWN" : "unknown error";
	}
}

const char *rf_strerror(int err)
{
	return rf__error_word(err, 0);
}

const char *rf_err_name(int err)
{
	return rf__error_word(err, 1);
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
