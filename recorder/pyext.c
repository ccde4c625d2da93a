/* pyext.c — rgpu._C: the CPython face of the recorder (plain C, stable ABI).
 *
 * Built against Python's limited API (abi3, 3.11+) so one binary loads on
 * every supported Python. Not built against libtorch: the torch side lives in
 * the Python modules in torchhook/rgpu/ and calls these functions with ints, tuples and buffers.
 *
 *   connect(address, record_path=None, token=None) -> {"backend": str, "session": int, "supports": bytes,
 *                                                       "server_version": str}
 *       token None: RGPU_TOKEN, else the file RGPU_TOKEN_FILE, else the server's default token file
 *   close()
 *   new_id() -> int
 *   record(op, outs, ins, args) -> op index
 *       outs: tid (existing tensor) | (tid, sid, dtype, sizes, strides, offset, nbytes)
 *             nbytes >= 0: new storage sid of nbytes; -1: sid already exists (alias)
 *       ins:  tid | None
 *       args: bool | int | float | None | sequence of ints | 16-byte bytes (hash)
 *             | 1-byte bytes (a DTYPE arg: the byte is the rgpu dtype number)
 *   upload(out, buffer) -> op index
 *   wait(op_index) -> bytes        (raises RemoteError, .status the status name; SessionLost when the session is gone; warns
 *                                   RuntimeWarning once when the server's journal of the session turned off)
 *   free(tid), flush(), stats() -> dict (with "journal" once connected), op_table_hash() -> 16 bytes
 *
 * Compiled-graph templates (FORMAT.md §5.1), per calling thread:
 *   capture_begin()                 start capturing (RuntimeError when this thread already does)
 *   capture_end() -> bytes          the captured records, back to back; stop capturing
 *   capture_abort()                 drop them, stop (no error without a capture)
 *   capture_free(tid) -> bool       a FREE of tid (a bound input handed over) at this point of
 *                                   this thread's capture; False (nothing done) without one
 *   put_blob(buffer) -> 16 bytes    register bytes the server may NEED (a template blob), by hash
 * While capturing: new_id() has bit 62 set, record() and upload() return 0
 * (no op index is used) and their records go into the capture; recording a
 * WAIT-flag op or a CALL, and wait(), raise RuntimeError; free() of a bit-62
 * id goes into the capture. Outside its capture, free() of a bit-62 id is
 * dropped. A CALL: record(OP_CALL, (), (), (hash, (id, ...), seed, offset)),
 * seed and offset as signed 64-bit ints.
 *
 * Write watch, per calling thread (dispatch's check that an op whose schema
 * writes an argument really wrote it):
 *   watch_begin(tids, sids)         watch these tensors (their storages: sids)
 *   watch_end() -> tuple            stop the innermost watch -> the positions in
 *                                   tids of the tensors no record wrote
 * A watched tensor counts as written when a record (or upload) names it as an
 * existing output (or as an input the record updates in place: BATCH_NORM's
 * running stats), or names an alias made during the watch of its storage.
 * Watches nest (every open one sees each record); recording costs nothing
 * more while none is open.
 *
 * record() is the per-op hot path: no allocation beyond the encode buffer,
 * no Python objects created, the GIL kept (the lock inside is uncontended
 * except by the sender thread). */
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030B0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recorder.h"

static rgpu_client *g_client;
static PyObject *RemoteError, *SessionLost;

/* The exception for a failed call: SessionLost when the server no longer
 * holds the session (a RemoteError subclass), else RemoteError. */
static PyObject *error_class(rgpu_status s) { return s == RGPU_ERR_SESSION_LOST ? SessionLost : RemoteError; }

/* Raise error_class(s) with message msg; the exception's .status is the
 * status's name ("RGPU_ERR_PATH"), so callers need not parse the text. */
static PyObject *raise_remote(rgpu_status s, const char *msg) {
    PyObject *e = PyObject_CallFunction(error_class(s), "s", msg);
    if (!e) return NULL;
    PyObject *name = PyUnicode_FromString(rgpu_status_name(s));
    if (name && PyObject_SetAttrString(e, "status", name) == 0) PyErr_SetObject(error_class(s), e);
    Py_XDECREF(name);
    Py_DECREF(e);
    return NULL;
}

