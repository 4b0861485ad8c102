/* bench/machine.c — the machine description every benchmark's JSON starts with. */
#include "machine.h"

#include <ringfetch.h>

#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

void rfb_machine_json(char *buf, size_t cap, const char *extra)
{
	char cpu[128] = "unknown", line[256];
	FILE *f = fopen("/proc/cpuinfo", "r");
	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
			snprintf(cpu, sizeof cpu, "%s", strchr(line, ':') + 2);
			cpu[strcspn(cpu, "\n\"\\")] = '\0';
			break;
		}
	if (f)
		fclose(f);
	struct utsname u;
	uname(&u);
	time_t now = time(NULL);
	char date[32];
	strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
	snprintf(buf, cap, "{\"cpu\": \"%s\", \"cores\": %ld, \"kernel\": \"%s %s\", \"date\": \"%s\", "
			   "\"ringfetch\": \"%s\"%s}",
		 cpu, sysconf(_SC_NPROCESSORS_ONLN), u.sysname, u.release, date, rf_version_string(), extra);
}
