/*
 * tests/test_ckpt_peer.c — cmocka tests of the peer-replicated tier 0's pieces (ckpt/peer.c):
 * node-name expansion of tier-0 roots, the buddy choice, and one committed step moved as bytes.
 *
 * Independent checks: the buddy map is checked against the rules written out here (another node
 * whenever there is one, another leaf whenever the node's ring has one, one copy per rank when
 * nodes are equal) over many random layouts, plus two maps worked out by hand; a packed step is
 * unpacked elsewhere and its files compared byte for byte with the originals, and copies damaged
 * here (a flipped byte, a cut) must be refused without leaving a committed step behind.
 */
#define _GNU_SOURCE /* memmem */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt.h"
#include "ckpt/peer.h"

#define TU_PREFIX "test_ckpt_peer"
#include "tests/testutil.h"

static void test_expand(void **state) {
    (void)state;
    char out[64], err[256];
    assert_int_equal(ckpt_peer_expand(out, sizeof(out), "/dev/shm/mt/$SLURMD_NODENAME", "n2", err,
                                      sizeof(err)), 1);
    assert_string_equal(out, "/dev/shm/mt/n2");
    assert_int_equal(ckpt_peer_expand(out, sizeof(out), "/x/${MINITRAIN_NODE}/y/%n", "a", err,
                                      sizeof(err)), 1);
    assert_string_equal(out, "/x/a/y/a");
    assert_int_equal(ckpt_peer_expand(out, sizeof(out), "/x/${SLURMD_NODENAME}z", "n1", err,
                                      sizeof(err)), 1);
    assert_string_equal(out, "/x/n1z");
    /* no node in it: the same path, "not per node"; %% is a literal % */
    assert_int_equal(ckpt_peer_expand(out, sizeof(out), "/dev/shm/100%%", "n1", err, sizeof(err)), 0);
    assert_string_equal(out, "/dev/shm/100%");
    assert_int_equal(ckpt_peer_expand(out, sizeof(out), "/tmp/$HOME", "n1", err, sizeof(err)), 0);
    assert_string_equal(out, "/tmp/$HOME");
    assert_int_equal(ckpt_peer_expand(out, sizeof(out), "/tmp/%d", "n1", err, sizeof(err)), -1);
    assert_non_null(strstr(err, "%d"));
    char tiny[8];
    assert_int_equal(ckpt_peer_expand(tiny, sizeof(tiny), "/a/%n", "longnode", err, sizeof(err)),
                     -1);
    assert_non_null(strstr(err, "too long"));
}

static void test_node_name(void **state) {
    (void)state;
    char n[CKPT_PEER_NODE_MAX];
    setenv("MINITRAIN_NODE", "fake7", 1);
    setenv("SLURMD_NODENAME", "slurm3", 1);
    ckpt_peer_node_name(n, sizeof(n));
    assert_string_equal(n, "fake7");
    unsetenv("MINITRAIN_NODE");
    ckpt_peer_node_name(n, sizeof(n));
    assert_string_equal(n, "slurm3");
    unsetenv("SLURMD_NODENAME");
    ckpt_peer_node_name(n, sizeof(n));
    assert_true(strlen(n) > 0);
}

static void test_buddies_by_hand(void **state) {
    (void)state;
    /* 3 nodes x 2 ranks: each rank's copy goes to the same slot on the next node */
    int node[6] = {10, 10, 20, 20, 30, 30}, buddy[6];
    assert_int_equal(ckpt_peer_buddies(6, node, NULL, buddy), 6);
    int want[6] = {2, 3, 4, 5, 0, 1};
    assert_memory_equal(buddy, want, sizeof(want));
    /* 4 nodes of 1 rank, leaves {0, 0, 1, 1}: the next node in ANOTHER leaf */
    int node4[4] = {0, 1, 2, 3}, leaf4[4] = {0, 0, 1, 1}, b4[4];
    assert_int_equal(ckpt_peer_buddies(4, node4, leaf4, b4), 4);
    int want4[4] = {2, 2, 0, 0};
    assert_memory_equal(b4, want4, sizeof(want4));
    /* one node: nobody to copy to */
    int one[3] = {5, 5, 5}, b1[3];
    assert_int_equal(ckpt_peer_buddies(3, one, NULL, b1), 0);
    for (int r = 0; r < 3; r++) assert_int_equal(b1[r], -1);
}