static PyObject *raise_status(rgpu_status s, const char *what) {
    if (s == RGPU_ERR_NOMEM) return PyErr_NoMemory();
    const char *why = g_client ? rgpu_client_failure(g_client) : NULL;
    char msg[768];
    if (why) snprintf(msg, sizeof msg, "%s", why);
    else snprintf(msg, sizeof msg, "%s: %s", what, rgpu_status_str(s));
    return raise_remote(s, msg);
}

static rgpu_client *need_client(void) {
    if (!g_client) PyErr_SetString(PyExc_RuntimeError, "rgpu: not connected to a server");
    return g_client;
}

static PyObject *py_connect(PyObject *self, PyObject *args) {
    (void)self;
    const char *addr, *rec = NULL, *token = NULL;
    if (!PyArg_ParseTuple(args, "s|zz", &addr, &rec, &token)) return NULL;
    if (g_client) { PyErr_SetString(PyExc_RuntimeError, "rgpu: already connected"); return NULL; }
    char err[512] = "";
    rgpu_client *c = NULL;
    rgpu_status s;
    Py_BEGIN_ALLOW_THREADS
    s = rgpu_client_connect_token(addr, rec, token, &c, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (s) {
        PyErr_Format(PyExc_ConnectionError, "rgpu: %s", err[0] ? err : rgpu_status_str(s));
        return NULL;
    }
    g_client = c;
    const rgpu_server_info *i = rgpu_client_server(c);
    return Py_BuildValue("{s:s,s:K,s:y#,s:s}", "backend", i->backend, "session", (unsigned long long)i->session,
                         "supports", (const char *)i->supports, (Py_ssize_t)sizeof i->supports,
                         "server_version", i->version);
}

static PyObject *py_close(PyObject *self, PyObject *noargs) {
    (void)self; (void)noargs;
    rgpu_client *c = g_client;
    g_client = NULL;
    if (c) {
        Py_BEGIN_ALLOW_THREADS
        rgpu_client_close(c);
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

static PyObject *py_new_id(PyObject *self, PyObject *noargs) {
    (void)self; (void)noargs;
    rgpu_client *c = need_client();
    if (!c) return NULL;
    return PyLong_FromUnsignedLongLong(rgpu_client_new_id(c));
}

/* Parse a sequence of ints into an int64 array. */
static int parse_dims(PyObject *seq, int64_t *out, int max, const char *what) {
    PyObject *f = PySequence_Fast(seq, what);
    if (!f) return -1;
    Py_ssize_t n = PySequence_Size(f);
    if (n > max) { Py_DECREF(f); PyErr_Format(PyExc_ValueError, "rgpu: %s has %zd dims, limit %d", what, n, max); return -1; }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PySequence_GetItem(f, i);
        out[i] = o ? PyLong_AsLongLong(o) : -1;
        Py_XDECREF(o);
        if (out[i] == -1 && PyErr_Occurred()) { Py_DECREF(f); return -1; }
    }
    Py_DECREF(f);
    return (int)n;
}

static int parse_tdef(PyObject *o, rgpu_tdef *t) {
    memset(t, 0, offsetof(rgpu_tdef, sizes));
    if (PyLong_Check(o)) {
        t->tid = PyLong_AsUnsignedLongLong(o);
        t->flags = RGPU_TDEF_EXISTING;
        return PyErr_Occurred() ? -1 : 0;
    }
    if (!PyTuple_Check(o) || PyTuple_Size(o) != 7) {
        PyErr_SetString(PyExc_TypeError, "rgpu: output must be a tid or (tid, sid, dtype, sizes, strides, offset, nbytes)");
        return -1;
    }
    t->tid = PyLong_AsUnsignedLongLong(PyTuple_GetItem(o, 0));
    t->sid = PyLong_AsUnsignedLongLong(PyTuple_GetItem(o, 1));
    long dt = PyLong_AsLong(PyTuple_GetItem(o, 2));
    if (PyErr_Occurred()) return -1;
    if (dt < 0 || dt >= RGPU_DTYPE_COUNT) { PyErr_SetString(PyExc_ValueError, "rgpu: bad dtype"); return -1; }
    t->dtype = (uint8_t)dt;
    int nd = parse_dims(PyTuple_GetItem(o, 3), t->sizes, RGPU_MAX_DIMS, "sizes");
    if (nd < 0) return -1;
    int ns = parse_dims(PyTuple_GetItem(o, 4), t->strides, RGPU_MAX_DIMS, "strides");
    if (ns < 0) return -1;
    if (ns != nd) { PyErr_SetString(PyExc_ValueError, "rgpu: sizes and strides differ in length"); return -1; }
    t->ndim = (uint8_t)nd;
    t->offset = PyLong_AsLongLong(PyTuple_GetItem(o, 5));
    long long nb = PyLong_AsLongLong(PyTuple_GetItem(o, 6));
    if (PyErr_Occurred()) return -1;
    if (nb >= 0) { t->flags = RGPU_TDEF_NEW_STORAGE; t->nbytes = (uint64_t)nb; }
    return 0;
}

/* INTS args are copied into this per-call scratch (LE int64). */
typedef struct { uint8_t *p; size_t len, cap; } scratch;

static int parse_arg(PyObject *o, rgpu_arg *a, scratch *sc, size_t *offs) {
    if (o == Py_None) { a->kind = RGPU_ARG_NONE; return 0; }
    if (PyBool_Check(o)) { a->kind = RGPU_ARG_BOOL; a->v.i = (o == Py_True); return 0; }
    if (PyLong_Check(o)) {
        a->kind = RGPU_ARG_INT;
        a->v.i = PyLong_AsLongLong(o);
        return PyErr_Occurred() ? -1 : 0;
    }
    if (PyFloat_Check(o)) { a->kind = RGPU_ARG_FLOAT; a->v.f = PyFloat_AsDouble(o); return 0; }
    if (PyBytes_Check(o)) {
        if (PyBytes_Size(o) == 1) {
            a->kind = RGPU_ARG_DTYPE;
            a->v.i = (unsigned char)PyBytes_AsString(o)[0];
            return 0;
        }
        if (PyBytes_Size(o) != 16) { PyErr_SetString(PyExc_ValueError, "rgpu: hash args are 16 bytes"); return -1; }
        a->kind = RGPU_ARG_HASH;
        memcpy(a->v.h.b, PyBytes_AsString(o), 16);
        return 0;
    }
    if (PyList_Check(o) || PyTuple_Check(o)) {
        Py_ssize_t n = PySequence_Size(o);
        if (n > (Py_ssize_t)RGPU_MAX_INTS) { PyErr_SetString(PyExc_ValueError, "rgpu: int list too long"); return -1; }
        size_t need = sc->len + 8 * (size_t)n;
        if (need > sc->cap) {
            size_t cap = need * 2 + 64;
            uint8_t *p = PyMem_Realloc(sc->p, cap);
            if (!p) { PyErr_NoMemory(); return -1; }
            sc->p = p; sc->cap = cap;
        }
        *offs = sc->len;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *e = PySequence_GetItem(o, i);
            long long v = e ? PyLong_AsLongLong(e) : -1;
            Py_XDECREF(e);
            if (v == -1 && PyErr_Occurred()) return -1;
            rgpu_st64(sc->p + sc->len + 8 * (size_t)i, (uint64_t)v);
        }
        sc->len = need;
        a->kind = RGPU_ARG_INTS;
        a->v.ints.n = (uint32_t)n;
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "rgpu: cannot record an argument of this type");
    return -1;
}

/* ---- write watch (see the top comment) ---------------------------------- */

#define WATCH_DEPTH 16
typedef struct {
    uint64_t *tid;      /* [n]: the watched tensors, then aliases of their storages */
    uint32_t *target;   /* [n]: which watched tensor (position in watch_begin's tids) */
    uint64_t *sid;      /* [ntarget]: each watched tensor's storage */
    uint8_t *hit;       /* [ntarget] */
    size_t n, cap, ntarget, cursor;
} watch_frame;

static _Thread_local watch_frame g_watch[WATCH_DEPTH];
static _Thread_local int g_watch_depth;

static int watch_add(watch_frame *f, uint64_t tid, uint32_t target) {
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 8;
        uint64_t *t = PyMem_Realloc(f->tid, cap * sizeof *t);
        if (!t) return -1;
        f->tid = t;
        uint32_t *g = PyMem_Realloc(f->target, cap * sizeof *g);
        if (!g) return -1;
        f->target = g;
        f->cap = cap;
    }
    f->tid[f->n] = tid;
    f->target[f->n] = target;
    f->n++;
    return 0;
}

