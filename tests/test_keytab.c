/*
 * tests/test_keytab.c — the one key-table engine (core/keytab.h) over a struct: defaults parsed
 * from the rows' text, every type read whole, '-' and '_' alike, ranges checked before the value
 * is converted (so a huge number is named out of range, not wrapped), 64-bit integers exact, and
 * both voices of every refusal; help rows printed from the same table.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/keytab.h"

typedef struct {
    int n, on;
    long long big;
    unsigned long long seed;
    float f;
    double d;
    size_t bytes;
    char name[8];
    int mode;
} opts;

static const keytab_key T[] = {
    {"n_layer", KEYTAB_INT, KEYTAB_OFF(opts, n), 1, 1024, NULL, "blocks", "4"},
    {"on", KEYTAB_BOOL, KEYTAB_OFF(opts, on), 0, 0, NULL, "switch", "yes"},
    {"big", KEYTAB_I64, KEYTAB_OFF(opts, big), -1e18, 1e18, NULL, "a large one", "-5"},
    {"seed", KEYTAB_U64, KEYTAB_OFF(opts, seed), 0, 1.8446744073709552e19, NULL, "seed", "7"},
    {"lr", KEYTAB_FLOAT, KEYTAB_OFF(opts, f), 0, 10, NULL, "rate", "1e-3"},
    {"timeout_s", KEYTAB_DOUBLE, KEYTAB_OFF(opts, d), 0, INFINITY, NULL, "wait", "2.5"},
    {"max_body", KEYTAB_BYTES, KEYTAB_OFF(opts, bytes), 64, 1 << 30, NULL, "bytes", "1M"},
    {"name", KEYTAB_CHARS, KEYTAB_OFF(opts, name), 0, 8, NULL, "a name", "abc"},
    {"mode", KEYTAB_WORD, KEYTAB_OFF(opts, mode), 1, 0, "fast|exact|both", "a word", "exact"},
    {NULL, 0, NULL, 0, 0, NULL, NULL, NULL},
};

static int set(opts *o, const char *key, const char *v, keytab_voice voice, char *err) {
    const keytab_key *k = keytab_find(T, key, strlen(key));
    assert_non_null(k);
    err[0] = 0;
    return keytab_parse(k, o, v, voice, err, 256);
}

static void test_defaults_and_types(void **state) {
    (void)state;
    opts o;
    char err[256];
    memset(&o, 0xAB, sizeof(o));
    assert_int_equal(keytab_defaults(T, &o, err, sizeof(err)), 0);
    assert_int_equal(o.n, 4);
    assert_int_equal(o.on, 1);
    assert_true(o.big == -5);
    assert_true(o.seed == 7);
    assert_true(o.f == 1e-3f);
    assert_true(o.d == 2.5);
    assert_int_equal(o.bytes, 1 << 20);
    assert_string_equal(o.name, "abc");
    assert_int_equal(o.mode, 2); /* lo + the index of "exact" */
    /* whole numbers in any spelling; dashes for underscores; trailing blanks */
    assert_int_equal(set(&o, "n-layer", "1e2", KEYTAB_KEY, err), 0);
    assert_int_equal(o.n, 100);
    assert_int_equal(set(&o, "n_layer", "12 ", KEYTAB_KEY, err), 0);
    assert_int_equal(o.n, 12);
    /* 64-bit values exact (a double would round 2^63 - 1 and 2^64 - 1) */
    assert_int_equal(set(&o, "big", "-999999999999999999", KEYTAB_KEY, err), 0);
    assert_true(o.big == -999999999999999999LL);
    assert_int_equal(set(&o, "seed", "18446744073709551615", KEYTAB_OPTION, err), 0);
    assert_true(o.seed == 18446744073709551615ULL);
    assert_int_equal(set(&o, "max-body", "1.5K", KEYTAB_KEY, err), 0);
    assert_int_equal(o.bytes, 1536);
    assert_int_equal(set(&o, "max_body", "1g", KEYTAB_KEY, err), 0);
    assert_int_equal(o.bytes, (size_t)1 << 30);
    assert_int_equal(set(&o, "timeout_s", "inf", KEYTAB_KEY, err), 0); /* hi is INFINITY */
    assert_true(isinf(o.d));
    assert_int_equal(set(&o, "on", "OFF", KEYTAB_KEY, err), 0);
    assert_int_equal(o.on, 0);
    assert_int_equal(set(&o, "name", "1234567", KEYTAB_KEY, err), 0);
    assert_string_equal(o.name, "1234567");
    assert_int_equal(set(&o, "mode", "both", KEYTAB_KEY, err), 0);
    assert_int_equal(o.mode, 3);
    assert_int_equal(set(&o, "mode", "fast", KEYTAB_KEY, err), 0);
    assert_int_equal(o.mode, 1);
    assert_null(keytab_find(T, "n_layerx", 8));
    assert_non_null(keytab_find(T, "n_layerx", 7)); /* a prefix of the text, by length */
}

