/* tests/test_bench_options.c — ringfetch-bench's option parser: defaults, lists, limits, and a clear
 * one-line reason for everything it refuses. */
#include "options.h"

#include <criterion/criterion.h>
#include <string.h>

static int parse(rfb_opts *o, char *err, const char *a1, const char *a2, const char *a3, const char *a4)
{
	char *argv[6] = {"ringfetch-bench", (char *)a1, (char *)a2, (char *)a3, (char *)a4, NULL};
	int argc = 1;
	while (argc < 5 && argv[argc])
		argc++;
	return rfb_parse(argc, argv, o, err, 256);
}

Test(bench_options, defaults_are_the_make_run_sweep)
{
	rfb_opts o;
	char err[256] = "";
	cr_assert_eq(parse(&o, err, NULL, NULL, NULL, NULL), 0, "%s", err);
	cr_assert_eq(o.nbackends, 1);
	cr_assert_str_eq(o.backends[0], "auto");
	cr_assert_eq(o.ndepths, 5);
	cr_assert_eq(o.depths[0], 1);
	cr_assert_eq(o.depths[4], 8);
	cr_assert_eq(o.nsizes, 4);
	cr_assert_eq(o.sizes[0], 64u << 10);
	cr_assert_eq(o.sizes[3], 4u << 20);
	cr_assert_eq(o.compute, RFB_SUM);
	cr_assert_eq(o.baselines, RFB_BASE_SEQUENTIAL | RFB_BASE_HAND | RFB_BASE_STARPU);
}

Test(bench_options, lists_and_models)
{
	rfb_opts o;
	char err[256] = "";
	cr_assert_eq(parse(&o, err, "--depth", "1,2,16", "--size", "1K,1.5M,4"), 0, "%s", err);
	cr_assert_eq(o.ndepths, 3);
	cr_assert_eq(o.depths[2], 16);
	cr_assert_eq(o.nsizes, 3);
	cr_assert_eq(o.sizes[0], 1024);
	cr_assert_eq(o.sizes[1], 1536u * 1024);
	cr_assert_eq(o.sizes[2], 4);
	cr_assert_eq(parse(&o, err, "--compute", "spin:250", "--jitter", "0.5"), 0, "%s", err);
	cr_assert_eq(o.compute, RFB_SPIN);
	cr_assert_float_eq(o.compute_arg, 250, 1e-9);
	cr_assert_float_eq(o.jitter, 0.5, 1e-9);
	cr_assert_eq(parse(&o, err, "--compute", "dsum", NULL, NULL), 0, "%s", err);
	cr_assert_eq(o.compute, RFB_DSUM);
	cr_assert_str_eq(rfb_compute_name(o.compute), "dsum");
	cr_assert_eq(parse(&o, err, "--compute", "ratio:1.5", "--baselines", "none"), 0, "%s", err);
	cr_assert_eq(o.compute, RFB_RATIO);
	cr_assert_eq(o.baselines, 0);
	cr_assert_eq(parse(&o, err, "--backend", "cpu,threads", "--copy-queues", "2"), 2, "depth 1 with 2 queues");
	cr_assert_eq(parse(&o, err, "--help", NULL, NULL, NULL), 1);
}

Test(bench_options, refusals_say_why)
{
	static const char *const bad[][2] = {
		{"--depth", "0"},       {"--depth", "1025"},     {"--depth", "2,,3"},     {"--depth", ",2"},
		{"--depth", "2,"},      {"--depth", "x"},        {"--depth", "-1"},       {"--size", "0"},
		{"--size", "6"},        {"--size", "2G"},        {"--size", "1K5"},       {"--size", ""},
		{"--backend", "gpu"},   {"--backend", "cpu,"},   {"--compute", "spin"},   {"--compute", "ratio:-1"},
		{"--compute", "fast"},  {"--compute", "dsum:1"},  {"--jitter", "1.5"},     {"--jitter", "nan"},     {"--reps", "0"},
		{"--blocks", "0"},      {"--seed", "-3"},        {"--baselines", "mpi"},  {"--bogus", "1"},
		{"--depth", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		rfb_opts o;
		char err[256] = "";
		cr_assert_eq(parse(&o, err, bad[i][0], bad[i][1], NULL, NULL), 2, "%s %s accepted", bad[i][0], bad[i][1]);
		const char *named = strcmp(bad[i][0], "--bogus") ? bad[i][0] : "unknown option";
		cr_assert_neq(strstr(err, named), NULL, "%s %s: message \"%s\" does not name the option", bad[i][0],
			      bad[i][1], err);
	}
	rfb_opts o;
	char err[256] = "";
	cr_assert_eq(parse(&o, err, "--reps", NULL, NULL, NULL), 2);
	cr_assert_neq(strstr(err, "needs a value"), NULL, "%s", err);
}

Test(bench_options, sizes)
{
	cr_assert_eq(rfb_parse_size("64K"), 65536);
	cr_assert_eq(rfb_parse_size("1G"), (size_t)1 << 30);
	cr_assert_eq(rfb_parse_size("1.0001G"), 0);
	cr_assert_eq(rfb_parse_size("k"), 0);
	cr_assert_eq(rfb_parse_size("-4"), 0);
}
