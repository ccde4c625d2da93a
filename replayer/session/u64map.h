/* u64map.h — open-addressing hash map from nonzero uint64 keys to pointers.
 * Linear probing, backward-shift deletion, power-of-two capacity. Not
 * thread-safe; each session owns its maps. */
#ifndef RGPU_U64MAP_H
#define RGPU_U64MAP_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct u64map { uint64_t *keys; void **vals; size_t cap, len; } u64map;

static inline size_t u64map_slot(uint64_t k, size_t cap) {
    k ^= k >> 33; k *= 0xff51afd7ed558ccdULL; k ^= k >> 33;
    return (size_t)k & (cap - 1);
}

static inline void *u64map_get(const u64map *m, uint64_t k) {
    if (!m->cap || !k) return NULL;
    for (size_t i = u64map_slot(k, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == k) return m->vals[i];
        if (!m->keys[i]) return NULL;
    }
}

static inline bool u64map_grow(u64map *m) {
    size_t cap = m->cap ? m->cap * 2 : 64;
    uint64_t *keys = calloc(cap, sizeof *keys);
    void **vals = calloc(cap, sizeof *vals);
    if (!keys || !vals) { free(keys); free(vals); return false; }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i]) continue;
        size_t j = u64map_slot(m->keys[i], cap);
        while (keys[j]) j = (j + 1) & (cap - 1);
        keys[j] = m->keys[i]; vals[j] = m->vals[i];
    }
    free(m->keys); free(m->vals);
    m->keys = keys; m->vals = vals; m->cap = cap;
    return true;
}

/* Insert or replace; false on out-of-memory or key 0. */
static inline bool u64map_put(u64map *m, uint64_t k, void *v) {
    if (!k) return false;
    if ((m->len + 1) * 4 > m->cap * 3 && !u64map_grow(m)) return false;
    size_t i = u64map_slot(k, m->cap);
    while (m->keys[i] && m->keys[i] != k) i = (i + 1) & (m->cap - 1);
    if (!m->keys[i]) m->len++;
    m->keys[i] = k; m->vals[i] = v;
    return true;
}

/* Remove k; returns its value or NULL. */
static inline void *u64map_del(u64map *m, uint64_t k) {
    if (!m->cap || !k) return NULL;
    size_t i = u64map_slot(k, m->cap);
    while (m->keys[i] != k) {
        if (!m->keys[i]) return NULL;
        i = (i + 1) & (m->cap - 1);
    }
    void *v = m->vals[i];
    m->len--;
    for (size_t j = (i + 1) & (m->cap - 1); m->keys[j]; j = (j + 1) & (m->cap - 1)) {
        size_t h = u64map_slot(m->keys[j], m->cap);
        /* move j back to i if its home h is not in the cyclic range (i, j] */
        bool in_range = (i < j) ? (h > i && h <= j) : (h > i || h <= j);
        if (!in_range) { m->keys[i] = m->keys[j]; m->vals[i] = m->vals[j]; i = j; }
    }
    m->keys[i] = 0; m->vals[i] = NULL;
    return v;
}

static inline void u64map_free(u64map *m) { free(m->keys); free(m->vals); m->keys = NULL; m->vals = NULL; m->cap = m->len = 0; }

#endif
