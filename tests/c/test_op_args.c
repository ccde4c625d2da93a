/* test_op_args.c — ops.def's ARGS signatures and the one check the session
 * runs on every record before a backend sees it (replayer/op/op_args.c), and
 * the generated tables against the op table.
 *
 * Build: make build/tests/test_op_args && build/tests/test_op_args */
#include <check.h>
#include <string.h>

#include "rgpu_format.h"
#include "backend.h"
#include "op/op_args.h"
#include "check_util.h"

static char g_why[256];

static rgpu_arg A(int kind, int64_t i) { rgpu_arg a; memset(&a, 0, sizeof a); a.kind = (uint8_t)kind; a.v.i = i; return a; }

START_TEST(test_good_and_bad_kinds)
{
    rgpu_arg a[4] = { A(RGPU_ARG_INTS, 0), A(RGPU_ARG_BOOL, 1) };
    ck_assert_int_eq(rgpu_op_args_check(RGPU_OP_SUM, 1, 1, 2, a, g_why, sizeof g_why), RGPU_OK);
    a[1] = A(RGPU_ARG_INT, 0);   /* b: an INT 0/1 is accepted */
    ck_assert_int_eq(rgpu_op_args_check(RGPU_OP_SUM, 1, 1, 2, a, g_why, sizeof g_why), RGPU_OK);
    a[1] = A(RGPU_ARG_FLOAT, 0);
    ck_assert_int_eq(rgpu_op_args_check(RGPU_OP_SUM, 1, 1, 2, a, g_why, sizeof g_why), RGPU_ERR_BAD_ARG);
    ck_assert_str_eq(g_why, "sum.dim_IntList: arg 1 (keepdim) is a float, want b");
    ck_assert_int_eq(rgpu_op_args_check(RGPU_OP_SUM, 1, 1, 1, a, g_why, sizeof g_why), RGPU_ERR_BAD_ARG);
    ck_assert_str_eq(g_why, "sum.dim_IntList: 1 args, ops.def says 2 (ints dims, b keepdim)");
    ck_assert_int_eq(rgpu_op_args_check(RGPU_OP_SUM, 1, 1, 2, NULL, g_why, sizeof g_why), RGPU_ERR_BAD_ARG);
    /* '?' admits NONE; alternatives */
    rgpu_arg p[2] = { A(RGPU_ARG_NONE, 0), A(RGPU_ARG_BOOL, 0) };
    ck_assert_int_eq(rgpu_op_args_check(RGPU_OP_PROD, 1, 1, 2, p, g_why, sizeof g_why), RGPU_OK);
    p[0] = A(RGPU_ARG_INT, 1);
    ck_assert_int_eq(rgpu_op_args_check(RGPU_OP_PROD, 1, 1, 2, p, g_why, sizeof g_why), RGPU_OK);
    ck_assert_int_eq(rgpu_op_args_check(RGPU_OP_AMAX, 1, 1, 2, p, g_why, sizeof g_why), RGPU_ERR_BAD_ARG);
    /* a kind out of range */
    p[0] = A(RGPU_ARG_KIND_COUNT, 0);
    ck_assert_int_eq(rgpu_op_args_check(RGPU_OP_PROD, 1, 1, 2, p, g_why, sizeof g_why), RGPU_ERR_BAD_ARG);
    /* no args at all */
    ck_assert_int_eq(rgpu_op_args_check(RGPU_OP_MM, 2, 1, 0, NULL, g_why, sizeof g_why), RGPU_OK);
}
END_TEST

START_TEST(test_arity)
{
    ck_assert_int_eq(rgpu_op_args_check(RGPU_OP_MM, 1, 1, 0, NULL, g_why, sizeof g_why), RGPU_ERR_ARITY);
    ck_assert_int_eq(rgpu_op_args_check(RGPU_OP_MM, 2, 2, 0, NULL, g_why, sizeof g_why), RGPU_ERR_ARITY);
    rgpu_arg d = A(RGPU_ARG_INT, 0);
    ck_assert_int_eq(rgpu_op_args_check(RGPU_OP_CAT, 1, 1, 1, &d, g_why, sizeof g_why), RGPU_OK);
    ck_assert_int_eq(rgpu_op_args_check(RGPU_OP_CAT, RGPU_MAX_IN, 1, 1, &d, g_why, sizeof g_why), RGPU_OK);
    ck_assert_int_eq(rgpu_op_args_check(RGPU_OP_CAT, RGPU_MAX_IN + 1, 1, 1, &d, g_why, sizeof g_why), RGPU_ERR_ARITY);
    ck_assert_int_eq(rgpu_op_args_check(RGPU_OP_CAT, 0, 1, 1, &d, g_why, sizeof g_why), RGPU_ERR_ARITY);
    ck_assert_int_eq(rgpu_op_args_check(-1, 0, 0, 0, NULL, g_why, sizeof g_why), RGPU_ERR_BAD_OP);
    ck_assert_int_eq(rgpu_op_args_check(RGPU_OP_COUNT, 0, 0, 0, NULL, g_why, sizeof g_why), RGPU_ERR_BAD_OP);
}
END_TEST

/* The generated specs agree with the signature strings of the op table. */
START_TEST(test_tables)
{
    int n;
    ck_assert_ptr_null(rgpu_op_argspecs(RGPU_OP_COUNT, &n));
    ck_assert_int_eq(n, 0);
    for (int op = 0; op < RGPU_OP_COUNT; op++) {
        const op_argspec *sp = rgpu_op_argspecs(op, &n);
        const char *sig = rgpu_op_table[op].sig;
        int commas = 0;
        for (const char *c = sig; *c; c++) commas += *c == ',';
        ck_assert_int_eq(n, *sig ? commas + 1 : 0);
        for (int i = 0; i < n; i++) {
            ck_assert_msg(sp[i].kinds != 0 && strstr(sig, sp[i].name), "%s arg %d", rgpu_op_name(op), i);
            ck_assert(!(sp[i].kinds >> RGPU_ARG_KIND_COUNT));
        }
        if (rgpu_op_is_random(op)) {   /* seed, offset: INT only */
            ck_assert_int_ge(n, 2);
            ck_assert_uint_eq(sp[n - 2].kinds, 1u << RGPU_ARG_INT);
            ck_assert_uint_eq(sp[n - 1].kinds, 1u << RGPU_ARG_INT);
        }
        /* the CPU backend runs every op (the session's own included) */
        ck_assert_msg(rgpu_cpu_supports(op), "%s", rgpu_op_name(op));
    }
    ck_assert(!rgpu_cpu_supports(-1) && !rgpu_cpu_supports(RGPU_OP_COUNT));
}
END_TEST

/* A family's op reaches that family through the generated switch; an op
 * number out of range is refused, never aborted on. */
START_TEST(test_dispatch_unsupported)
{
    rgpu_exec e;
    memset(&e, 0, sizeof e);
    char err[200];
    e.op = RGPU_OP_COUNT + 3;
    ck_assert_int_eq(rgpu_cpu_exec(&e, err, sizeof err), RGPU_ERR_UNSUPPORTED);
    e.op = RGPU_OP_NOP;   /* a SESSION op: nothing for the backend to do */
    ck_assert_int_eq(rgpu_cpu_exec(&e, err, sizeof err), RGPU_OK);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("op_args");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_good_and_bad_kinds);
    tcase_add_test(tc, test_arity);
    tcase_add_test(tc, test_tables);
    tcase_add_test(tc, test_dispatch_unsupported);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return run_suite(suite());
}
