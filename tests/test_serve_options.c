/* tests/test_serve_options.c — ringfetch-serve-bench's option parser: the defaults are the serving stack's model
 * (what `make run` measures), lists and limits are checked, and the direct line always runs. */
#include "serve.h"

#include <criterion/criterion.h>
#include <string.h>

static int parse(rfs_opts *o, char *err, const char *a1, const char *a2, const char *a3, const char *a4)
{
	char *argv[6] = {"ringfetch-serve-bench", (char *)a1, (char *)a2, (char *)a3, (char *)a4, NULL};
	int argc = 1;
	while (argc < 5 && argv[argc])
		argc++;
	return rfs_parse(argc, argv, o, err, 256);
}

Test(serve_options, defaults_are_issue_12s_model)
{
	rfs_opts o;
	char err[256] = "";
	cr_assert_eq(parse(&o, err, NULL, NULL, NULL, NULL), 0, "%s", err);
	cr_assert_eq(o.layers, 32);
	cr_assert_eq(o.experts, 8);
	cr_assert_eq(o.expert_bytes, 512u << 10);
	cr_assert_eq(o.topk, 2);
	cr_assert_eq(o.batch, 1);
	cr_assert_float_eq(o.compute_us, 40, 1e-9);
	cr_assert_eq(o.slots, 128);
	cr_assert_eq(o.depth, 4);
	cr_assert_eq(o.hint_next, 2);
	cr_assert_eq(o.nbackends, 1);
	cr_assert_str_eq(o.backends[0], "threads");
	cr_assert_eq(o.contestants, RFS_ALL_CONTESTANTS);
	cr_assert_null(o.wait);
}

Test(serve_options, lists)
{
	rfs_opts o;
	char err[256] = "";
	cr_assert_eq(parse(&o, err, "--backend", "cpu,threads,cpu", "--contestants", "spin,keyed-hints"), 0, "%s", err);
	cr_assert_eq(o.nbackends, 2, "a backend named twice is measured once");
	cr_assert_eq(o.contestants, (1u << RFS_SPIN) | (1u << RFS_KEYED_HINTS) | (1u << RFS_DIRECT),
		     "direct is always added: it is the reference");
	cr_assert_eq(parse(&o, err, "--expert-size", "1.5M", "--wait", "spin:50"), 0, "%s", err);
	cr_assert_eq(o.expert_bytes, 3u << 19);
	cr_assert_str_eq(o.wait, "spin:50");
}

Test(serve_options, refusals_say_why)
{
	static const char *const bad[][2] = {
		{"--topk", "9"},          {"--hint-next", "9"},     {"--experts", "257"},   {"--layers", "0"},
		{"--expert-size", "100"}, {"--expert-size", "65M"}, {"--backend", "cuda"},  {"--backend", "cpu,"},
		{"--contestants", "x"},   {"--skew", "-0.5"},       {"--compute-us", "1e9"}, {"--wait", "spin:"},
		{"--wait", "yield"},      {"--slots", "1025"},      {"--batch", "0"},       {"--bogus", "1"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		rfs_opts o;
		char err[256] = "";
		cr_expect_eq(parse(&o, err, bad[i][0], bad[i][1], NULL, NULL), 2, "%s %s accepted", bad[i][0], bad[i][1]);
		cr_expect_neq(err[0], '\0', "%s %s: no reason given", bad[i][0], bad[i][1]);
	}
	rfs_opts o;
	char err[256] = "";
	cr_assert_eq(parse(&o, err, "--steps", NULL, NULL, NULL), 2);
	cr_assert(strstr(err, "needs a value") != NULL, "%s", err);
}
