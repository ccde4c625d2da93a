/* fileops.h — the server-file ops of the record executor (fileops.c):
 * FILE_STAT, FILE_LIST, FROM_FILE, ZIP_INDEX and SAVE_ZIP over the session's
 * folders (files.h, FORMAT.md §7.5). Not an API: session.c calls it.
 *
 * Layers: session.c -> fileops.c -> store.c, files.c. */
#ifndef RGPU_SESSION_FILEOPS_H
#define RGPU_SESSION_FILEOPS_H

#include "graph.h"

/* One of the five ops above. */
bool rgpu_sess_is_file_op(int op);
/* Before its chunk runs: fetch the blobs file op r names (its path, a
 * SAVE_ZIP's manifest). A blob refused for its size or a memory limit is no
 * error here (the op fails when it runs); other fetch failures are. */
rgpu_status rgpu_sess_file_prefetch(rgpu_session *s, const rgpu_record *r);
/* Execute file op c->r (its arguments already checked against ops.def);
 * outs[0] is FROM_FILE's defined output. Results go to the session's table. */
rgpu_status rgpu_sess_exec_file(ctx *c, tensor **outs);

#endif