/* One output of a record, seen by every open watch. Writes come in the order
 * the targets were given (a foreach over a list), so the scan starts after
 * the last hit. */
static void watch_see(const rgpu_tdef *t) {
    for (int d = 0; d < g_watch_depth; d++) {
        watch_frame *f = &g_watch[d];
        if (t->flags & RGPU_TDEF_EXISTING) {
            for (size_t k = 0; k < f->n; k++) {
                size_t i = (f->cursor + k) % f->n;
                if (f->tid[i] == t->tid) { f->hit[f->target[i]] = 1; f->cursor = i + 1; break; }
            }
        } else if (!(t->flags & RGPU_TDEF_NEW_STORAGE)) {   /* an alias of storage t->sid */
            for (size_t j = 0; j < f->ntarget; j++)
                if (f->sid[j] == t->sid) { (void)watch_add(f, t->tid, (uint32_t)j); break; }
        }
    }
}

/* Inputs a record updates in place, besides its outputs: BATCH_NORM's running
 * stats when training (ops.def). */
static void watch_see_inputs(const rgpu_record *r) {
    if (r->op == RGPU_OP_BATCH_NORM && r->n_args > 0 && r->args[0].kind == RGPU_ARG_BOOL && r->args[0].v.i)
        for (int i = 3; i < 5 && i < r->n_in; i++)
            if (r->in[i]) {
                rgpu_tdef t = { .tid = r->in[i], .flags = RGPU_TDEF_EXISTING };
                watch_see(&t);
            }
}