/* The rules of ckpt/peer.h, checked on random layouts. */
static void test_buddies_random(void **state) {
    (void)state;
    srand(12345);
    for (int trial = 0; trial < 500; trial++) {
        int world = 1 + rand() % 24, nodes = 1 + rand() % 6, leaves = 1 + rand() % 3;
        int equal = rand() % 2, per = 1 + rand() % 4;
        int node[64], leaf[64], buddy[64], node_leaf[8];
        for (int i = 0; i < nodes; i++) node_leaf[i] = rand() % leaves;
        if (equal) world = nodes * per;
        for (int r = 0; r < world; r++) {
            node[r] = equal ? r / per : rand() % nodes;
            leaf[r] = node_leaf[node[r]];
        }
        int distinct = 0, any_other_leaf_for[64];
        for (int r = 0; r < world; r++) {
            int seen = 0;
            for (int q = 0; q < r; q++) seen |= node[q] == node[r];
            distinct += !seen;
            any_other_leaf_for[r] = 0;
            for (int q = 0; q < world; q++) any_other_leaf_for[r] |= leaf[q] != leaf[r];
        }
        int with = ckpt_peer_buddies(world, node, leaf, buddy);
        int held[64] = {0};
        for (int r = 0; r < world; r++) {
            if (distinct < 2) {
                assert_int_equal(buddy[r], -1);
                continue;
            }
            assert_true(buddy[r] >= 0 && buddy[r] < world);
            assert_int_not_equal(node[buddy[r]], node[r]); /* another node, always */
            if (any_other_leaf_for[r]) assert_int_not_equal(leaf[buddy[r]], leaf[r]);
            held[buddy[r]]++;
        }
        assert_int_equal(with, distinct < 2 ? 0 : world);
        if (equal && distinct >= 2 && leaves == 1)
            for (int r = 0; r < world; r++) assert_int_equal(held[r], 1); /* a permutation */
    }
}

/* A committed step with two files under root; returns their contents for comparison. */
static void make_step(const char *root, int64_t step, const char *a, const char *b) {
    char dir[CKPT_PATH_MAX], path[CKPT_PATH_MAX], err[512];
    assert_int_equal(ckpt_begin(root, step, dir, sizeof(dir), err, sizeof(err)), 0);
    assert_int_equal(fs_join(path, sizeof(path), dir, "a.bin", err, sizeof(err)), 0);
    assert_int_equal(fs_write_atomic(path, a, strlen(a), err, sizeof(err)), 0);
    assert_int_equal(fs_join(path, sizeof(path), dir, "b.bin", err, sizeof(err)), 0);
    assert_int_equal(fs_write_atomic(path, b, strlen(b), err, sizeof(err)), 0);
    assert_int_equal(ckpt_commit(root, step, err, sizeof(err)), 0);
}

static void read_back(const char *root, int64_t step, const char *name, char **out) {
    char dir[CKPT_PATH_MAX], path[CKPT_PATH_MAX], err[512];
    ckpt_step_path(dir, sizeof(dir), root, step, "");
    assert_int_equal(fs_join(path, sizeof(path), dir, name, err, sizeof(err)), 0);
    assert_int_equal(fs_read_file(path, 1 << 20, out, NULL, err, sizeof(err)), 0);
}

static int committed(const char *root, int64_t step) {
    char dir[CKPT_PATH_MAX];
    struct stat st;
    ckpt_step_path(dir, sizeof(dir), root, step, "");
    return stat(dir, &st) == 0;
}

static void test_pack_unpack(void **state) {
    (void)state;
    char src[CKPT_PATH_MAX], dst[CKPT_PATH_MAX], err[512];
    tu_path(src, sizeof(src), "src");
    tu_path(dst, sizeof(dst), "dst");
    const char *a = "the parameters of rank 3", *b = "{\"step\": 10}\n";
    make_step(src, 10, a, b);
    void *buf = NULL;
    size_t len = 0;
    assert_int_equal(ckpt_peer_pack(src, 10, &buf, &len, err, sizeof(err)), 0);
    assert_int_equal(len % 4, 0);
    assert_int_equal(ckpt_peer_unpack(dst, 10, buf, len, err, sizeof(err)), 0);
    assert_int_equal(ckpt_verify(dst, 10, err, sizeof(err)), 0);
    char *ga = NULL, *gb = NULL;
    read_back(dst, 10, "a.bin", &ga);
    read_back(dst, 10, "b.bin", &gb);
    assert_string_equal(ga, a);
    assert_string_equal(gb, b);
    free(ga);
    free(gb);
    /* a byte flipped in flight (inside a.bin's bytes): refused, nothing committed */
    char *flip = malloc(len);
    memcpy(flip, buf, len);
    char *hit = memmem(flip, len, "rank 3", 6);
    assert_non_null(hit);
    hit[5] ^= 0x01;
    char other[CKPT_PATH_MAX];
    tu_path(other, sizeof(other), "flip");
    assert_int_equal(ckpt_peer_unpack(other, 10, flip, len, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "CRC-32C"));
    assert_false(committed(other, 10));
    /* torn: the buffer cut in the middle of the data */
    tu_path(other, sizeof(other), "torn");
    assert_int_equal(ckpt_peer_unpack(other, 10, buf, len - 20, err, sizeof(err)), -1);
    assert_false(committed(other, 10));
    /* not a packed step at all */
    assert_int_equal(ckpt_peer_unpack(other, 10, "garbage!garbage!", 16, err, sizeof(err)), -1);
    free(flip);
    free(buf);
    /* a missing step cannot be packed */
    assert_int_equal(ckpt_peer_pack(src, 11, &buf, &len, err, sizeof(err)), -1);
}

static void test_retain(void **state) {
    (void)state;
    char root[CKPT_PATH_MAX], err[512];
    tu_path(root, sizeof(root), "ret");
    for (int64_t s = 5; s <= 20; s += 5) make_step(root, s, "x", "y");
    assert_int_equal(ckpt_peer_retain(root, 2, err, sizeof(err)), 0);
    int64_t *steps = NULL;
    int n = 0;
    assert_int_equal(ckpt_list(root, &steps, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 2);
    assert_int_equal(steps[0], 15);
    assert_int_equal(steps[1], 20);
    free(steps);
    assert_int_equal(ckpt_peer_retain(root, 0, err, sizeof(err)), 0); /* keeps at least one */
    assert_true(committed(root, 20));
    assert_false(committed(root, 15));
}

static void test_roots(void **state) {
    (void)state;
    char r[CKPT_PATH_MAX];
    assert_int_equal(ckpt_peer_root(r, sizeof(r), "/t0", 3, 1), 0);
    assert_string_equal(r, "/t0/rank_00003");
    assert_int_equal(ckpt_peer_root(r, sizeof(r), "/t0", 12, 0), 0);
    assert_string_equal(r, "/t0/peer/rank_00012");
    char tiny[8];
    assert_int_equal(ckpt_peer_root(tiny, sizeof(tiny), "/t0", 1, 1), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expand),
        cmocka_unit_test(test_node_name),
        cmocka_unit_test(test_buddies_by_hand),
        cmocka_unit_test(test_buddies_random),
        cmocka_unit_test_setup_teardown(test_pack_unpack, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_retain, tu_setup, tu_teardown),
        cmocka_unit_test(test_roots),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
