/*
 * tests/test_args.c — the option-table parser of every subcommand (cmd/args.h): each kind parses
 * its value whole, --name value and --name=value agree, defaults survive when an option is absent,
 * and every kind of bad input is refused with exit code 2 and one line that names the option.
 * --help prints from the table (with defaults) and assigns nothing.
 */
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cmd/args.h"
#include "core/check.h"

/* The options every test parses against, reset to their defaults by reset(). */
static int g_n, g_flag;
static long long g_big;
static unsigned long long g_seed;
static double g_x;
static size_t g_bytes;
static const char *g_s;

static void reset(void) {
    g_n = 3;
    g_flag = 0;
    g_big = -1;
    g_seed = 1337;
    g_x = 0.5;
    g_bytes = 1 << 20;
    g_s = "dflt";
}

static const args_opt OPTS[] = {
    {"n", KEYTAB_INT, &g_n, 1, 10, "N", "an int in [1, 10]", NULL},
    {"flag", KEYTAB_FLAG, &g_flag, 0, 0, NULL, "a flag", NULL},
    {"big", KEYTAB_I64, &g_big, -1, 1e15, "N", "a 64-bit int", ""},
    {"seed", KEYTAB_U64, &g_seed, 0, 1.8e19, "S", "a seed", NULL},
    {"x", KEYTAB_DOUBLE, &g_x, 0, INFINITY, "X", "a double >= 0", NULL},
    {"max-body", KEYTAB_BYTES, &g_bytes, 64, 1 << 30, "BYTES", "bytes, K/M suffix", NULL},
    {"s", KEYTAB_STRING, &g_s, 0, 0, "TEXT", "a string\nover two lines", NULL},
    {0},
};

/* Options outside the table: keys "k1" and "k2" exist; received in order. */
static char g_other[256];
static int known(const char *name) { return !strcmp(name, "k1") || !strcmp(name, "k2"); }
static void other(void *ctx, const char *name, const char *value) {
    (void)ctx;
    size_t n = strlen(g_other);
    snprintf(g_other + n, sizeof(g_other) - n, "%s=%s;", name, value);
}

static const args_spec SPEC = {.cmd = "demo", .synopsis = "usage: minitrain demo [options]",
                               .about = "A test command.", .opts = OPTS};

/* Run args_parse on a NULL-terminated word list with stdout and stderr captured. */
static char g_out[8192], g_err[4096];
static int parse_words(const args_spec *spec, int *rest, ...) {
    char *argv[32];
    int argc = 0;
    argv[argc++] = "demo";
    va_list ap;
    va_start(ap, rest);
    for (char *w; (w = va_arg(ap, char *)) != NULL;) argv[argc++] = w;
    va_end(ap);
    argv[argc] = NULL;
    char outp[] = "/tmp/test_args_out_XXXXXX", errp[] = "/tmp/test_args_err_XXXXXX";
    int fo = mkstemp(outp), fe = mkstemp(errp);
    assert_true(fo >= 0 && fe >= 0);
    fflush(stdout);
    fflush(stderr);
    int so = dup(1), se = dup(2);
    dup2(fo, 1);
    dup2(fe, 2);
    int rc = args_parse(spec, argc, argv, rest);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so);
    close(se);
    ssize_t a = pread(fo, g_out, sizeof(g_out) - 1, 0), b = pread(fe, g_err, sizeof(g_err) - 1, 0);
    g_out[a > 0 ? a : 0] = 0;
    g_err[b > 0 ? b : 0] = 0;
    close(fo);
    close(fe);
    unlink(outp);
    unlink(errp);
    return rc;
}
#define PARSE(...) parse_words(&SPEC, NULL, __VA_ARGS__, NULL)

static void test_every_kind_both_spellings(void **state) {
    (void)state;
    reset();
    assert_int_equal(PARSE("--n", "7", "--flag", "--big=-1", "--seed", "10000000000000000000",
                           "--x=2.25", "--max-body", "4K", "--s", "hello world"),
                     ARGS_CONTINUE);
    assert_int_equal(g_n, 7);
    assert_int_equal(g_flag, 1);
    assert_true(g_big == -1);
    assert_true(g_seed == 10000000000000000000ull);
    assert_true(g_x == 2.25);
    assert_int_equal(g_bytes, 4096);
    assert_string_equal(g_s, "hello world");
    reset();
    assert_int_equal(PARSE("--n=9", "--big", "123456789012", "--x", "inf", "--max-body=2m",
                           "--s="),
                     ARGS_CONTINUE);
    assert_int_equal(g_n, 9);
    assert_true(g_big == 123456789012LL);
    assert_true(isinf(g_x));
    assert_int_equal(g_bytes, 2 << 20);
    /* core/keytab.c's byte counts: G as well as K and M, and a whole count in any spelling */
    assert_int_equal(PARSE("--max-body", "1G"), ARGS_CONTINUE);
    assert_int_equal(g_bytes, (size_t)1 << 30);
    assert_int_equal(PARSE("--max-body", "1.5K", "--n", "1e1"), ARGS_CONTINUE);
    assert_int_equal(g_bytes, 1536);
    assert_int_equal(g_n, 10);
    assert_string_equal(g_s, "");
    assert_string_equal(g_err, "");
}

static void test_defaults_survive(void **state) {
    (void)state;
    reset();
    assert_int_equal(PARSE("--flag"), ARGS_CONTINUE);
    assert_int_equal(g_n, 3);
    assert_true(g_x == 0.5);
    assert_string_equal(g_s, "dflt");
    /* a value that looks like an option is still the value */
    assert_int_equal(PARSE("--s", "--help"), ARGS_CONTINUE);
    assert_string_equal(g_s, "--help");
}