static PyObject *py_watch_begin(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *tids, *sids;
    if (!PyArg_ParseTuple(args, "O!O!", &PyTuple_Type, &tids, &PyTuple_Type, &sids)) return NULL;
    Py_ssize_t n = PyTuple_Size(tids);
    if (PyTuple_Size(sids) != n) { PyErr_SetString(PyExc_ValueError, "rgpu: watch_begin: tids and sids differ in length"); return NULL; }
    if (g_watch_depth == WATCH_DEPTH) { PyErr_SetString(PyExc_RuntimeError, "rgpu: write watches nested too deep"); return NULL; }
    watch_frame *f = &g_watch[g_watch_depth];
    f->n = 0; f->cursor = 0; f->ntarget = 0;
    PyMem_Free(f->sid); PyMem_Free(f->hit);
    f->sid = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *f->sid);
    f->hit = PyMem_Calloc((size_t)(n ? n : 1), 1);
    if (!f->sid || !f->hit) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t tid = PyLong_AsUnsignedLongLong(PyTuple_GetItem(tids, i));
        f->sid[i] = PyLong_AsUnsignedLongLong(PyTuple_GetItem(sids, i));
        if (PyErr_Occurred()) return NULL;
        if (watch_add(f, tid, (uint32_t)i)) return PyErr_NoMemory();
    }
    f->ntarget = (size_t)n;
    g_watch_depth++;
    Py_RETURN_NONE;
}

static PyObject *py_watch_end(PyObject *self, PyObject *noargs) {
    (void)self; (void)noargs;
    if (!g_watch_depth) { PyErr_SetString(PyExc_RuntimeError, "rgpu: watch_end without watch_begin"); return NULL; }
    watch_frame *f = &g_watch[--g_watch_depth];
    Py_ssize_t missed = 0;
    for (size_t j = 0; j < f->ntarget; j++) missed += !f->hit[j];
    PyObject *r = PyTuple_New(missed);
    if (!r) return NULL;
    for (size_t j = 0, k = 0; j < f->ntarget; j++)
        if (!f->hit[j]) PyTuple_SetItem(r, (Py_ssize_t)k++, PyLong_FromSize_t(j));
    return r;
}

static PyObject *capture_error(rgpu_status s, int op);

static PyObject *py_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4) { PyErr_SetString(PyExc_TypeError, "record(op, outs, ins, args)"); return NULL; }
    rgpu_client *c = need_client();
    if (!c) return NULL;
    rgpu_record r;
    long op = PyLong_AsLong(args[0]);
    if (op < 0 || op >= RGPU_OP_COUNT) {
        if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "rgpu: op %ld out of range", op);
        return NULL;
    }
    r.op = (uint16_t)op;
    PyObject *outs = args[1], *ins = args[2], *sargs = args[3];
    if (!PyTuple_Check(outs) || !PyTuple_Check(ins) || !PyTuple_Check(sargs)) {
        PyErr_SetString(PyExc_TypeError, "rgpu: outs, ins, args must be tuples");
        return NULL;
    }
    Py_ssize_t no = PyTuple_Size(outs), ni = PyTuple_Size(ins), na = PyTuple_Size(sargs);
    if (no > RGPU_MAX_OUT || ni > RGPU_MAX_IN || na > RGPU_MAX_ARGS) {
        PyErr_SetString(PyExc_ValueError, "rgpu: too many outputs, inputs or args");
        return NULL;
    }
    r.n_out = (uint8_t)no; r.n_in = (uint8_t)ni; r.n_args = (uint8_t)na;
    for (Py_ssize_t i = 0; i < no; i++)
        if (parse_tdef(PyTuple_GetItem(outs, i), &r.out[i])) return NULL;
    for (Py_ssize_t i = 0; i < ni; i++) {
        PyObject *o = PyTuple_GetItem(ins, i);
        r.in[i] = o == Py_None ? 0 : PyLong_AsUnsignedLongLong(o);
        if (PyErr_Occurred()) return NULL;
    }
    scratch sc = { 0 };
    size_t offs[RGPU_MAX_ARGS] = { 0 };
    for (Py_ssize_t i = 0; i < na; i++)
        if (parse_arg(PyTuple_GetItem(sargs, i), &r.args[i], &sc, &offs[i])) { PyMem_Free(sc.p); return NULL; }
    for (Py_ssize_t i = 0; i < na; i++)
        if (r.args[i].kind == RGPU_ARG_INTS) r.args[i].v.ints.p = sc.p + offs[i];
    if (g_watch_depth)
        for (int i = 0; i < r.n_out; i++) watch_see(&r.out[i]);
    if (g_watch_depth) watch_see_inputs(&r);
    uint64_t idx = 0;
    rgpu_status s = rgpu_client_record(c, &r, &idx);
    PyMem_Free(sc.p);
    if (s && rgpu_client_capturing(c)) return capture_error(s, r.op);
    if (!s && rgpu_client_backlogged(c)) {   /* rare: the server is behind by RGPU_MAX_UNACKED */
        Py_BEGIN_ALLOW_THREADS
        s = rgpu_client_throttle(c);
        Py_END_ALLOW_THREADS
    }
    if (s) {
        if (s == RGPU_ERR_ARITY || s == RGPU_ERR_BAD_OP)
            return PyErr_Format(PyExc_ValueError, "rgpu: record for %s: %s", rgpu_op_name(r.op), rgpu_status_str(s));
        return raise_status(s, "rgpu: cannot record");
    }
    return PyLong_FromUnsignedLongLong(idx);
}

/* A record a capture refuses (rgpu_client_record's statuses while capturing). */
static PyObject *capture_error(rgpu_status s, int op) {
    if (s == RGPU_ERR_UNSUPPORTED && op == RGPU_OP_CALL)
        return PyErr_Format(PyExc_RuntimeError, "rgpu: a captured graph cannot record a CALL (templates do not nest)");
    if (s == RGPU_ERR_UNSUPPORTED)
        return PyErr_Format(PyExc_RuntimeError, "rgpu: %s needs a wait, which a captured graph cannot do", rgpu_op_name(op));
    if (s == RGPU_ERR_TOO_LARGE)
        return PyErr_Format(PyExc_RuntimeError, "rgpu: the captured graph is over %u bytes of records", RGPU_MAX_CHUNK_RAW);
    if (s == RGPU_ERR_ARITY || s == RGPU_ERR_BAD_OP)
        return PyErr_Format(PyExc_ValueError, "rgpu: record for %s: %s", rgpu_op_name(op), rgpu_status_str(s));
    return raise_status(s, "rgpu: cannot capture");
}

static PyObject *py_upload(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *out, *data;
    if (!PyArg_ParseTuple(args, "OO", &out, &data)) return NULL;
    rgpu_client *c = need_client();
    if (!c) return NULL;
    rgpu_tdef t;
    if (parse_tdef(out, &t)) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)) return NULL;
    if (g_watch_depth) watch_see(&t);
    uint64_t idx = 0;
    rgpu_status s = rgpu_client_upload(c, &t, view.buf, (size_t)view.len, &idx);
    PyBuffer_Release(&view);
    if (s && rgpu_client_capturing(c)) return capture_error(s, RGPU_OP_UPLOAD);
    if (!s && rgpu_client_backlogged(c)) {
        Py_BEGIN_ALLOW_THREADS
        s = rgpu_client_throttle(c);
        Py_END_ALLOW_THREADS
    }
    if (s) return raise_status(s, "rgpu: upload");
    return PyLong_FromUnsignedLongLong(idx);
}

static PyObject *py_wait(PyObject *self, PyObject *arg) {
    (void)self;
    rgpu_client *c = need_client();
    if (!c) return NULL;
    unsigned long long idx = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred()) return NULL;
    if (rgpu_client_capturing(c))
        return PyErr_Format(PyExc_RuntimeError, "rgpu: wait(%llu) needs a wait, which a captured graph cannot do", idx);
    uint8_t *data = NULL;
    size_t n = 0;
    char err[512] = "";
    rgpu_status s;
    Py_BEGIN_ALLOW_THREADS
    s = rgpu_client_wait(c, idx, &data, &n, err, sizeof err);
    Py_END_ALLOW_THREADS
    char note[512];
    if (rgpu_client_take_notice(c, note, sizeof note) && PyErr_WarnEx(PyExc_RuntimeWarning, note, 1) < 0) {
        free(data);   /* warnings are errors here */
        return NULL;
    }
    if (s) {
        free(data);
        if (s == RGPU_ERR_NOMEM) return PyErr_NoMemory();
        return raise_remote(s, err[0] ? err : rgpu_status_str(s));
    }
    PyObject *r = PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)n);
    free(data);
    return r;
}

static PyObject *py_free(PyObject *self, PyObject *arg) {
    (void)self;
    unsigned long long tid = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred()) return NULL;
    if (g_client) rgpu_client_free_tensor(g_client, tid);
    Py_RETURN_NONE;
}

static PyObject *py_capture_free(PyObject *self, PyObject *arg) {
    (void)self;
    unsigned long long tid = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred()) return NULL;
    return PyBool_FromLong(g_client && rgpu_client_capture_free(g_client, tid));
}

static PyObject *py_capture_begin(PyObject *self, PyObject *noargs) {
    (void)self; (void)noargs;
    rgpu_client *c = need_client();
    if (!c) return NULL;
    rgpu_status s = rgpu_client_capture_begin(c);
    if (s == RGPU_ERR_SEQUENCE)
        return PyErr_Format(PyExc_RuntimeError, "rgpu: capture_begin: this thread is capturing already (captures do not nest)");
    if (s) return raise_status(s, "rgpu: capture_begin");
    Py_RETURN_NONE;
}

static PyObject *py_capture_end(PyObject *self, PyObject *noargs) {
    (void)self; (void)noargs;
    rgpu_client *c = need_client();
    if (!c) return NULL;
    rgpu_buf b = { 0 };
    rgpu_status s = rgpu_client_capture_end(c, &b);
    if (s == RGPU_ERR_SEQUENCE) return PyErr_Format(PyExc_RuntimeError, "rgpu: capture_end: this thread is not capturing");
    if (s) return raise_status(s, "rgpu: capture_end");
    PyObject *r = PyBytes_FromStringAndSize((const char *)b.p, (Py_ssize_t)b.len);
    rgpu_buf_free(&b);
    return r;
}

static PyObject *py_capture_abort(PyObject *self, PyObject *noargs) {
    (void)self; (void)noargs;
    if (g_client) rgpu_client_capture_abort(g_client);
    Py_RETURN_NONE;
}

static PyObject *py_put_blob(PyObject *self, PyObject *arg) {
    (void)self;
    rgpu_client *c = need_client();
    if (!c) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE)) return NULL;
    rgpu_hash h;
    rgpu_status s = rgpu_client_put_blob(c, view.buf, (size_t)view.len, &h);
    PyBuffer_Release(&view);
    if (s) return raise_status(s, "rgpu: put_blob");
    return PyBytes_FromStringAndSize((const char *)h.b, 16);
}

static PyObject *py_flush(PyObject *self, PyObject *noargs) {
    (void)self; (void)noargs;
    rgpu_client *c = need_client();
    if (!c) return NULL;
    rgpu_status s = rgpu_client_flush(c);
    if (s) return raise_status(s, "rgpu: flush");
    Py_RETURN_NONE;
}

static PyObject *py_stats(PyObject *self, PyObject *noargs) {
    (void)self; (void)noargs;
    rgpu_client_stats s = { 0 };
    if (g_client) rgpu_client_get_stats(g_client, &s);
    PyObject *d = Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K}",
                         "ops", (unsigned long long)s.ops, "chunks", (unsigned long long)s.chunks,
                         "waits", (unsigned long long)s.waits, "bytes_out", (unsigned long long)s.bytes_out,
                         "bytes_in", (unsigned long long)s.bytes_in, "blobs_sent", (unsigned long long)s.blobs_sent,
                         "blobs_deduped", (unsigned long long)s.blobs_deduped, "frees", (unsigned long long)s.frees,
                         "free_records", (unsigned long long)s.free_records,
                         "reconnects", (unsigned long long)s.reconnects, "unacked_bytes", (unsigned long long)s.unacked_bytes,
                         "templates", (unsigned long long)s.templates, "calls", (unsigned long long)s.calls,
                         "round_trips", (unsigned long long)s.round_trips);
    if (d && g_client) {   /* "on", "off: <why>" (a server restart would not resume the run), "none" */
        char j[320];
        rgpu_client_journal(g_client, j, sizeof j);
        PyObject *v = PyUnicode_DecodeUTF8(j, (Py_ssize_t)strlen(j), "replace");
        if (!v || PyDict_SetItemString(d, "journal", v)) Py_CLEAR(d);
        Py_XDECREF(v);
    }
    return d;
}

static PyObject *py_op_table_hash(PyObject *self, PyObject *noargs) {
    (void)self; (void)noargs;
    uint8_t h[16];
    rgpu_op_table_hash(h);
    return PyBytes_FromStringAndSize((const char *)h, 16);
}

static PyObject *py_connected(PyObject *self, PyObject *noargs) {
    (void)self; (void)noargs;
    return PyBool_FromLong(g_client != NULL);
}

static PyMethodDef methods[] = {
    { "connect", py_connect, METH_VARARGS, "connect(address, record_path=None, token=None) -> server info dict" },
    { "close", py_close, METH_NOARGS, "flush, say goodbye and disconnect" },
    { "connected", py_connected, METH_NOARGS, "True when connected" },
    { "op_table_hash", py_op_table_hash, METH_NOARGS, "the 16-byte op-table hash HELLO carries" },
    { "new_id", py_new_id, METH_NOARGS, "a fresh tensor/storage id" },
    { "record", (PyCFunction)(void (*)(void))py_record, METH_FASTCALL, "record(op, outs, ins, args) -> op index" },
    { "upload", py_upload, METH_VARARGS, "upload(out, buffer) -> op index" },
    { "wait", py_wait, METH_O, "wait(op_index) -> result bytes" },
    { "free", py_free, METH_O, "free(tid): queue a tensor id for freeing" },
    { "flush", py_flush, METH_NOARGS, "close the open chunk" },
    { "capture_begin", py_capture_begin, METH_NOARGS, "start capturing this thread's records (a template)" },
    { "capture_end", py_capture_end, METH_NOARGS, "stop capturing -> the captured records (bytes)" },
    { "capture_abort", py_capture_abort, METH_NOARGS, "stop capturing, dropping what was captured" },
    { "capture_free", py_capture_free, METH_O, "capture_free(tid) -> bool: free tid inside this thread's capture, here" },
    { "put_blob", py_put_blob, METH_O, "put_blob(buffer) -> 16-byte hash: bytes the server may ask for" },
    { "stats", py_stats, METH_NOARGS, "client counters" },
    { "watch_begin", py_watch_begin, METH_VARARGS, "watch_begin(tids, sids): watch these tensors for writes" },
    { "watch_end", py_watch_end, METH_NOARGS, "watch_end() -> positions of the watched tensors no record wrote" },
    { NULL, NULL, 0, NULL },
};

static struct PyModuleDef moddef = { PyModuleDef_HEAD_INIT, "rgpu._C", "rgpu recorder (C)", -1, methods, NULL, NULL, NULL, NULL };