static void test_refusals_both_voices(void **state) {
    (void)state;
    opts o;
    char err[256];
    keytab_defaults(T, &o, err, sizeof(err));
    static const struct {
        const char *key, *value, *as_key, *as_option;
    } cases[] = {
        {"n_layer", "1.5", "'n_layer' needs a whole number, got '1.5'",
         "--n_layer needs an integer, got '1.5'"},
        {"n_layer", "", "'n_layer' needs a whole number, got ''", "--n_layer needs an integer, got ''"},
        {"n_layer", "0", "'n_layer' = 0 is out of range [1, 1024]",
         "--n_layer must be in [1, 1024], got '0'"},
        /* out of range before conversion: 1e30 is not wrapped into an int */
        {"n_layer", "1e30", "'n_layer' = 1e30 is out of range [1, 1024]",
         "--n_layer must be in [1, 1024], got '1e30'"},
        {"seed", "-1", "'seed' needs a non-negative whole number, got '-1'",
         "--seed needs a non-negative integer, got '-1'"},
        {"lr", "nan", "'lr' needs a number, got 'nan'", "--lr needs a number, got 'nan'"},
        {"lr", "inf", "'lr' = inf is out of range [0, 10]", "--lr must be in [0, 10], got 'inf'"},
        {"max_body", "8", "'max_body' = 8 is out of range [64, 1073741824]",
         "--max_body must be in [64, 1073741824], got '8'"},
        {"max_body", "-5", "'max_body' needs a byte count like 1048576 or 1M, got '-5'",
         "--max_body needs a byte count like 1048576 or 1M, got '-5'"},
        {"max_body", "1T", "'max_body' needs a byte count like 1048576 or 1M, got '1T'",
         "--max_body needs a byte count like 1048576 or 1M, got '1T'"},
        {"on", "maybe", "'on' needs true or false, got 'maybe'",
         "--on needs true or false, got 'maybe'"},
        {"name", "12345678", "value of 'name' is too long (max 7 chars)",
         "--name is too long (max 7 chars)"},
        {"mode", "slow", "'mode' must be fast, exact or both, got 'slow'",
         "--mode must be fast, exact or both, got 'slow'"},
        {"mode", "fas", "'mode' must be fast, exact or both, got 'fas'",
         "--mode must be fast, exact or both, got 'fas'"},
        /* the user's bytes are shown escaped */
        {"n_layer", "\x1b[2J", "'n_layer' needs a whole number, got '\\x1b[2J'",
         "--n_layer needs an integer, got '\\x1b[2J'"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        opts before = o;
        assert_int_equal(set(&o, cases[i].key, cases[i].value, KEYTAB_KEY, err), -1);
        if (strcmp(err, cases[i].as_key)) fprintf(stderr, "case %zu: '%s'\n", i, err);
        assert_string_equal(err, cases[i].as_key);
        assert_int_equal(set(&o, cases[i].key, cases[i].value, KEYTAB_OPTION, err), -1);
        assert_string_equal(err, cases[i].as_option);
        assert_memory_equal(&before, &o, sizeof(o)); /* a refused value is not stored */
    }
}

static void test_help_rows(void **state) {
    (void)state;
    opts o;
    char err[256], *text = NULL;
    size_t len = 0;
    keytab_defaults(T, &o, err, sizeof(err));
    FILE *f = open_memstream(&text, &len);
    keytab_print_keys(f, T, &o);
    fclose(f);
    assert_non_null(strstr(text, "  n_layer        4          blocks\n"));
    assert_non_null(strstr(text, "  lr             0.001      rate\n"));
    assert_non_null(strstr(text, "  max_body       1M         bytes\n"));
    assert_non_null(strstr(text, "  name           \"abc\"      a name\n"));
    assert_non_null(strstr(text, "  mode           exact      a word\n"));
    free(text);
    f = open_memstream(&text, &len);
    keytab_print_options(f, T, &o, 24);
    fclose(f);
    /* underscores shown as dashes; def text wins over the value */
    assert_non_null(strstr(text, "  --n-layer N           blocks (default 4)\n"));
    assert_non_null(strstr(text, "  --lr X                rate (default 1e-3)\n"));
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_types),
        cmocka_unit_test(test_refusals_both_voices),
        cmocka_unit_test(test_help_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