/* Each bad input: exit 2, one line, naming the option (or the word). */
static void expect_refused(const char *needle, int rc) {
    assert_int_equal(rc, MT_EXIT_USAGE);
    assert_non_null(strstr(g_err, "minitrain: error: "));
    assert_non_null(strstr(g_err, needle));
    assert_int_equal(strchr(g_err, '\n') - g_err, (long)strlen(g_err) - 1); /* one line */
}

static void test_refusals(void **state) {
    (void)state;
    reset();
    expect_refused("'--bogus'", PARSE("--bogus", "1"));
    expect_refused("--n must be in [1, 10], got '0'", PARSE("--n", "0"));
    expect_refused("--n must be in [1, 10], got '11'", PARSE("--n=11"));
    expect_refused("--n needs an integer, got '1.5'", PARSE("--n", "1.5"));
    expect_refused("--n needs an integer, got '5x'", PARSE("--n", "5x"));
    expect_refused("--n needs an integer, got ''", PARSE("--n="));
    expect_refused("--n needs a value", PARSE("--n"));
    expect_refused("--x needs a number, got 'nan'", PARSE("--x", "nan"));
    expect_refused("--x needs a number, got 'hot'", PARSE("--x", "hot"));
    expect_refused("--x must be in [0, inf], got '-1'", PARSE("--x", "-1"));
    expect_refused("--seed needs a non-negative integer, got '-1'", PARSE("--seed", "-1"));
    expect_refused("--big must be in", PARSE("--big", "-2"));
    expect_refused("--max-body needs a byte count", PARSE("--max-body", "1T"));
    expect_refused("--max-body needs a byte count", PARSE("--max-body", "1.0001K"));
    expect_refused("--max-body must be in [64, 1073741824], got '2G'", PARSE("--max-body", "2G"));
    expect_refused("--max-body needs a byte count", PARSE("--max-body", "-5"));
    expect_refused("--max-body must be in [64, 1073741824], got '8'", PARSE("--max-body", "8"));
    expect_refused("--flag takes no value, got '1'", PARSE("--flag=1"));
    expect_refused("unexpected argument 'stray'", PARSE("stray"));
    expect_refused("unexpected argument '--'", PARSE("--"));
    expect_refused("unexpected argument '-n'", PARSE("-n", "3"));
    assert_int_equal(g_n, 3); /* a refused value is not stored */
}

static void test_help_from_the_table(void **state) {
    (void)state;
    reset();
    assert_int_equal(PARSE("--n", "5", "--help"), MT_EXIT_OK);
    assert_int_equal(g_n, 3); /* help wins before anything is assigned */
    assert_non_null(strstr(g_out, "usage: minitrain demo [options]"));
    assert_non_null(strstr(g_out, "A test command."));
    assert_non_null(strstr(g_out, "--n N"));
    assert_non_null(strstr(g_out, "an int in [1, 10] (default 3)"));
    assert_non_null(strstr(g_out, "--max-body BYTES"));
    assert_non_null(strstr(g_out, "(default 1M)"));
    assert_non_null(strstr(g_out, "(default dflt)"));
    assert_non_null(strstr(g_out, "\n                        over two lines"));
    assert_null(strstr(g_out, "a 64-bit int (default")); /* def "" hides it */
    assert_non_null(strstr(g_out, "-h, --help"));
    assert_int_equal(PARSE("-h"), MT_EXIT_OK);
    assert_int_equal(PARSE("--bogus", "-h"), MT_EXIT_OK); /* help anywhere */
}

static void test_dashdash_and_other_keys(void **state) {
    (void)state;
    reset();
    args_spec s = SPEC;
    s.dashdash = 1;
    int rest = -1;
    assert_int_equal(parse_words(&s, &rest, "--n", "4", "--", "prog", "--help", NULL),
                     ARGS_CONTINUE);
    assert_int_equal(g_n, 4);
    assert_int_equal(rest, 4); /* argv[4] = "prog": --help after -- belongs to the launch */
    assert_int_equal(parse_words(&s, &rest, "--n", "4", NULL), ARGS_CONTINUE);
    assert_int_equal(rest, 3); /* argc: no launch command */

    s = SPEC;
    s.known = known;
    s.other = other;
    g_other[0] = 0;
    assert_int_equal(parse_words(&s, NULL, "--k2", "b", "--n", "2", "--k1=a", "--k2=", NULL),
                     ARGS_CONTINUE);
    assert_string_equal(g_other, "k2=b;k1=a;k2=;");
    assert_int_equal(g_n, 2);
    expect_refused("'--k3'", parse_words(&s, NULL, "--k3", "x", NULL));
    expect_refused("'--k1' needs a value", parse_words(&s, NULL, "--k1", NULL));
}

static void test_args_double(void **state) {
    (void)state;
    double v = -7;
    assert_int_equal(args_double("backoff MIN", "1.5", 0, 10, &v), ARGS_CONTINUE);
    assert_true(v == 1.5);
    fflush(stderr);
    int se = dup(2), dn = open("/dev/null", O_WRONLY);
    dup2(dn, 2);
    int r1 = args_double("backoff MIN", "11", 0, 10, &v);
    int r2 = args_double("backoff MIN", "1:", 0, 10, &v);
    fflush(stderr);
    dup2(se, 2);
    close(se);
    close(dn);
    assert_int_equal(r1, MT_EXIT_USAGE);
    assert_int_equal(r2, MT_EXIT_USAGE);
    assert_true(v == 1.5);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_kind_both_spellings),
        cmocka_unit_test(test_defaults_survive),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_help_from_the_table),
        cmocka_unit_test(test_dashdash_and_other_keys),
        cmocka_unit_test(test_args_double),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
