/* check_util.h — what every Check suite in tests/c/ shares. Each
 * tests/c/test_*.c is its own program (see the Makefile's test rule), so the
 * helpers here are static inline and the header is included once per program.
 * The CPU backend's op-level helpers are in check_cpu.h. */
#ifndef RGPU_CHECK_UTIL_H
#define RGPU_CHECK_UTIL_H

#include <check.h>
#include <stdlib.h>

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
