/* test_selfcheck.c — the start-up self-check of `--backend auto`
 * (replayer/backend/backend_selfcheck.c): it passes for a backend that computes like
 * the reference, names the op whose result is wrong, and makes auto fall
 * back to cpu. (On a CUDA or cudaemu build, auto runs it against cuda.) */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backend_selfcheck.h"
#include "check_util.h"

START_TEST(test_reference_agrees) {
    unsetenv("RGPU_SELFCHECK_FAULT");
    rgpu_backend *b = rgpu_backend_cpu_create();
    char why[256] = "";
    ck_assert_msg(rgpu_backend_selfcheck(b, why, sizeof why), "%s", why);
    ck_assert_msg(strstr(why, "ops agree"), "%s", why);
    b->destroy(b);
}
END_TEST

/* a wrong value in one op's result fails the check naming that op, for ops of
 * several families */
START_TEST(test_wrong_result_named) {
    static const char *const ops[] = { "mm", "_softmax", "embedding", "native_layer_norm", "convolution",
                                       "max_pool2d_with_indices", "copy_", "cumsum" };
    const char *op = ops[_i];
    setenv("RGPU_SELFCHECK_FAULT", op, 1);
    rgpu_backend *b = rgpu_backend_cpu_create();
    char why[256] = "";
    ck_assert_msg(!rgpu_backend_selfcheck(b, why, sizeof why), "a wrong %s passed: %s", op, why);
    ck_assert_msg(!strncmp(why, op, strlen(op)) && why[strlen(op)] == ':', "%s: why = '%s'", op, why);
    b->destroy(b);
    unsetenv("RGPU_SELFCHECK_FAULT");
}
END_TEST

/* auto never keeps a cuda backend that fails the check: cpu with the reason */
START_TEST(test_auto_falls_back) {
    setenv("RGPU_SELFCHECK_FAULT", "_softmax", 1);
    char why[512] = "";
    rgpu_backend *b = rgpu_backend_create("auto", why, sizeof why);
    ck_assert_ptr_nonnull(b);
    ck_assert_str_eq(b->name, "cpu");
    ck_assert_msg(strstr(why, "cuda not used"), "%s", why);
    /* the handshake's name: "cpu", or "cpu (cuda failed: _softmax)" where a cuda backend was there */
    const char *d = rgpu_backend_describe(b);
    ck_assert_msg(!strcmp(d, "cpu") || !strcmp(d, "cpu (cuda failed: _softmax)"), "describe: '%s'", d);
    ck_assert_msg(strlen(d) <= 31, "'%s' does not fit the handshake", d);
    b->destroy(b);
    unsetenv("RGPU_SELFCHECK_FAULT");
}
END_TEST

int main(void) {
    Suite *s = suite_create("selfcheck");
    TCase *tc = add_tcase(s, "core", 0, NULL, NULL);
    tcase_add_test(tc, test_reference_agrees);
    tcase_add_loop_test(tc, test_wrong_result_named, 0, 8);
    tcase_add_test(tc, test_auto_falls_back);
    return run_suite(s);
}
