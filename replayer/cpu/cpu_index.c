/* cpu_index.c — (being written) */
#include "cpu_internal.h"
#include "cpu_families.h"

bool cpu_index_owns(int op) { (void)op; return false; }
rgpu_status cpu_index_exec(const rgpu_exec *e, char *err, size_t errlen)
{
    CPU_FAIL(RGPU_ERR_UNSUPPORTED, "cpu backend: unsupported op %s", rgpu_op_name(e->op));
}
