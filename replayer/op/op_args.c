/* op_args.c — a record's arity and scalar args against ops.def (op_args.h).
 * The tables are generated (op_gen_args.inc, tools/gen_ops.py). */
#include "op_args.h"

#include <stdio.h>

#include "op_gen_args.inc"

static const char *const kind_name[RGPU_ARG_KIND_COUNT] = { "none", "an int", "a float", "a bool", "an int list",
                                                            "a dtype", "a hash" };

const op_argspec *rgpu_op_argspecs(int op, int *n)
{
    if (op < 0 || op >= RGPU_OP_COUNT) { *n = 0; return NULL; }
    *n = op_gen_sig[op].n;
    return &op_gen_specs[op_gen_sig[op].first];
}

rgpu_status rgpu_op_args_check(int op, int n_in, int n_out, int n_args, const rgpu_arg *args, char *why,
                               size_t whylen)
{
    if (op < 0 || op >= RGPU_OP_COUNT) {
        snprintf(why, whylen, "op number %d", op);
        return RGPU_ERR_BAD_OP;
    }
    const rgpu_op_info *o = &rgpu_op_table[op];
    bool in_ok = (o->flags & RGPU_OPF_VARIADIC) ? n_in >= o->n_in && n_in <= RGPU_MAX_IN : n_in == o->n_in;
    if (!in_ok || n_out != o->n_out) {
        snprintf(why, whylen, "%s: %d inputs / %d outputs, ops.def says %s%d / %d", o->name, n_in, n_out,
                 (o->flags & RGPU_OPF_VARIADIC) ? "at least " : "", o->n_in, o->n_out);
        return RGPU_ERR_ARITY;
    }
    int n;
    const op_argspec *sp = rgpu_op_argspecs(op, &n);
    if (n_args != n || (n_args > 0 && args == NULL)) {
        snprintf(why, whylen, "%s: %d args, ops.def says %d (%s)", o->name, n_args, n, *o->sig ? o->sig : "none");
        return RGPU_ERR_BAD_ARG;
    }
    for (int i = 0; i < n; i++) {
        unsigned k = args[i].kind;
        if (k < RGPU_ARG_KIND_COUNT && (sp[i].kinds >> k & 1u)) continue;
        snprintf(why, whylen, "%s: arg %d (%s) is %s, want %s", o->name, i, sp[i].name,
                 k < RGPU_ARG_KIND_COUNT ? kind_name[k] : "of no kind", sp[i].want);
        return RGPU_ERR_BAD_ARG;
    }
    return RGPU_OK;
}
