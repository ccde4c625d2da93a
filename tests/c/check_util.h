/* check_util.h — what every Check suite in tests/c/ shares. Each
 * tests/c/test_*.c is its own program (see the Makefile's test rule), so the
 * helpers here are static inline and the header is included once per program.
 * The CPU backend's op-level helpers are in check_cpu.h. */
#ifndef RGPU_CHECK_UTIL_H
#define RGPU_CHECK_UTIL_H

#include <check.h>
#include <stdlib.h>

/* A TCase named name, added to s: its timeout in seconds (0: Check's
 * default) and its checked fixture (setup and teardown both NULL: none). */
static inline TCase *add_tcase(Suite *s, const char *name, double timeout, SFun setup, SFun teardown)
{
    TCase *tc = tcase_create(name);
    if (timeout > 0) tcase_set_timeout(tc, timeout);
    if (setup || teardown) tcase_add_checked_fixture(tc, setup, teardown);
    suite_add_tcase(s, tc);
    return tc;
}

/* Adds the tests of a list to tc, in order: ADD_TESTS(tc, test_a, test_b). */
#define ADD_TESTS(tc, ...) add_tests((tc), (const TTest *const[]){ __VA_ARGS__ }, \
    sizeof((const TTest *const[]){ __VA_ARGS__ }) / sizeof(const TTest *))
static inline void add_tests(TCase *tc, const TTest *const *tests, size_t n)
{
    for (size_t i = 0; i < n; i++) tcase_add_test(tc, tests[i]);
}

/* Runs every test of s, frees it and returns the process exit status:
 * EXIT_SUCCESS when no test failed, EXIT_FAILURE otherwise. */
static inline int run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif
