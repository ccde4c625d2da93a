/* files.h — server folders a client may read (and, read-write ones, write):
 * `rgpu-server --data [NAME=]DIR` / `--data-rw [NAME=]DIR` (FORMAT.md §7.5).
 *
 * A client names a file "NAME/rel/path": NAME is an exposed folder's name (its
 * directory's basename unless given), the rest a relative path beneath it.
 * Every open resolves beneath the folder's descriptor, held since the server
 * started: openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) where the kernel
 * has it, else a walk one component at a time with O_NOFOLLOW that refuses
 * every symlink. So no "..", absolute path, symlink or folder swapped for a
 * symlink mid-run reaches outside. Refusals are RGPU_ERR_PATH with a message
 * naming the path and the rule; a missing file, a folder where a file is
 * wanted, a device or FIFO, a read past the end are RGPU_ERR_PATH or
 * RGPU_ERR_OUT_OF_BOUNDS with the same kind of message; I/O failures
 * RGPU_ERR_IO naming the path and strerror.
 *
 * Thread-safe: one rgpu_files per server process, shared by its sessions. */
#ifndef RGPU_FILES_H
#define RGPU_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rgpu_format.h"

#define RGPU_FILES_MAX_MOUNTS   16
#define RGPU_FILES_MAX_PATH     1024      /* bytes of a client path */
#define RGPU_FILES_MAX_NAME     255       /* bytes of one component */
#define RGPU_FILES_MAX_DEPTH    64        /* components */
#define RGPU_FILES_MAX_LIST     100000    /* entries FILE_LIST returns */
#define RGPU_FILES_MAX_ZIP      1000000   /* entries of a zip (ZIP_INDEX, SAVE_ZIP) */

typedef struct rgpu_files rgpu_files;

/* An empty set (nothing exposed: every path is refused, naming the flags). */
rgpu_files *rgpu_files_new(void);
void rgpu_files_free(rgpu_files *f);
/* Expose spec "[NAME=]DIR" read-only or read-write (at start-up, before any
 * other call: the other functions may run on several threads at once). DIR must be an existing
 * folder (opened O_PATH|O_DIRECTORY now); NAME [A-Za-z0-9._-]{1,64}, not "."
 * or "..", unique. Returns RGPU_ERR_PATH with why on a bad spec. */
rgpu_status rgpu_files_add(rgpu_files *f, const char *spec, bool writable, char *why, size_t whylen);
int rgpu_files_count(const rgpu_files *f);
/* Mount i's name, directory (as given) and writability. */
const char *rgpu_files_name(const rgpu_files *f, int i);
const char *rgpu_files_dir(const rgpu_files *f, int i);
bool rgpu_files_writable(const rgpu_files *f, int i);

/* Path check only (no filesystem access): the rules above for the n bytes
 * at path (not NUL-terminated; no NUL inside). */
rgpu_status rgpu_files_check_path(const rgpu_files *f, const char *path, size_t n, char *why, size_t whylen);

enum { RGPU_FILE_REG = 1, RGPU_FILE_DIR = 2, RGPU_FILE_OTHER = 3 };

typedef struct rgpu_file_stat {
    uint8_t kind;             /* RGPU_FILE_* */
    bool writable;            /* beneath a --data-rw folder */
    uint64_t size;
    int64_t mtime_ns;
    rgpu_hash hash;           /* XXH3-128 of the bytes, when asked and a regular file; else zeros */
} rgpu_file_stat;

/* Stat path (n bytes). with_hash: hash the whole file (a process-wide cache
 * keyed by device, inode, size, mtime and ctime spares a second pass). */
rgpu_status rgpu_files_stat(rgpu_files *f, const char *path, size_t n, bool with_hash, rgpu_file_stat *out,
                            char *why, size_t whylen);

typedef struct rgpu_file_entry {
    char name[RGPU_FILES_MAX_NAME + 1];
    uint8_t kind;
    bool writable;
    uint64_t size;
    int64_t mtime_ns;
} rgpu_file_entry;

/* The entries of folder path, sorted by name bytes, "." and ".." left out
 * (malloc'd array, caller frees; more than RGPU_FILES_MAX_LIST: RGPU_ERR_TOO_LARGE).
 * n == 0: the exposed folders themselves. */
rgpu_status rgpu_files_list(rgpu_files *f, const char *path, size_t n, rgpu_file_entry **out, size_t *count,
                            char *why, size_t whylen);

/* An open regular file, checked against the identity a record carries. */
typedef struct rgpu_file_reader rgpu_file_reader;
/* Open path for reading; when want_size/want_hash are given (non-NULL hash)
 * the file must have exactly that size and hash, else RGPU_ERR_CHANGED with a
 * message naming the path and what differs (sizes, hashes in hex). */
rgpu_status rgpu_files_open(rgpu_files *f, const char *path, size_t n, const uint64_t *want_size,
                            const rgpu_hash *want_hash, rgpu_file_reader **out, char *why, size_t whylen);
uint64_t rgpu_file_reader_size(const rgpu_file_reader *r);
/* Bytes [off, off + len) into buf (all of them: a short read is an error;
 * past the end: RGPU_ERR_OUT_OF_BOUNDS naming the range and the file's size). */
rgpu_status rgpu_file_read(rgpu_file_reader *r, uint64_t off, void *buf, size_t len, char *why, size_t whylen);
void rgpu_file_reader_close(rgpu_file_reader *r);

/* ZIP_INDEX: the stored (method 0) entries of the zip at path, with the
 * offset of each entry's data; zip64 understood; a compressed or encrypted
 * entry, an entry whose data lies outside the file, a malformed directory:
 * RGPU_ERR_BAD_ARG naming the path and the entry. The file's identity too. */
typedef struct rgpu_zip_entry {
    char *name;               /* NUL-terminated, inside the index's own allocation */
    uint64_t offset, size;
} rgpu_zip_entry;
typedef struct rgpu_zip_index {
    rgpu_file_stat st;        /* with hash */
    size_t count;
    rgpu_zip_entry *e;
} rgpu_zip_index;
rgpu_status rgpu_files_zip_index(rgpu_files *f, const char *path, size_t n, rgpu_zip_index *out,
                                 char *why, size_t whylen);
void rgpu_zip_index_free(rgpu_zip_index *z);

/* SAVE_ZIP: a zip written as torch.save writes one (stored entries, data
 * aligned to 64 bytes, zip64 where a size or offset needs it, fixed
 * timestamps: the same entries give the same bytes), streamed in entry order.
 * path must lie beneath a --data-rw folder; its last component names a new
 * or existing regular file (a folder or a symlink there: RGPU_ERR_PATH). The
 * bytes go to a temporary file beside it (O_EXCL, mode 0644 & ~umask), which
 * is fsynced, renamed over path, and the folder fsynced: a crash leaves the
 * old file or the new one, never half of one. Any failure removes the
 * temporary file. dry_run (offline tools): nothing is written, only the size
 * and hash are computed. */
typedef struct rgpu_zip_writer rgpu_zip_writer;
rgpu_status rgpu_files_zip_begin(rgpu_files *f, const char *path, size_t n, bool dry_run, rgpu_zip_writer **out,
                                 char *why, size_t whylen);
/* A new entry of size bytes, then its bytes through zip_data (in pieces, size
 * in all) before the next entry or the end. */
rgpu_status rgpu_zip_entry_begin(rgpu_zip_writer *w, const char *name, size_t name_len, uint64_t size,
                                 char *why, size_t whylen);
rgpu_status rgpu_zip_data(rgpu_zip_writer *w, const void *buf, size_t len, char *why, size_t whylen);
/* Central directory, fsync, rename: the file's size and XXH3-128 of its bytes.
 * Frees w, whether it succeeds or not (a failure removes the temporary file).
 * A failed entry_begin or zip_data removes the temporary file at once; w then
 * refuses everything but rgpu_zip_abort. */
rgpu_status rgpu_zip_commit(rgpu_zip_writer *w, uint64_t *size, rgpu_hash *hash, char *why, size_t whylen);
/* Give up: the temporary file is removed, path untouched. Frees w (commit does too). */
void rgpu_zip_abort(rgpu_zip_writer *w);

/* Tests only. rgpu_files_force_walk: resolve by the component walk even
 * where the kernel has openat2. rgpu_zip64_threshold: sizes, offsets and
 * counts at or above it take the zip64 form (0: all of them). */
extern int rgpu_files_force_walk;
extern uint64_t rgpu_zip64_threshold;

#endif