PyMODINIT_FUNC PyInit__C(void) {
    PyObject *m = PyModule_Create(&moddef);
    if (!m) return NULL;
    RemoteError = PyErr_NewException("rgpu.RemoteError", PyExc_RuntimeError, NULL);
    if (!RemoteError || PyModule_AddObject(m, "RemoteError", RemoteError)) return NULL;
    Py_INCREF(RemoteError);
    SessionLost = PyErr_NewException("rgpu.SessionLost", RemoteError, NULL);
    if (!SessionLost || PyModule_AddObject(m, "SessionLost", SessionLost)) return NULL;
    Py_INCREF(SessionLost);
    char name[64];
#define X(e, nm, nin, nout, flags, fam, sig) \
    snprintf(name, sizeof name, "OP_%s", #e); \
    if (PyModule_AddIntConstant(m, name, RGPU_OP_##e)) return NULL;
#include "ops.def"
#undef X
    static const char *const dt[RGPU_DTYPE_COUNT] = { "F32", "F64", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL", "C64", "C128", "C32" };
    for (int i = 0; i < RGPU_DTYPE_COUNT; i++) {
        snprintf(name, sizeof name, "DTYPE_%s", dt[i]);
        if (PyModule_AddIntConstant(m, name, i)) return NULL;
    }
    PyObject *names = PyTuple_New(RGPU_OP_COUNT);
    if (!names) return NULL;
    for (int i = 0; i < RGPU_OP_COUNT; i++) PyTuple_SetItem(names, i, PyUnicode_FromString(rgpu_op_name(i)));
    if (PyModule_AddObject(m, "op_names", names)) return NULL;
    /* op_info[op] = (name, n_in, n_out, flags, family, signature): ops.def's
     * columns; flags are the RGPU_OPF_* bits (OPF_* below), family a name
     * ("pointwise"), signature the ARGS string ("ints dims, b keepdim"). */
    PyObject *info = PyTuple_New(RGPU_OP_COUNT);
    if (!info) return NULL;
    for (int i = 0; i < RGPU_OP_COUNT; i++) {
        const rgpu_op_info *o = &rgpu_op_table[i];
        PyObject *t = Py_BuildValue("(siiIss)", o->name, o->n_in, o->n_out, (unsigned)o->flags,
                                    rgpu_op_family_name(o->family), o->sig);
        if (!t) { Py_DECREF(info); return NULL; }
        PyTuple_SetItem(info, i, t);
    }
    if (PyModule_AddObject(m, "op_info", info)) return NULL;
    static const struct { const char *name; int v; } opf[] = {
        { "OPF_WAIT", RGPU_OPF_WAIT }, { "OPF_FACTORY", RGPU_OPF_FACTORY }, { "OPF_VIEW", RGPU_OPF_VIEW },
        { "OPF_CONTROL", RGPU_OPF_CONTROL }, { "OPF_VARIADIC", RGPU_OPF_VARIADIC },
        { "OPF_SESSION", RGPU_OPF_SESSION }, { "OPF_RANDOM", RGPU_OPF_RANDOM }, { "OPF_CUBLAS", RGPU_OPF_CUBLAS },
        { "OPF_DATA_DEPENDENT", RGPU_OPF_DATA_DEPENDENT }, { "OPF_FLOATY", RGPU_OPF_FLOATY },
        { "OPF_INT_TO_FLOAT", RGPU_OPF_INT_TO_FLOAT }, { "OPF_COMPLEX", RGPU_OPF_COMPLEX },
        { "OPF_BOOL_OUT", RGPU_OPF_BOOL_OUT }, { "OPF_NO_BOOL", RGPU_OPF_NO_BOOL },
        { "OPF_INTEGRAL", RGPU_OPF_INTEGRAL }, { "OPF_OPTIONAL", RGPU_OPF_OPTIONAL },
    };
    for (size_t i = 0; i < sizeof opf / sizeof opf[0]; i++)
        if (PyModule_AddIntConstant(m, opf[i].name, opf[i].v)) return NULL;
    if (PyModule_AddIntConstant(m, "OP_COUNT", RGPU_OP_COUNT)) return NULL;
    if (PyModule_AddIntConstant(m, "WIRE_VERSION", RGPU_WIRE_VERSION)) return NULL;   /* HELLO's version (tests) */
    if (PyModule_AddStringConstant(m, "VERSION", RGPU_VERSION)) return NULL;
    if (PyModule_AddIntConstant(m, "TEMPLATE_MAGIC", RGPU_TEMPLATE_MAGIC)) return NULL;
    if (PyModule_AddIntConstant(m, "TEMPLATE_VERSION", RGPU_TEMPLATE_VERSION)) return NULL;
    PyObject *bit = PyLong_FromUnsignedLongLong(RGPU_TEMPLATE_LOCAL_BIT);
    if (!bit || PyModule_AddObject(m, "TEMPLATE_LOCAL_BIT", bit)) return NULL;
    return m;
}
